"""Shared test helpers: the fake GPU libraries, and the real CLI run in a child process.

The CLI runs in a child because the driver libraries are found through LD_LIBRARY_PATH at
process start, as on a real node; the scenario file is re-read at every nvmlInit/cuInit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKEGPU = ROOT / "tests" / "fakegpu"
FAKE_BUILD = FAKEGPU / "build"
FIXTURES = ROOT / "tests" / "fixtures"


def ensure_fakegpu() -> Path:
    libs = [FAKE_BUILD / "libnvidia-ml.so.1", FAKE_BUILD / "libcuda.so.1"]
    sources = list(FAKEGPU.glob("*.c")) + list(FAKEGPU.glob("*.h")) + [FAKEGPU / "Makefile"]
    newest = max(p.stat().st_mtime for p in sources)
    if not all(p.exists() and p.stat().st_mtime >= newest for p in libs):
        subprocess.run(["make", "-C", str(FAKEGPU)], check=True, capture_output=True)
    return FAKE_BUILD


@pytest.fixture(scope="session")
def fakegpu() -> Path:
    return ensure_fakegpu()


def make_sysfs(root: Path, nvidia: Sequence[str] = (), others: Sequence[str] = ("0000:00:1f.0",)) -> Path:
    """A sysfs tree with these NVIDIA GPU functions (class 0x0302) and some non-NVIDIA ones."""
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    for address in nvidia:
        (devices / address).mkdir()
        (devices / address / "vendor").write_text("0x10de\n")
        (devices / address / "class").write_text("0x030200\n")
    for address in others:
        (devices / address).mkdir()
        (devices / address / "vendor").write_text("0x8086\n")
        (devices / address / "class").write_text("0x060100\n")
    return root


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
                    "scontrol_timeout_s": "5"}
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
