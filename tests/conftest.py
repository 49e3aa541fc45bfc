"""Shared test helpers: the fake GPU libraries, and the real CLI run in a child process.

The CLI runs in a child because the driver libraries are found through LD_LIBRARY_PATH at
process start, as on a real node; the scenario file is re-read at every nvmlInit/cuInit.

The tests are laid out by layer (tests/README.md): unit/, readers/, cli/, slurm/ (every test
with the slurm marker, and only those: checked at collection below), packaging/; the harnesses
are in lib/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import pytest

# the shared test bodies and helpers in tests/lib assert as the test modules do
pytest.register_assert_rewrite("tests.lib.fakenode", "tests.lib.metrics", "tests.lib.repair", "tests.lib.snapshots")

from tests.lib import hermetic  # noqa: E402
from tests.lib.fakenode import FAKE_BUILD, FAKEGPU, FIXTURES, ROOT, ensure_fakegpu, make_sysfs  # noqa: F401,E402
from tests.lib.slurmcluster import SLURM_MARK_VAR  # noqa: E402


def _isolate() -> hermetic.Isolation:
    """The whole session runs in private namespaces (tests/lib/hermetic.py says why and how).
    Here, at conftest import, because pytest has started no thread yet."""
    try:
        return hermetic.isolate()
    except (hermetic.IsolationError, OSError) as exc:
        pytest.exit(f"gpu-healthcheck tests: cannot isolate the test session from the host: {exc}. "
                    "Run as root (or where unprivileged user namespaces are allowed); the suite "
                    "never runs against the host's /var/lib/gpu-healthcheck, /etc/gpu-healthcheck, "
                    "journald or Slurm.", returncode=3)


ISOLATION = _isolate()


@pytest.fixture(scope="session")
def isolation() -> hermetic.Isolation:
    return ISOLATION


@pytest.fixture(autouse=True)
def _fresh_private_defaults():
    """Each test starts with the session's private default paths as the session found them,
    so state a fallback to the built-in defaults left behind cannot reach the next test."""
    yield
    hermetic.reset(ISOLATION)


def pytest_runtest_setup(item) -> None:
    """Tell tests/lib/slurmcluster.py whether this test carries the slurm marker (before any of its
    fixtures start a cluster): a cluster started by an unmarked test is an error there, since
    make slurm-matrix selects the Slurm tests by that marker and would miss it on 24.11."""
    os.environ[SLURM_MARK_VAR] = "1" if item.get_closest_marker("slurm") else "0"


SLURM_LAYER = Path(__file__).resolve().parent / "slurm"


def pytest_collection_modifyitems(config, items) -> None:
    """tests/slurm/ holds exactly the tests with the slurm marker (make slurm-matrix and
    `-m "not slurm"` select by the marker; the layout says where they are)."""
    misplaced = [item.nodeid for item in items
                 if bool(item.get_closest_marker("slurm")) != (SLURM_LAYER in item.path.parents)]
    if misplaced:
        raise pytest.UsageError("a test with the slurm marker belongs in tests/slurm/, and only such a "
                                "test: " + ", ".join(misplaced[:10]))


@pytest.hookimpl(optionalhook=True)  # a venv without pytest-xdist (a Slurm root's) runs without it
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist with `--dist loadfile` (`make test`): each test file runs on one
    worker, in order (a module's own fixtures, a built wheel or a replayed dump, are made once,
    not once per worker), and the Slurm tests, tests/slurm/ (see above), all on one worker, one
    cluster at a time, as make slurm-matrix runs them.  (pytest-xdist's own --dist loadgroup
    cannot do this here: its group marks rename test ids in a way pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrSlurm(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/slurm/" if path.startswith("tests/slurm/") else path

    return FileOrSlurm(config, log)


def pytest_terminal_summary(terminalreporter) -> None:
    changed = hermetic.differences(ISOLATION.host_before, hermetic.host_snapshot(ISOLATION.host))
    where = ", ".join(p for p in hermetic.HIDDEN)
    if changed:
        terminalreporter.write_line(
            "hermetic: the host's paths changed during this session (by this session, or by "
            "another process on the machine): " + "; ".join(changed[:20]), red=True)
    else:
        terminalreporter.write_line(f"hermetic: session isolated ({ISOLATION.how}); host's {where} unchanged")


@pytest.fixture(scope="session")
def fakegpu() -> Path:
    return ensure_fakegpu()


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Dict:
        return json.loads(self.stdout)

    def checks(self, severity: Optional[str] = None):
        return [f["check"] for f in self.json["findings"] if severity in (None, f["severity"])]


class Node:
    """One simulated GPU node: scenario, config, state dir, kernel log and sysfs in tmp_path."""

    def __init__(self, tmp: Path, fake: Path) -> None:
        self.tmp = tmp
        self.fake = fake
        self.scenario = tmp / "node.scenario"
        self.scenario.write_text("gpus = 8\n")
        self.kernel_log = tmp / "kern.log"
        self.kernel_log.write_text("")
        self.state_dir = tmp / "state"
        self.sysfs = make_sysfs(tmp / "sys")
        # slurmd's view: every device listed in order, so gres index i is /dev/nvidia<i>
        self.gres_conf = tmp / "gres.conf"
        self.gres_conf.write_text("AutoDetect=off\nName=gpu File=/dev/nvidia[0-7]\n")
        self.config_path = tmp / "config.toml"
        self.config_extra = ""
        self.write_config()

    def write_config(self, extra: str = "") -> None:
        self.config_extra = extra
        if extra.startswith("["):
            top, tables = "", extra[1:]
        else:
            top, _, tables = extra.partition("\n[")
        defaults = {"state_dir": f'"{self.state_dir}"', "kernel_log": f'"{self.kernel_log}"',
                    "sysfs_root": f'"{self.sysfs}"', "scontrol": f'"{self.tmp / "no-scontrol"}"',
                    "scontrol_timeout_s": "5",
                    "gres_conf": f'"{self.gres_conf}"'}
        overridden = {line.split("=", 1)[0].strip() for line in top.splitlines() if "=" in line}
        lines = [f"{k} = {v}" for k, v in defaults.items() if k not in overridden]
        self.config_path.write_text("\n".join(lines) + f"\n{top}\n" + (f"[{tables}\n" if tables else ""))
        os.chmod(self.config_path, 0o644)

    def env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM", "CUDA_VISIBLE", "GPU_HEALTHCHECK"))}
        env.update(LD_LIBRARY_PATH=str(self.fake), FAKEGPU_SCENARIO=str(self.scenario),
                   GPU_HEALTHCHECK_CONFIG=str(self.config_path), PYTHONPATH=str(ROOT))
        env.update(extra or {})
        return env

    def run(self, *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 120,
            scenario: Optional[str] = None) -> Result:
        if scenario is not None:
            self.scenario.write_text(scenario)
        done = subprocess.run([sys.executable, "-m", "healthcheck.cli", *args],
                              env=self.env(env), capture_output=True, text=True, timeout=timeout)
        return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def node(tmp_path: Path, fakegpu: Path) -> Node:
    return Node(tmp_path, fakegpu)
