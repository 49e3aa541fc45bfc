"""The Python packages: the sdist carries what its own tests need, the wheel's console scripts
are absolute paths that Prolog=, Epilog= and HealthCheckProgram= can name, and the LICENSE.

Built with Debian's /usr/bin/python3 (its pip, setuptools and wheel: what build-rpm uses too),
offline, from a copy of the files git lists, so the tree under test is never written to.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

from healthcheck import __version__
from healthcheck.act.scontrol import DEFAULT_PATH

ROOT = Path(__file__).resolve().parents[2]
BUILD_PYTHON = "/usr/bin/python3"
SCRIPTS = {"gpu-healthcheck": "healthcheck.cli:entry",
           "gpu-healthcheck-prolog": "healthcheck.entrypoints:prolog",
           "gpu-healthcheck-epilog": "healthcheck.entrypoints:epilog",
           "gpu-healthcheck-node-act": "healthcheck.entrypoints:node_act"}


def _git_files() -> List[str]:
    proc = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                           "--exclude-standard"], capture_output=True, timeout=60)
    if proc.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): nothing to compare the sdist with")
    return sorted(f for f in proc.stdout.decode().split("\0") if f and (ROOT / f).is_file())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    probe = subprocess.run([BUILD_PYTHON, "-c", "import setuptools, wheel, pip"],
                           capture_output=True, timeout=60) if os.path.exists(BUILD_PYTHON) else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"{BUILD_PYTHON} lacks pip, setuptools or wheel (Debian: python3-pip)")
    work = tmp_path_factory.mktemp("pkg")
    src = work / "src"
    for name in _git_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    dist = work / "dist"
    env = dict(os.environ, PIP_ROOT_USER_ACTION="ignore", PYTHONDONTWRITEBYTECODE="1")
    sdist = subprocess.run([BUILD_PYTHON, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_sdist(sys.argv[1]))", str(dist)],
                           cwd=src, capture_output=True, text=True, timeout=300, env=env)
    assert sdist.returncode == 0, sdist.stderr[-3000:]
    sdist_path = dist / sdist.stdout.strip().splitlines()[-1]
    unpacked = work / "unpacked"
    with tarfile.open(sdist_path) as tar:
        if hasattr(tarfile, "data_filter"):  # 3.12+ and recent 3.9-3.11 patch releases
            tar.extractall(unpacked, filter="data")
        else:
            tar.extractall(unpacked)
    [sdist_root] = list(unpacked.iterdir())
    # The wheel from the unpacked sdist: proves the sdist builds.
    wheel = subprocess.run([BUILD_PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "--no-index", "--disable-pip-version-check", "--wheel-dir", str(dist),
                            str(sdist_root)], capture_output=True, text=True, timeout=300, env=env)
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    [wheel_path] = list(dist.glob("*.whl"))
    return {"sdist": sdist_path, "sdist_root": sdist_root, "wheel": wheel_path, "work": work}


def test_license_is_mit_and_named_in_the_metadata() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "gpu-healthcheck developers" in text
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["license"] == "MIT"
    assert cfg["metadata"]["license_files"].split() == ["LICENSE"]


def test_sdist_carries_every_file_git_tracks(built: Dict[str, Path]) -> None:
    with tarfile.open(built["sdist"]) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() and "/" in m.name}
    # .gitignore describes the checkout, not the release.
    expected = set(_git_files()) - {".gitignore"}
    missing = sorted(expected - names)
    assert not missing, f"MANIFEST.in leaves out: {missing[:20]}"
    for needed in ("LICENSE", "MANIFEST.in", "prolog/gpu-healthcheck-prolog", "tests/fakegpu/Makefile",
                   "deploy/rpm/gpu-healthcheck.spec", "deploy/deb/build-deb", "docs/gpu-healthcheck.8",
                   "vendor/pynvml.py"):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/fakegpu/build/")]


def test_sdist_collects_its_own_tests(built: Dict[str, Path]) -> None:
    root = built["sdist_root"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "tests"], cwd=root, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    collected = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    # Every test module of the checkout is collected from the sdist.
    modules = {ln.split("::", 1)[0] for ln in collected}
    # The checkout's own test modules: the files git lists (tracked, or new and not ignored), not
    # whatever lies below tests/ (the peer's venv in tests/bench/.peer-venv holds other
    # projects' tests).
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "tests"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert modules == {f for f in listed if Path(f).name.startswith("test_") and f.endswith(".py")}


def test_wheel_has_the_package_the_console_scripts_and_the_license(built: Dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as whl:
        names = set(whl.namelist())
        info = f"gpu_healthcheck-{__version__}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        licence = whl.read(f"{info}/LICENSE").decode() if f"{info}/LICENSE" in names else ""
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "healthcheck").rglob("*.py")}
    assert modules <= names
    assert not [n for n in names if n.startswith(("tests/", "vendor/", "pynvml"))]
    cfg = configparser.ConfigParser()
    cfg.read_string(entry_points)
    assert dict(cfg["console_scripts"]) == SCRIPTS
    assert licence.startswith("MIT License")


@pytest.fixture(scope="module")
def installed(built: Dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed with pip alone (--target), scripts bound to the test's interpreter."""
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--disable-pip-version-check", "--target", str(target), str(built["wheel"])],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PIP_ROOT_USER_ACTION="ignore"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for script in SCRIPTS:
        first = (target / "bin" / script).read_text().splitlines()[0]
        assert first.startswith("#!/"), (script, first)  # an absolute interpreter
    return target


