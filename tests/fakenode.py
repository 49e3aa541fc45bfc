"""Paths and helpers shared by the tests and the demo (no pytest import: the demo runs without it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
FAKEGPU = ROOT / "tests" / "fakegpu"
FAKE_BUILD = FAKEGPU / "build"
FIXTURES = ROOT / "tests" / "fixtures"


def ensure_fakegpu() -> Path:
    libs = [FAKE_BUILD / "libnvidia-ml.so.1", FAKE_BUILD / "libcuda.so.1"]
    sources = list(FAKEGPU.glob("*.c")) + list(FAKEGPU.glob("*.h")) + [FAKEGPU / "Makefile"]
    newest = max(p.stat().st_mtime for p in sources)
    if not all(p.exists() and p.stat().st_mtime >= newest for p in libs):
        # PYTHON: nvml.h is found in this interpreter's site-packages (the venv's)
        subprocess.run(["make", "-C", str(FAKEGPU), "PYTHON=" + sys.executable], check=True,
                       capture_output=True)
    return FAKE_BUILD


def make_sysfs(root: Path, nvidia: Sequence[str] = (), others: Sequence[str] = ("0000:00:1f.0",),
               driver: str = "nvidia") -> Path:
    """A sysfs tree with these NVIDIA GPU functions (class 0x0302, bound to `driver`; "" for
    none) and some non-NVIDIA ones."""
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
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
