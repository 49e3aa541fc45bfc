"""The .deb: what `make deb` builds, and a real dpkg -i / run / -r / --purge round trip.

The round trip (tests/lib/deb_roundtrip.sh) runs dpkg in a throwaway root: an overlay of this
machine's own / under a tmpfs, in a private mount namespace, with a fresh /run.  dpkg checks
Depends against what is really installed, the maintainer scripts really run, and every write
lands in the tmpfs, so the host's /usr, /etc/gpu-healthcheck, /var/lib/gpu-healthcheck, dpkg
database and services are never touched (the alternative, `dpkg -i` on the host in CI only,
would make CI leave a package behind and could not run in the suite).  Needs root, unshare
and overlayfs; elsewhere it skips, except under .ci/run (GPU_HEALTHCHECK_REQUIRE_PACKAGING=1),
where a skip would hide a broken package and so fails instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Set

import pytest

from healthcheck import __version__

ROOT = Path(__file__).resolve().parents[2]
BUILD_DEB = ROOT / "deploy" / "deb" / "build-deb"
ROUNDTRIP = ROOT / "tests" / "lib" / "deb_roundtrip.sh"
# The package's private directory: nothing of ours goes into the system Python's dist-packages.
PKGDIR = "/usr/share/gpu-healthcheck/"
# Where the round trip plants another `healthcheck` (as an install of PyPI's would sit).
DECOY = "/usr/lib/python3/dist-packages/healthcheck/__init__.py"
LIBEXEC = "/usr/libexec/gpu-healthcheck/"
CONFFILE = "/etc/gpu-healthcheck/config.toml"
STATE = "/var/lib/gpu-healthcheck/"
# What dpkg, apt and man-db's trigger keep for themselves in the throwaway root.
BOOKKEEPING = ("/var/lib/dpkg/", "/var/log/", "/var/cache/man/", "/var/cache/debconf/",
               "/var/cache/apt/", "/var/lib/apt/")


def _unavailable(reason: str) -> None:
    if os.environ.get("GPU_HEALTHCHECK_REQUIRE_PACKAGING"):
        pytest.fail(f"required by GPU_HEALTHCHECK_REQUIRE_PACKAGING but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("dpkg-deb") is None:
        _unavailable("dpkg-deb not installed")
    out = tmp_path_factory.mktemp("deb")
    proc = subprocess.run([str(BUILD_DEB), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path == out / f"gpu-healthcheck_{__version__}_all.deb" and path.is_file()
    return path


def _deb(*args: str) -> str:
    return subprocess.run(["dpkg-deb", *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout


@pytest.fixture(scope="module")
def contents(deb: Path) -> Dict[str, str]:
    """path -> mode string, e.g. "-rwxr-xr-x"."""
    files = {}
    for line in _deb("-c", str(deb)).splitlines():
        mode, _owner, _size, _date, _time, name = line.split(None, 5)
        assert _owner == "root/root", line
        files[name[1:].rstrip("/") or "/"] = mode
    return files


def test_deb_ships_the_package_entry_points_man_page_config_and_units(contents: Dict[str, str]) -> None:
    assert contents["/usr/bin/gpu-healthcheck"] == "-rwxr-xr-x"
    for name in ("prolog", "epilog", "node-act", "gpus-idle"):
        assert contents[f"{LIBEXEC}gpu-healthcheck-{name}"] == "-rwxr-xr-x", name
    assert contents[CONFFILE] == "-rw-r--r--"
    assert "/usr/share/man/man8/gpu-healthcheck.8.gz" in contents
    for unit in ("gpu-healthcheck.service", "gpu-healthcheck.timer"):
        assert contents[f"/usr/lib/systemd/system/{unit}"] == "-rw-r--r--"
    for doc in ("README.md", "copyright", "slurm.conf.example"):
        assert f"/usr/share/doc/gpu-healthcheck/{doc}" in contents, doc
    # the docs/ pages README.md links to, beside it, and nothing else of docs/
    pages = sorted(f"/usr/share/doc/gpu-healthcheck/docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    assert pages and sorted(f for f in contents if f.startswith("/usr/share/doc/gpu-healthcheck/docs/")) == pages
    package = ROOT / "healthcheck"
    modules = sorted(str(p.relative_to(ROOT)) for p in package.rglob("*.py"))
    assert {"healthcheck/read/__init__.py", "healthcheck/checks/__init__.py"} <= set(modules)
    prefix = PKGDIR + "healthcheck/"
    shipped = sorted(f[len(PKGDIR):] for f in contents if f.startswith(prefix) and f.endswith(".py"))
    assert shipped == modules  # every module of every subpackage
    assert [f for f in contents if f.endswith("/healthcheck/__init__.py")] == [prefix + "__init__.py"]
    # Nothing in any Python's site-packages or dist-packages, where PyPI's healthcheck sits.
    assert not [f for f in contents if "-packages" in f or f.startswith("/usr/lib/python")]
    assert f"{PKGDIR}vendor/pynvml.py" in contents
    assert f"{PKGDIR}vendor/tomli/__init__.py" in contents
    assert not [f for f in contents if "__pycache__" in f or f.endswith(".pyc")]


def test_launcher_puts_the_private_directory_first() -> None:
    text = (ROOT / "deploy" / "gpu-healthcheck.in").read_text()
    insert = f'sys.path.insert(0, "{PKGDIR.rstrip("/")}")'
    assert insert in text and text.index(insert) < text.index("from healthcheck")
    # The prolog's cost: the launcher imports nothing before the package does.
    code = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert [ln for ln in code if ln.startswith(("import", "from"))] == [
        "import sys", "from healthcheck.cli import entry  # noqa: E402"]


@pytest.mark.parametrize("tree", ["git checkout", "inside another checkout"])
def test_deb_packages_the_listed_files_not_caches(tree: str, tmp_path: Path,
                                                  contents: Dict[str, str]) -> None:
    """A tree with the caches a test run leaves (`make deb` after `make test`): as a git checkout
    the .deb holds what git lists; elsewhere (an unpacked sdist, even inside another
    repository's work tree) the tree less __pycache__.  The same files either way."""
    if shutil.which("git") is None:
        _unavailable("git not installed")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): no list of files to copy")
    outer = tmp_path / "outer"
    src = outer / "src"
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    git = ["git", "-c", "init.defaultBranch=main"]
    if tree == "git checkout":
        subprocess.run([*git, "init", "-q", str(src)], check=True, timeout=60)
        subprocess.run(["git", "-C", str(src), "add", "-A"], check=True, timeout=60)
    else:  # a repository above that ignores the tree: listing its files from there gives none
        subprocess.run([*git, "init", "-q", str(outer)], check=True, timeout=60)
        (outer / ".gitignore").write_text("src/\n")
    for cache in ("vendor/tomli/__pycache__/_parser.cpython-311.pyc",
                  "healthcheck/__pycache__/cli.cpython-311.pyc",
                  "healthcheck/read/__pycache__/nvml.cpython-311.pyc"):
        (src / cache).parent.mkdir(parents=True, exist_ok=True)
        (src / cache).write_bytes(b"\0")
    out = tmp_path / "out"
    proc = subprocess.run([str(src / "deploy" / "deb" / "build-deb"), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names = {line.split(None, 5)[5][1:].rstrip("/") or "/"
             for line in _deb("-c", proc.stdout.strip().splitlines()[-1]).splitlines()}
    assert names == set(contents)


def test_deb_control_depends_conffile_and_scripts(deb: Path, tmp_path: Path) -> None:
    fields = {k: _deb("-f", str(deb), k).strip() for k in ("Package", "Version", "Architecture",
                                                              "Depends", "Recommends")}
    assert fields == {"Package": "gpu-healthcheck", "Version": __version__, "Architecture": "all",
                      "Depends": "python3 (>= 3.9), python3-psutil", "Recommends": "python3-systemd"}
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "DEBIAN")], check=True, timeout=60)
    assert (tmp_path / "DEBIAN" / "conffiles").read_text().split() == [CONFFILE]
    scripts = "".join((tmp_path / "DEBIAN" / s).read_text() for s in ("postinst", "prerm", "postrm"))
    # Units are installed, never enabled: a site chooses the timer or HealthCheckProgram.
    assert not re.search(r"systemctl[^\n]*\benable\b", scripts), scripts
    assert "rm -rf /var/lib/gpu-healthcheck" in (tmp_path / "DEBIAN" / "postrm").read_text()
    for path in ("postinst", "prerm", "postrm"):
        proc = subprocess.run(["sh", "-n", str(tmp_path / "DEBIAN" / path)], capture_output=True,
                              text=True, timeout=30)
        assert proc.returncode == 0, (path, proc.stderr)