def _slurmd_env(node, site: Path, **extra: str) -> List[str]:
    """`env -i` as slurmd runs a Prolog: no PATH; the fake GPUs and a private config."""
    env = {"LD_LIBRARY_PATH": str(node.fake), "FAKEGPU_SCENARIO": str(node.scenario),
           "GPU_HEALTHCHECK_CONFIG": str(node.config_path), "PYTHONPATH": str(site), **extra}
    return ["env", "-i", *(f"{k}={v}" for k, v in env.items())]


def test_console_entry_points_behave_like_the_shell_scripts(installed: Path, node) -> None:
    calls = node.tmp / "scontrol.calls"
    shown = node.tmp / "show-nodes.txt"
    shown.write_text("NodeName=gpu-a Arch=x86_64 Gres=gpu:8 State=IDLE Partitions=gpu "
                     "CfgTRES=cpu=16 AllocTRES= CurrentWatts=0\n")
    stub = node.tmp / "no-scontrol"  # the scontrol the node's config names
    stub.write_text(f'#!/bin/sh\necho "PATH=$PATH $*" >> "{calls}"\n'
                    f'case "$1" in -o) cat "{shown}";; esac\nexit 0\n')
    stub.chmod(0o755)
    job = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "0,1"}
    bin_ = installed / "bin"

    # Healthy: the prolog passes (its own arguments ignored, as `exec gpu-healthcheck --prolog`).
    proc = subprocess.run([*_slurmd_env(node, installed, **job), str(bin_ / "gpu-healthcheck-prolog"),
                           "--node"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (node.state_dir / "jobs" / "42.json").is_file(), "the prolog wrote the job's baseline"
    proc = subprocess.run([*_slurmd_env(node, installed), str(bin_ / "gpu-healthcheck-node-act")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

    # A DBE during the job: the epilog drains through scontrol and exits non-zero; scontrol
    # (a child) saw the fallback PATH, as under the shell script's PATH=${PATH:-...}.
    node.scenario.write_text("gpus = 8\ngpu.1.ecc.volatile.uncorrected = 2\n")
    proc = subprocess.run([*_slurmd_env(node, installed, **job), str(bin_ / "gpu-healthcheck-epilog")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = calls.read_text().splitlines()
    drain = [ln for ln in lines if " update " in f" {ln} " and "State=DRAIN" in ln]
    assert drain and "ecc.volatile_uncorrected=2" in drain[0], lines
    assert all(ln.startswith(f"PATH={DEFAULT_PATH} ") for ln in lines), lines

    # Where PATH is set, it is honoured.
    calls.unlink()
    (node.state_dir / "pending-drain.json").unlink(missing_ok=True)
    proc = subprocess.run([*_slurmd_env(node, installed, PATH="/usr/bin:/bin", **job),
                           str(bin_ / "gpu-healthcheck-epilog")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert all(ln.startswith("PATH=/usr/bin:/bin ") for ln in calls.read_text().splitlines())


def test_vendored_modules_are_python39_and_tomli_reads_our_config_as_tomllib_does() -> None:
    import ast
    import importlib.util

    vendor = ROOT / "vendor"
    sources = [vendor / "pynvml.py", *sorted((vendor / "tomli").glob("*.py"))]
    for path in sources:  # EL9's and EL8's python39 are the oldest interpreters that load them
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
    for licence in ("LICENSE.pynvml", "LICENSE.tomli"):
        assert (vendor / licence).read_text().strip(), licence
    spec = importlib.util.spec_from_file_location(
        "vendored_tomli", vendor / "tomli" / "__init__.py",
        submodule_search_locations=[str(vendor / "tomli")])
    assert spec is not None and spec.loader is not None
    vendored = importlib.util.module_from_spec(spec)
    sys.modules["vendored_tomli"] = vendored
    try:
        spec.loader.exec_module(vendored)
        tomllib = pytest.importorskip("tomllib")  # the reference: Python 3.11+

        text = (ROOT / "deploy" / "slurm" / "config.toml").read_text()
        assert vendored.loads(text) == tomllib.loads(text)
        with pytest.raises(vendored.TOMLDecodeError):
            vendored.loads("state_dir = \n")
    finally:
        del sys.modules["vendored_tomli"]
