"""Paths and helpers shared by the tests and the demo (no pytest import: the demo runs without it)."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

ROOT = Path(__file__).resolve().parents[2]
FAKEGPU = ROOT / "tests" / "fakegpu"
FAKE_BUILD = FAKEGPU / "build"
FIXTURES = ROOT / "tests" / "fixtures"


@contextmanager
def build_lock() -> Iterator[None]:
    """One build of the fake libraries at a time: each pytest-xdist worker (and tests/fuzz/run)
    may find them stale, and two makes writing the same .so leave a torn library."""
    FAKE_BUILD.mkdir(exist_ok=True)
    with open(FAKE_BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_fakegpu() -> Path:
    libs = [FAKE_BUILD / "libnvidia-ml.so.1", FAKE_BUILD / "libcuda.so.1", FAKE_BUILD / "nvidia-smi",
            FAKE_BUILD / "all_reduce_perf", FAKE_BUILD / "all_gather_perf", FAKE_BUILD / "ib_write_bw"]
    sources = list(FAKEGPU.glob("*.c")) + list(FAKEGPU.glob("*.h")) + [FAKEGPU / "Makefile",
                                                                      FAKEGPU / "fabric.py"]
    newest = max(p.stat().st_mtime for p in sources)
    with build_lock():
        if not all(p.exists() and p.stat().st_mtime >= newest for p in libs):
            # PYTHON: nvml.h is found in this interpreter's site-packages (the venv's)
            subprocess.run(["make", "-C", str(FAKEGPU), "PYTHON=" + sys.executable], check=True,
                           capture_output=True)
    return FAKE_BUILD


def make_sysfs(root: Path, nvidia: Sequence[str] = (), others: Sequence[str] = ("0000:00:1f.0",),
               driver: str = "nvidia", nvswitches: Sequence[str] = ()) -> Path:
    """A sysfs tree with these NVIDIA GPU functions (class 0x0302, bound to `driver`; "" for
    none), NVIDIA NVSwitch functions (class 0x068000, bound to nvidia, as on an HGX
    baseboard) and some non-NVIDIA ones."""
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    for address in nvswitches:
        (devices / address).mkdir()
        (devices / address / "vendor").write_text("0x10de\n")
        (devices / address / "class").write_text("0x068000\n")
        (root / "bus" / "pci" / "drivers" / "nvidia").mkdir(parents=True, exist_ok=True)
        (devices / address / "driver").symlink_to("../../../bus/pci/drivers/nvidia")
    for address in nvidia:
        (devices / address).mkdir()
        (devices / address / "vendor").write_text("0x10de\n")
        (devices / address / "class").write_text("0x030200\n")
        if driver:
            (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            (devices / address / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
    for address in others:
        (devices / address).mkdir()
        (devices / address / "vendor").write_text("0x8086\n")
        (devices / address / "class").write_text("0x060100\n")
    return root


def nvml_read(node, scenario: str):
    """The GPUs as healthcheck.read.nvml reads them from `node`'s fake, in a child process."""
    node.scenario.write_text(scenario)
    code = ("import json; from healthcheck.read.nvml import read_nvml; r = read_nvml(10); "
            "print(json.dumps([g._asdict() for g in r.gpus]))")
    done = subprocess.run([sys.executable, "-c", code], env=node.env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def history(state_dir: Path) -> List[Dict]:
    path = state_dir / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def logged(state_dir: Path) -> str:
    """Everything the history file keeps, as text, to look for a finding or an action."""
    return "\n".join(json.dumps(r) for r in history(state_dir))