def _sections(log: str) -> Dict[str, List[str]]:
    """'== NAME' headers -> the lines under them (a repeated name gets ' 2')."""
    sections: Dict[str, List[str]] = {}
    current = "start"
    for line in log.splitlines():
        if line.startswith("== "):
            current = line[3:]
            while current in sections:
                current += " 2"
            sections[current] = []
        else:
            sections.setdefault(current, []).append(line)
    return sections


def _changed(lines: List[str]) -> Set[str]:
    return {ln.split(" ", 1)[1] for ln in lines if ln[:2] in ("f ", "l ", "c ")}


def _roundtrip(deb: Path, tmp_path_factory: pytest.TempPathFactory, fakegpu: Path,
               *seed: str) -> Dict[str, List[str]]:
    if os.geteuid() != 0:
        _unavailable("the dpkg round trip needs root (mount namespace, overlayfs, chroot)")
    if shutil.which("unshare") is None or shutil.which("dpkg") is None:
        _unavailable("unshare or dpkg not installed")
    if shutil.which("man") is None:
        # The round trip reads the installed page with the machine's man (the Debian 13 root
        # of tests/slurmroot has no man-db).
        _unavailable("man not installed (Debian package man-db): the round trip renders the installed page")
    work = tmp_path_factory.mktemp("debroot")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", str(ROUNDTRIP),
                           str(deb), str(fakegpu), str(work), *seed],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "== INSTALL" not in proc.stdout:
        if "python3-psutil" in proc.stdout + proc.stderr or "mount" in proc.stderr:
            _unavailable(f"throwaway root not available here:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    assert proc.returncode == 0, f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return _sections(proc.stdout)


@pytest.fixture(scope="module")
def roundtrip(deb: Path, tmp_path_factory: pytest.TempPathFactory, fakegpu: Path) -> Dict[str, List[str]]:
    return _roundtrip(deb, tmp_path_factory, fakegpu)


def test_deb_round_trip_on_a_machine_with_the_package_removed_not_purged(
        deb: Path, tmp_path_factory: pytest.TempPathFactory, fakegpu: Path) -> None:
    """A node where the package was once removed but not purged (dpkg's "rc" state, its conffile
    left), made in a layer under the throwaway root as this machine's own / would be: the round
    trip still installs the conffile, runs, removes and purges as on a clean machine."""
    rt = _roundtrip(deb, tmp_path_factory, fakegpu, "rc")
    assert [line.strip() for line in rt["SEED rc"]] == ["rc", "config.toml"]
    assert rt["EARLIER"] == ["rc"]
    assert CONFFILE in _changed(rt["CHANGES installed"])
    assert rt["CHECK-CONFIG"] == [f"config file: {CONFFILE} (default path; valid)"]
    assert rt["NODE healthy"][0] == "rc=0" and rt["NODE dbe"][0] == "rc=2"
    assert rt["LEFT"][:2] == ["exists /etc/gpu-healthcheck", "exists /var/lib/gpu-healthcheck"]
    assert rt["LEFT 2"] == ["absent /etc/gpu-healthcheck", "absent /var/lib/gpu-healthcheck"]


def test_installed_deb_runs_on_the_fake_gpus(roundtrip: Dict[str, List[str]]) -> None:
    assert roundtrip["VERSION"] == [f"gpu-healthcheck {__version__}"]
    assert roundtrip["MAN"] == ["/usr/share/man/man8/gpu-healthcheck.8.gz"]
    # The packaged sample config is valid and owned as the root prolog requires.
    assert roundtrip["CHECK-CONFIG"] == [f"config file: {CONFFILE} (default path; valid)"]
    healthy = roundtrip["NODE healthy"]
    assert healthy[0] == "rc=0"
    doc = json.loads("\n".join(healthy[1:]))
    assert doc["verdict"] == "pass" and len(doc["gpus"]) == 8
    assert all(p["status"] == "ok" for p in doc["probes"])
    dbe = roundtrip["NODE dbe"]
    assert dbe[0] == "rc=2"
    [finding] = json.loads("\n".join(dbe[1:]))["findings"]
    assert (finding["check"], finding["gpu"]) == ("ecc.volatile_uncorrected", 3)
    # slurmd's way: no PATH, no arguments; the prolog wrote the job's baseline.
    assert roundtrip["PROLOG no PATH"] == ["rc=0"]
    assert f"{STATE}jobs/7.json" in _changed(roundtrip["CHANGES ran"])
    # The launcher runs the package from its private directory, not the other healthcheck the
    # system Python has (PyPI's would sit there), which the package left as it was.
    assert roundtrip["HEALTHCHECK USED"] == [f"{PKGDIR}healthcheck/__init__.py"]
    assert roundtrip["OTHER HEALTHCHECK"] == [f"{DECOY} Not gpu-healthcheck: stands for PyPI healthcheck."]
    # The vendored pynvml is used exactly where no other is installed.
    [used] = roundtrip["PYNVML USED"]
    if roundtrip["PYNVML"] == ["host python3 lacks pynvml"]:
        assert used == f"{PKGDIR}vendor/pynvml.py"
    else:
        assert not used.startswith(PKGDIR)


def test_dpkg_remove_leaves_only_the_conffile_and_state_and_purge_nothing(
        roundtrip: Dict[str, List[str]], contents: Dict[str, str]) -> None:
    before = _changed(roundtrip["CHANGES before"])

    def ours(step: str) -> Set[str]:
        return {p for p in _changed(roundtrip[step]) - before if not p.startswith(BOOKKEEPING)}

    installed = ours("CHANGES installed")
    assert {p for p, mode in contents.items() if not mode.startswith("d")} <= installed
    removed = ours("CHANGES removed")
    # Debian policy: the conffile stays until purge, and so does the state the runs wrote.
    assert {p for p in removed if not p.startswith(STATE)} == {CONFFILE}, removed
    assert {p for p in removed if p.startswith(STATE)}, "the runs above wrote state"
    assert roundtrip["LEFT"] == [
        "exists /etc/gpu-healthcheck", "exists /var/lib/gpu-healthcheck",
        "absent /usr/libexec/gpu-healthcheck", "absent /usr/share/gpu-healthcheck",
        "absent /usr/bin/gpu-healthcheck", f"exists {DECOY}"]
    assert ours("CHANGES purged") == set()
    assert roundtrip["LEFT 2"] == ["absent /etc/gpu-healthcheck", "absent /var/lib/gpu-healthcheck"]
