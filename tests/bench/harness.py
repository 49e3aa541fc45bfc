"""Whole-process runs on simulated GPUs: one temp node (scenario, config, state dir, kernel log),
and a runner that measures wall time and peak RSS of each child.

Peak RSS is measured two ways for every run:
- rss_main_kib: VmHWM of the main process itself, read from /proc/self/status by an atexit hook
  (hook/sitecustomize.py, active only where BENCH_HWM_FILE is set; the probe children leave by
  os._exit and never run it).  This is the figure the 30 MiB target is judged on.
- rss_tree_kib: ru_maxrss from wait4(), the largest of the child and every descendant it reaped
  (CUDA probe children included): an upper bound, used where the hook gave nothing.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tests.lib.fakenode import FAKE_BUILD, FAKEGPU, ROOT, ensure_fakegpu  # noqa: F401 - re-exported

HOOK_DIR = Path(__file__).resolve().parent / "hook"


@dataclass
class Sample:
    wall_s: float
    rc: int
    rss_main_kib: Optional[int]
    rss_tree_kib: int
    stdout: str = ""
    stderr: str = ""


@dataclass
class Stats:
    samples: List[Sample] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(s.wall_s for s in self.samples)

    @property
    def min_s(self) -> float:
        return min(s.wall_s for s in self.samples)

    @property
    def rss_main_mib(self) -> Optional[float]:
        values = [s.rss_main_kib for s in self.samples if s.rss_main_kib]
        return max(values) / 1024 if values else None

    @property
    def rss_tree_mib(self) -> float:
        return max(s.rss_tree_kib for s in self.samples) / 1024

    @property
    def rcs(self) -> List[int]:
        return sorted({s.rc for s in self.samples})


class SimNode:
    """A simulated GPU node in a temp dir; nothing outside it is touched."""

    def __init__(self, base: Optional[Path] = None) -> None:
        self._tmp = None
        if base is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gpuhc-bench-")
            base = Path(self._tmp.name)
        self.dir = base
        self.scenario = base / "node.scenario"
        self.config = base / "config.toml"
        self.state_dir = base / "state"
        self.kernel_log = base / "kern.log"
        self.hwm = base / "hwm"
        self.kernel_log.write_text("")
        self.gres_conf = base / "gres.conf"  # every device in order: gres index i = /dev/nvidia<i>
        self.gres_conf.write_text("Name=gpu File=/dev/nvidia[0-63]\n")
        self.write_scenario("gpus = 8\n")
        self.config.write_text(
            f'state_dir = "{self.state_dir}"\n'
            f'kernel_log = "{self.kernel_log}"\n'
            'scontrol = "/bin/false"\n'
            f'gres_conf = "{self.gres_conf}"\n'
            "scontrol_timeout_s = 5\n"
            "journal = false\n")
        os.chmod(self.config, 0o644)

    def cleanup(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def write_scenario(self, text: str) -> None:
        self.scenario.write_text(text)

    def env(self, extra: Optional[Dict[str, str]] = None, fake: bool = True,
            repo_on_path: bool = True, repo: Optional[Path] = None) -> Dict[str, str]:
        """`repo`: the checkout whose healthcheck/ runs (default this one; --baseline another)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM", "CUDA_VISIBLE", "GPU_HEALTHCHECK", "FAKEGPU",
                                    "PYTHON"))}
        env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR)] + ([str(repo or ROOT)] if repo_on_path else []))
        env["BENCH_HWM_FILE"] = str(self.hwm)
        if fake:
            env["LD_LIBRARY_PATH"] = str(ensure_fakegpu())
            env["FAKEGPU_SCENARIO"] = str(self.scenario)
            env["GPU_HEALTHCHECK_CONFIG"] = str(self.config)
        env.update(extra or {})
        return env

    def run(self, argv: Sequence[str], env: Dict[str, str], timeout: float = 300,
            cwd: Optional[Path] = None) -> Sample:
        """One whole-process run: wall time from spawn to reap, and peak RSS."""
        try:
            self.hwm.unlink()
        except FileNotFoundError:
            pass
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(list(argv), env=env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, cwd=str(cwd or self.dir))
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode("utf-8", "replace")
            stderr = err.read().decode("utf-8", "replace")
        main_kib = None
        try:
            main_kib = int(self.hwm.read_text().strip())
        except (OSError, ValueError):
            pass
        return Sample(wall, proc.returncode, main_kib, usage.ru_maxrss, stdout, stderr)


def our_argv(*args: str) -> List[str]:
    return [sys.executable, "-m", "healthcheck.cli", *args]


def gpu_list(n: int) -> str:
    return ",".join(str(i) for i in range(n))
