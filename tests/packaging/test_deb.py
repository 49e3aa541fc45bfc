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
from tests.packaging import packagedocs

ROOT = Path(__file__).resolve().parents[2]
BUILD_DEB = ROOT / "deploy" / "deb" / "build-deb"
ROUNDTRIP = ROOT / "tests" / "lib" / "deb_roundtrip.sh"
BUILD_SPANK = ROOT / "deploy" / "deb" / "build-deb-spank"
SPANK_ROUNDTRIP = ROOT / "tests" / "packaging" / "spank_roundtrip.sh"
SPANK_DOC = "/usr/share/doc/gpu-healthcheck-spank/"
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
    for doc in ("README.md", "copyright", "deploy/README.md", "deploy/slurm/README.md",
                "deploy/slurm/slurm.conf.example", "deploy/slurm/plugstack.conf.example"):
        assert f"/usr/share/doc/gpu-healthcheck/{doc}" in contents, doc
    # the docs/ pages README.md links to, beside it, and nothing else of docs/
    pages = sorted(f"/usr/share/doc/gpu-healthcheck/docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    assert pages and sorted(f for f in contents if f.startswith("/usr/share/doc/gpu-healthcheck/docs/")) == pages
    # the SPANK plugin's source, for the one-command build against a site's own Slurm
    for src in ("Makefile", "gpu_healthcheck.c"):
        assert contents[f"{PKGDIR}spank/{src}"] == "-rw-r--r--", src
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


def _files(contents: Dict[str, str]) -> Set[str]:
    return {p for p, mode in contents.items() if not mode.startswith("d")}


def test_every_entry_of_the_package_docs_list_is_in_the_tree() -> None:
    """deploy/package-docs.list names the runbook (docs/runbook.md) and the monitoring mixin's
    generated rules, alerts and dashboards (deploy/mixin/): a tree without one of them would
    build packages without it (install-docs only warns), so this fails instead."""
    empty = [pattern for pattern, files in packagedocs.expected_files().items() if not files]
    assert not empty, f"deploy/package-docs.list entries with no file in the tree: {empty}"


def test_deb_ships_exactly_the_package_docs_list(contents: Dict[str, str]) -> None:
    expected = set().union(*packagedocs.expected_files().values())
    shipped = {f for f in _files(contents) if f.startswith(tuple(packagedocs.DESTS.values()))}
    assert shipped - {"/usr/share/doc/gpu-healthcheck/copyright"} == expected
    for f in expected:
        assert contents[f] == "-rw-r--r--", f


@pytest.mark.parametrize("source", ["--help", "man page", "README install"])
def test_every_installed_path_the_docs_name_is_in_the_deb(source: str, contents: Dict[str, str]) -> None:
    """--help, the man page and README's install section name installed paths (README through
    its links, which resolve in /usr/share/doc/gpu-healthcheck/ as in a checkout): each one is
    in the package.  The man page names docs/runbook.md and the monitoring directory: those
    pass once the runbook and the mixin's generated files are in the tree."""
    named = packagedocs.named_paths()[source]
    assert named, f"{source} names no installed path"
    missing = packagedocs.missing_from(named, _files(contents))
    assert not missing, f"{source} names {missing}, which the .deb does not ship"


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


def test_every_installed_path_the_docs_name_is_in_the_installed_tree(
        roundtrip: Dict[str, List[str]]) -> None:
    """The same paths, in the tree `dpkg -i` really left (the throwaway root's files)."""
    installed = _changed(roundtrip["CHANGES installed"])
    named = set().union(*packagedocs.named_paths().values())
    missing = packagedocs.missing_from(named, installed)
    assert not missing, f"--help, the man page or README name {missing}, not installed by dpkg -i"


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


# --- gpu-healthcheck-spank: the SPANK plugin built against this machine's Slurm -------------

def _slurm_major_minor() -> str:
    """X.Y of the Slurm whose headers this machine has (libslurm-dev), from SLURM_VERSION_NUMBER."""
    header = Path("/usr/include/slurm/slurm_version.h")
    m = re.search(r"^#define SLURM_VERSION_NUMBER 0x([0-9a-fA-F]{2})([0-9a-fA-F]{2})", header.read_text(), re.M)
    assert m, header
    return f"{int(m.group(1), 16)}.{int(m.group(2), 16):02d}"


def _debian_plugin_dir() -> str:
    """Where Debian's Slurm keeps its plugins: the directory of its auth_munge.so, as
    slurm-wlm-basic-plugins installed it (dpkg's own list, not ours)."""
    listed = subprocess.run(["dpkg", "-L", "slurm-wlm-basic-plugins"], capture_output=True,
                            text=True, timeout=60)
    if listed.returncode != 0:
        _unavailable("slurm-wlm-basic-plugins (Debian's Slurm) not installed")
    [munge] = [ln for ln in listed.stdout.splitlines() if ln.endswith("/auth_munge.so")]
    return str(Path(munge).parent)


@pytest.fixture(scope="module")
def spank_deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("dpkg-deb") is None or shutil.which("gcc") is None:
        _unavailable("dpkg-deb or gcc not installed")
    if not Path("/usr/include/slurm/spank.h").is_file():
        _unavailable("<slurm/spank.h> not installed (Debian package libslurm-dev)")
    out = tmp_path_factory.mktemp("spankdeb")
    proc = subprocess.run([str(BUILD_SPANK), str(out)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip().splitlines()[-1])
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()
    assert path == out / f"gpu-healthcheck-spank_{__version__}+slurm{_slurm_major_minor()}_{arch}.deb"
    return path


def test_spank_deb_installs_the_plugin_where_debians_slurm_looks(spank_deb: Path) -> None:
    plugindir = _debian_plugin_dir()
    files = {}
    for line in _deb("-c", str(spank_deb)).splitlines():
        mode, owner, _size, _date, _time, name = line.split(None, 5)
        assert owner == "root/root", line
        if not mode.startswith("d"):
            files[name[1:]] = mode
    assert files == {f"{plugindir}/gpu_healthcheck.so": "-rw-r--r--",
                     f"{SPANK_DOC}gpu-healthcheck.conf": "-rw-r--r--",
                     f"{SPANK_DOC}copyright": "-rw-r--r--"}


def test_spank_deb_depends_on_the_slurm_it_was_built_against(spank_deb: Path) -> None:
    slurm = _slurm_major_minor()
    major, minor = slurm.split(".")
    depends = [d.strip() for d in _deb("-f", str(spank_deb), "Depends").split(",")]
    assert f"slurm-wlm-basic-plugins (>= {slurm})" in depends, depends
    assert f"slurm-wlm-basic-plugins (<< {major}.{int(minor) + 1:02d}~)" in depends, depends
    assert f"gpu-healthcheck (= {__version__})" in depends, depends
    assert _deb("-f", str(spank_deb), "Version").strip() == f"{__version__}+slurm{slurm}"

    def satisfies(version: str) -> bool:
        return all(subprocess.run(["dpkg", "--compare-versions", version, op, bound],
                                  timeout=30).returncode == 0
                   for op, bound in (("ge", slurm), ("lt", f"{major}.{int(minor) + 1:02d}~")))

    # Every Debian revision of this major.minor, and no other release.
    assert satisfies(f"{slurm}.8-4+deb12u3") and satisfies(f"{slurm}.0-1")
    assert not satisfies(f"{major}.{int(minor) + 1:02d}.0-1") and not satisfies(f"{major}.{int(minor) - 1:02d}.9-1")
    assert not satisfies(f"{int(major) + 1}.{minor}.0-1")


def test_spank_plugstack_line_is_the_example_with_the_packaged_path(spank_deb: Path, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-x", str(spank_deb), str(tmp_path)], check=True, timeout=60)
    shipped = (tmp_path / SPANK_DOC.lstrip("/") / "gpu-healthcheck.conf").read_text()
    example = (ROOT / "deploy" / "slurm" / "plugstack.conf.example").read_text()

    def lines(text: str) -> List[str]:
        return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]

    plugin = f"{_debian_plugin_dir()}/gpu_healthcheck.so"
    assert lines(shipped) == [ln.replace("/usr/local/lib/slurm/gpu_healthcheck.so", plugin)
                              for ln in lines(example)]
    assert lines(shipped)[0].startswith(f"required {plugin} ")


def test_debians_slurm_loads_the_installed_plugin(deb: Path, spank_deb: Path,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """dpkg -i of both packages in a throwaway root (tests/packaging/spank_roundtrip.sh), then
    Debian's own sbatch loads the plugin from the packaged plugstack.conf.d line and from its
    bare name (PluginDir), and lists --gpu-healthcheck; after dpkg -r it is gone."""
    if os.geteuid() != 0:
        _unavailable("the dpkg round trip needs root (mount namespace, overlayfs, chroot)")
    if shutil.which("unshare") is None or shutil.which("sbatch") is None:
        _unavailable("unshare or sbatch (Debian package slurm-client) not installed")
    _debian_plugin_dir()
    work = tmp_path_factory.mktemp("spankroot")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", str(SPANK_ROUNDTRIP),
                           str(deb), str(spank_deb), str(work)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    rt = _sections(proc.stdout)
    assert f"{_debian_plugin_dir()}/gpu_healthcheck.so" in rt["FILES"]
    for how in ("plugstack.conf.d", "bare name"):
        lines = [ln.strip() for ln in rt[f"SBATCH {how}"]]
        assert lines[0] == "rc=0" and not [ln for ln in lines if ": error:" in ln], (how, lines)
        assert [ln for ln in lines if ln.startswith("--gpu-healthcheck=quick|full|deep")], (how, lines)
    assert "plugin gone" in rt["REMOVE"]
    after = rt["SBATCH after remove"]
    assert after[0] == "rc=1" and any("gpu_healthcheck.so" in ln for ln in after), after
