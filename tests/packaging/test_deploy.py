"""The deployment files: the RPM really builds and ships what slurm.conf and the units name,
the systemd units verify, and the Slurm entry points behave under slurmd's empty environment.

The RPM is built once per module with deploy/rpm/build-rpm --nodeps (Debian's rpmbuild cannot
see build dependencies as RPMs), which takes about 2 s.  Needs `rpmbuild` and `rpm2archive`
(Debian packages rpm and rpm2cpio; CI installs rpm, which depends on rpm2cpio).
"""

from __future__ import annotations

import configparser
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, List, Set

import pytest

from healthcheck import __version__
from tests.packaging import packagedocs

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
SPEC = ROOT / "deploy" / "rpm" / "gpu-healthcheck.spec"
BUILD_RPM = ROOT / "deploy" / "rpm" / "build-rpm"
LIBEXEC = "/usr/libexec/gpu-healthcheck/"
# The package's private directory: nothing of ours goes into any Python's site-packages.
PKGDIR = "/usr/share/gpu-healthcheck/"
UNITDIR = "/usr/lib/systemd/system/"
ENTRY_POINTS = {
    "prolog": ROOT / "prolog" / "gpu-healthcheck-prolog",
    "epilog": ROOT / "epilog" / "gpu-healthcheck-epilog",
    "node-act": ROOT / "deploy" / "slurm" / "gpu-healthcheck-node-act",
}
# The fallback PATH the entry points set when slurmd gives them none.
FALLBACK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _console_script() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = [ln.strip() for ln in cfg["options.entry_points"]["console_scripts"].splitlines() if ln.strip()]
    main = [ln for ln in lines if ln.split("=")[1].strip() == "healthcheck.cli:entry"]
    assert len(main) == 1, lines
    return main[0].split("=")[0].strip()


def _rpm(*args: str) -> str:
    return subprocess.run(["rpm", *args], check=True, capture_output=True, text=True, timeout=30).stdout


# --- the RPM -------------------------------------------------------------------------------

# build-rpm's targets: (arguments, the name el-provides.txt gives it, the RPM's dist tag)
RPM_TARGETS = {"el9": ([], "el9", "el9"),
               "el8-3.11": (["--el", "8", "--python", "3.11"], "el8-3.11", "el8"),
               "el8-3.9": (["--el", "8", "--python", "3.9"], "el8-3.9", "el8.py39")}


def _build_rpm(topdir: Path, args: List[str], dist: str) -> Path:
    if shutil.which("rpmbuild") is None:
        pytest.skip("rpmbuild not installed (Debian package rpm)")
    proc = subprocess.run([str(BUILD_RPM), "--nodeps", *args, str(topdir)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, f"build-rpm failed:\n{proc.stdout}\n{proc.stderr}"
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.name == f"gpu-healthcheck-{__version__}-1.{dist}.noarch.rpm", path
    assert (topdir / "SOURCES" / f"gpu-healthcheck-{__version__}.tar.gz").is_file()
    return path


@pytest.fixture(scope="module")
def rpm_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The EL9 RPM (the default target)."""
    return _build_rpm(tmp_path_factory.mktemp("rpmtop"), [], "el9")


@pytest.fixture(scope="module")
def rpm_files(rpm_file: Path) -> Dict[str, Dict[str, str]]:
    """path -> {"mode": "-rw-r--r--", "flags": "cn", "user": "root", "group": "root"}."""
    out = _rpm("-qp", "--qf", "[%{FILENAMES}\t%{FILEMODES:perms}\t%{FILEFLAGS:fflags}\t"
                              "%{FILEUSERNAME}\t%{FILEGROUPNAME}\n]", str(rpm_file))
    files = {}
    for line in out.splitlines():
        name, mode, flags, user, group = line.split("\t")
        files[name] = {"mode": mode, "flags": flags, "user": user, "group": group}
    return files


@pytest.fixture(scope="module")
def rpm_root(rpm_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The RPM's payload unpacked into a directory (rpm2archive, no rpm database involved)."""
    if shutil.which("rpm2archive") is None:
        pytest.skip("rpm2archive not installed (Debian package rpm2cpio)")
    root = tmp_path_factory.mktemp("rpmroot")
    with open(rpm_file, "rb") as f:
        tgz = subprocess.run(["rpm2archive", "-"], stdin=f, capture_output=True, check=True,
                             timeout=30).stdout
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):  # 3.12+ and recent 3.9-3.11 patch releases
            tar.extractall(root, filter="data")
        else:
            tar.extractall(root)
    return root


def _check_package_is_private(files: List[str]) -> None:
    """Every module of every subpackage under PKGDIR, nothing in a site-packages."""
    inits = [f for f in files if f.endswith("/healthcheck/__init__.py")]
    assert inits == [f"{PKGDIR}healthcheck/__init__.py"], inits
    package = ROOT / "healthcheck"
    modules = sorted(str(p.relative_to(package)) for p in package.rglob("*.py"))
    assert {"read/__init__.py", "decide/__init__.py", "act/__init__.py", "report/__init__.py",
            "checks/__init__.py"} <= set(modules)
    prefix = f"{PKGDIR}healthcheck/"
    shipped = sorted(f[len(prefix):] for f in files if f.startswith(prefix) and f.endswith(".py"))
    assert shipped == modules
    # PyPI's healthcheck (a Flask add-on) has the same top-level name: nothing of ours where a
    # Python looks by itself, and no metadata pip would take for an installed distribution.
    public = [f for f in files if "-packages" in f or ".dist-info" in f or ".egg-info" in f
              or f.startswith(("/usr/lib/python", "/usr/lib64/python"))]
    assert not public, public


def test_rpm_version_matches_the_package(rpm_file: Path) -> None:
    assert _rpm("-qp", "--qf", "%{VERSION}", str(rpm_file)) == __version__
    assert _rpm("-qp", "--qf", "%{ARCH}", str(rpm_file)) == "noarch"
    # rpmbuild -ta from a tarball uses the spec's own fallback version: keep it in step.
    m = re.search(r"^%\{!\?hc_version:%global hc_version (\S+)\}", SPEC.read_text(), re.M)
    assert m and m.group(1) == __version__, "bump the fallback hc_version in the spec"


def test_rpm_ships_entry_points_config_units_state_dir_and_package(
        rpm_files: Dict[str, Dict[str, str]]) -> None:
    script = _console_script()
    assert rpm_files[f"/usr/bin/{script}"]["mode"] == "-rwxr-xr-x"
    for name in ("gpu-healthcheck-prolog", "gpu-healthcheck-epilog", "gpu-healthcheck-node-act",
                 "gpu-healthcheck-gpus-idle"):
        assert rpm_files[LIBEXEC + name]["mode"] == "-rwxr-xr-x", name
    conf = rpm_files["/etc/gpu-healthcheck/config.toml"]
    # %config(noreplace), 0644 root: the tool refuses a config others can write.
    assert set(conf["flags"]) >= {"c", "n"} and conf["mode"] == "-rw-r--r--", conf
    assert (conf["user"], conf["group"]) == ("root", "root")
    state = rpm_files["/var/lib/gpu-healthcheck"]
    assert state["mode"] == "drwx------" and state["user"] == "root", state
    for unit in ("gpu-healthcheck.service", "gpu-healthcheck.timer"):
        assert rpm_files[UNITDIR + unit]["mode"] == "-rw-r--r--", unit
    for doc in ("README.md", "deploy/README.md", "deploy/slurm/README.md",
                "deploy/slurm/slurm.conf.example", "deploy/slurm/plugstack.conf.example"):
        assert f"/usr/share/doc/gpu-healthcheck/{doc}" in rpm_files, doc
        assert "d" in rpm_files[f"/usr/share/doc/gpu-healthcheck/{doc}"]["flags"], doc  # %doc
    # the SPANK plugin's source, for the one-command build against the site's Slurm
    for src in ("Makefile", "gpu_healthcheck.c"):
        assert rpm_files[f"{PKGDIR}spank/{src}"]["mode"] == "-rw-r--r--", src
    # the docs/ pages README.md links to, beside it, and nothing else of docs/
    pages = sorted(f"/usr/share/doc/gpu-healthcheck/docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    assert pages and sorted(f for f in rpm_files
                            if f.startswith("/usr/share/doc/gpu-healthcheck/docs/")) == pages

    _check_package_is_private(list(rpm_files))
    assert "/usr/share/man/man8/gpu-healthcheck.8.gz" in rpm_files
    for vendored in ("pynvml.py", "tomli/__init__.py", "tomli/_parser.py"):
        assert f"{PKGDIR}vendor/{vendored}" in rpm_files, vendored
    for licence in ("LICENSE", "LICENSE.pynvml", "LICENSE.tomli"):
        assert f"/usr/share/licenses/gpu-healthcheck/{licence}" in rpm_files, licence
    # pip's console scripts name the build host's Python: not shipped.
    assert not [f for f in rpm_files if f.startswith("/usr/bin/") and f != f"/usr/bin/{script}"]


def _rpm_plain_files(rpm_files: Dict[str, Dict[str, str]]) -> Set[str]:
    return {f for f, info in rpm_files.items() if not info["mode"].startswith("d")}


def test_rpm_ships_exactly_the_package_docs_list(rpm_files: Dict[str, Dict[str, str]]) -> None:
    """deploy/package-docs.list, the one list both packages install (with the runbook and the
    mixin's generated files: test_deb.py's test_every_entry_of_the_package_docs_list_is_in_the_tree
    says when the tree lacks them)."""
    expected = set().union(*packagedocs.expected_files().values())
    shipped = {f for f in _rpm_plain_files(rpm_files) if f.startswith(tuple(packagedocs.DESTS.values()))}
    assert shipped == expected
    for f in expected:
        assert rpm_files[f]["mode"] == "-rw-r--r--", f


@pytest.mark.parametrize("source", ["--help", "man page", "README install"])
def test_every_installed_path_the_docs_name_is_in_the_rpm(
        source: str, rpm_files: Dict[str, Dict[str, str]]) -> None:
    """--help, the man page and README's install section (its links too) name installed paths:
    `rpm -qlp` lists each one.  The man page names docs/runbook.md and the monitoring
    directory: those pass once the runbook and the mixin's generated files are in the tree."""
    named = packagedocs.named_paths()[source]
    assert named, f"{source} names no installed path"
    missing = packagedocs.missing_from(named, _rpm_plain_files(rpm_files))
    assert not missing, f"{source} names {missing}, which the RPM does not ship"


def test_rpm_dependencies_and_scriptlets(rpm_file: Path) -> None:
    requires = _rpm("-qp", "--requires", str(rpm_file)).splitlines()
    for dep in ("python3 >= 3.9", "python3-psutil", "python(abi) = 3.9"):
        assert dep in requires, (dep, requires)
    # No EL repository ships nvidia-ml-py or (for 3.9) tomli: vendored, never required.
    assert not [r for r in requires if "nvidia-ml-py" in r or "tomli" in r or "dist(" in r], requires
    assert "python3-systemd" in _rpm("-qp", "--recommends", str(rpm_file)).split()
    scripts = _rpm("-qp", "--scripts", str(rpm_file))
    # Stops and disables the timer on erase; never enables it on install (a site chooses it or
    # HealthCheckProgram).
    assert "gpu-healthcheck.timer" in scripts
    assert not re.search(r"systemctl[^\n]*\benable\b", scripts), scripts


def test_packaged_console_script_runs_the_packaged_module(rpm_root: Path, tmp_path: Path) -> None:
    """The launcher imports the package from its private directory, ahead of any other
    `healthcheck` on sys.path (here one on PYTHONPATH, which comes before every site-packages)."""
    script = rpm_root / "usr" / "bin" / _console_script()
    text = script.read_text()
    first = text.splitlines()[0]
    assert re.fullmatch(r"#!/usr/bin/python3(\.\d+)? -s", first), first
    quoted = '"' + PKGDIR.rstrip("/")
    assert text.count(quoted) == 2, "the private directory and its vendor/ on sys.path"
    # The same launcher, its directories pointed into the unpacked RPM.
    relocated = tmp_path / "gpu-healthcheck"
    relocated.write_text(text.replace(quoted, f'"{rpm_root}{PKGDIR.rstrip("/")}'))
    decoy = tmp_path / "decoy" / "healthcheck"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text('raise ImportError("not gpu-healthcheck")\n')
    env = {"PATH": os.environ.get("PATH", FALLBACK_PATH), "PYTHONPATH": str(decoy.parent),
           "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-s", "-v", str(relocated), "--version"],
                          capture_output=True, text=True, timeout=30, env=env, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert __version__ in proc.stdout
    imported = re.findall(r"^# code object from '?(.*/healthcheck/cli\.py)'?$", proc.stderr, re.M)
    assert imported == [f"{rpm_root}{PKGDIR}healthcheck/cli.py"], imported


def _el_provides() -> Dict[str, List[str]]:
    """deploy/rpm/el-provides.txt: target -> the capabilities its stock repositories provide."""
    provides: Dict[str, List[str]] = {}
    for raw in (ROOT / "deploy" / "rpm" / "el-provides.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            target, capability = line.split(None, 1)
            provides.setdefault(target, []).append(capability)
    return provides


@pytest.mark.parametrize("target", sorted(RPM_TARGETS))
def test_rpm_requires_only_what_stock_el_provides(target: str, tmp_path: Path) -> None:
    args, listed, dist = RPM_TARGETS[target]
    rpm_path = _build_rpm(tmp_path, args, dist)
    provides = _el_provides()
    stock = set(provides[listed]) | {c.replace("VERSION-RELEASE", f"{__version__}-1.{dist}")
                                     for c in provides["all"]}
    requires = set(_rpm("-qp", "--requires", str(rpm_path)).splitlines())
    recommends = set(_rpm("-qp", "--recommends", str(rpm_path)).splitlines())
    assert requires - stock == set(), f"{target}: not in stock {target} (el-provides.txt)"
    assert recommends - stock == set(), f"{target}: recommends what stock {target} lacks"
    files = _rpm("-qpl", str(rpm_path)).splitlines()
    _check_package_is_private(files)
    # The docs and monitoring files, in every target's package (`rpm -qlp`).
    missing = set().union(*packagedocs.expected_files().values()) - set(files)
    assert not missing, f"{target}: not in the RPM: {sorted(missing)}"
    interpreter = "/usr/bin/python3" if target == "el9" else f"/usr/bin/python{target.split('-')[1]}"
    assert interpreter in requires
    # Stated in the spec: rpm generates it only for modules under /usr/lib/python3.X/.
    assert f"python(abi) = {'3.11' if target == 'el8-3.11' else '3.9'}" in requires
    if shutil.which("rpmlint"):
        lint = subprocess.run(["rpmlint", "-c", str(ROOT / "deploy" / "rpm" / "rpmlint.toml"),
                               str(rpm_path)], capture_output=True, text=True, timeout=120)
        summary = [ln for ln in lint.stdout.splitlines() if "packages and" in ln]
        assert lint.returncode == 0 and summary and " 0 errors, 0 warnings" in summary[0], lint.stdout


def _libexec_paths(text: str) -> List[str]:
    return sorted(set(re.findall(re.escape(LIBEXEC) + r"[A-Za-z0-9._-]+", text)))


@pytest.mark.parametrize("doc", ["deploy/slurm/slurm.conf.example", "deploy/slurm/README.md",
                                 "deploy/systemd/gpu-healthcheck.service"])
def test_every_libexec_path_the_docs_name_is_in_the_rpm(
        doc: str, rpm_files: Dict[str, Dict[str, str]]) -> None:
    paths = _libexec_paths((ROOT / doc).read_text())
    assert paths, f"{doc} names nothing under {LIBEXEC}"
    missing = [p for p in paths if p not in rpm_files]
    assert not missing, f"{doc} names {missing}, which the RPM does not ship"


# --- systemd units -------------------------------------------------------------------------

def _unit(name: str) -> Dict[str, Dict[str, List[str]]]:
    sections: Dict[str, Dict[str, List[str]]] = {}
    current = None
    for raw in (SYSTEMD / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        assert current is not None, line
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_service_runs_the_console_script_as_a_oneshot() -> None:
    service = _unit("gpu-healthcheck.service")["Service"]
    assert service["Type"] == ["oneshot"]
    assert service["ExecStart"] == [f"/usr/bin/{_console_script()} --node --act"]
    assert sorted(service["SuccessExitStatus"][0].split()) == ["1", "2", "3"]
    assert service["StateDirectory"] == ["gpu-healthcheck"]
    assert service["StateDirectoryMode"] == ["0700"]
    timeout = service["TimeoutStartSec"][0]
    assert timeout.isdigit() and int(timeout) >= 2 * 70, "the tool's own worst case is ~70 s"
    # Hardening that would hide what the checks read must stay off.
    for forbidden in ("PrivateDevices", "ProtectKernelLogs", "DeviceAllow", "ProtectClock",
                      "PrivateNetwork", "SystemCallFilter", "MemoryDenyWriteExecute"):
        assert forbidden not in service, forbidden


def test_timer_every_five_minutes_spread_over_the_fleet() -> None:
    timer = _unit("gpu-healthcheck.timer")
    assert timer["Timer"]["OnCalendar"] == ["*:0/5"]
    assert timer["Timer"]["Persistent"] == ["false"]
    assert timer["Timer"]["RandomizedDelaySec"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    assert "Install" not in _unit("gpu-healthcheck.service")  # started by the timer only


def test_units_verify_with_systemd_analyze(rpm_root: Path, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    # verify checks that every Exec*= program exists: point them at the unpacked RPM, which
    # also proves the package ships what its units run.
    for name in ("gpu-healthcheck.service", "gpu-healthcheck.timer"):
        text = (rpm_root / UNITDIR.lstrip("/") / name).read_text()
        assert text == (SYSTEMD / name).read_text()
        text = re.sub(r"(?m)^(Exec\w+=)(/usr/\S+)",
                      lambda m: m.group(1) + str(rpm_root) + m.group(2), text)
        (tmp_path / name).write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no",
                           str(tmp_path / "gpu-healthcheck.timer"),
                           str(tmp_path / "gpu-healthcheck.service")],
                          capture_output=True, text=True, timeout=60)
    ours = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "gpu-healthcheck" in ln]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


# --- the entry points under slurmd's environment --------------------------------------------

def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.mark.parametrize("entry,args", [("prolog", "--prolog"), ("epilog", "--epilog"),
                                        ("node-act", "--node --act")])
def test_entry_point_honours_path_and_passes_the_exit_status(
        entry: str, args: str, tmp_path: Path) -> None:
    record = tmp_path / "args"
    _stub(tmp_path, "gpu-healthcheck", f'echo "$@" > {record}\nexit "${{STUB_RC:-0}}"\n')
    proc = subprocess.run(["env", "-i", f"PATH={tmp_path}", "/bin/sh", str(ENTRY_POINTS[entry])],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert record.read_text().strip() == args
    # A failing prolog is what makes Slurm requeue the job: the status must come through.
    proc = subprocess.run(["env", "-i", f"PATH={tmp_path}", "STUB_RC=1", "/bin/sh",
                           str(ENTRY_POINTS[entry])], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1


@pytest.mark.parametrize("entry", ["prolog", "epilog"])
def test_missing_install_never_fails_the_job(entry: str, tmp_path: Path) -> None:
    script = str(ENTRY_POINTS[entry])
    # PATH set but gpu-healthcheck not on it.
    proc = subprocess.run(["env", "-i", f"PATH={tmp_path}", "/bin/sh", script],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "gpu-healthcheck not found" in proc.stderr and "job not checked" in proc.stderr

    # PATH unset, as slurmd runs it: the script falls back to the standard directories.
    found = [d for d in FALLBACK_PATH.split(":") if os.access(os.path.join(d, "gpu-healthcheck"), os.X_OK)]
    if found:
        pytest.skip(f"gpu-healthcheck is installed in {found[0]}, on the fallback PATH")
    proc = subprocess.run(["env", "-i", "/bin/sh", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert f"gpu-healthcheck not found on PATH={FALLBACK_PATH}" in proc.stderr


@pytest.mark.parametrize("output,rc,expected", [
    ("", 0, 0),                                                  # idle: run the check
    ("No running processes found\n", 0, 0),
    ("4242, 00000000:18:00.0, python\n", 0, 1),                  # a job's process: skip
    ("", 9, 0),                                                  # NVML error: the check must see it
])
def test_gpus_idle_condition(output: str, rc: int, expected: int, tmp_path: Path) -> None:
    _stub(tmp_path, "nvidia-smi", f"printf '%s' '{output}'\nexit {rc}\n")
    proc = subprocess.run(["env", "-i", f"PATH={tmp_path}:/usr/bin:/bin", "/bin/sh",
                           str(SYSTEMD / "gpu-healthcheck-gpus-idle")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == expected, proc.stderr
    if expected:
        assert "skipped, 1 process(es)" in proc.stderr and "4242" in proc.stderr


def test_gpus_idle_condition_without_nvidia_smi(tmp_path: Path) -> None:
    proc = subprocess.run(["env", "-i", f"PATH={tmp_path}", "/bin/sh",
                           str(SYSTEMD / "gpu-healthcheck-gpus-idle")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


# --- deploy/slurm/README.md's table of Slurm behaviour ------------------------------------

def test_the_slurm_behaviour_table_has_a_tested_column_per_version_and_a_row_per_observation() -> None:
    """Every cell comes from tests/slurm/test_slurm_versions.py: one column per version it holds
    observations for, one row per observation (named in the first column)."""
    from tests.slurm.test_slurm_versions import OBSERVED

    text = (ROOT / "deploy" / "slurm" / "README.md").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Behaviour the tool relies on"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append(line)
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header[1:] == [f"{v} (tested)" for v in sorted(OBSERVED)], header
    for row in rows[1:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == len(header) and all(cells), row
    keys = set().union(*(set(column) for column in OBSERVED.values()))
    missing = [k for k in sorted(keys) if f"`{k}`" not in text]
    assert not missing, f"observations without a row in deploy/slurm/README.md: {missing}"
