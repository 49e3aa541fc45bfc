"""The peer: Meta's GPU Cluster Monitoring health checks (PyPI `gpucm`, command `health_checks`).

Installed on demand in tests/bench/.peer-venv (git-ignored).  `health_checks --help` and
`health_checks check-nvidia-smi --help` (gpucm 0.0.2) document:

    health_checks [--config FILE] check-nvidia-smi [OPTIONS] CLUSTER {prolog|epilog|nagios|app}
        -c/--check gpu_num|running_procs|ecc_uncorrected_volatile_total|row_remap_pending|
                   row_remap_failed|...   (repeatable, required)
        --gpu_num INTEGER (default 8)   --sink do_nothing|file|stdout|... (default do_nothing)
        --log-folder DIR                --verbose-out (print every check's message on stdout)

Exit status is Nagios': 0 OK, 1 WARN, 2 CRITICAL, 3 UNKNOWN.  In `prolog`/`epilog` mode
running_procs looks only at SLURM_JOB_GPUS (else CUDA_VISIBLE_DEVICES); the other checks look
at every GPU.  `--config /dev/null` keeps it from reading /etc/fb-healthchecks/config.toml.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

VENV = Path(__file__).resolve().parent / ".peer-venv"
PEER_CHECKS = ("gpu_num", "running_procs", "ecc_uncorrected_volatile_total",
               "row_remap_pending", "row_remap_failed")


def peer_command() -> Path:
    return VENV / "bin" / "health_checks"


def ensure_peer(log=print) -> Tuple[Optional[Path], str]:
    """(path of health_checks, "") or (None, why it is unavailable).  Never raises."""
    exe = peer_command()
    if exe.exists():
        return exe, ""
    try:
        if not (VENV / "bin" / "python").exists():
            log(f"peer: creating {VENV} (python3 -m venv)")
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True,
                           capture_output=True, text=True, timeout=300)
        log("peer: pip install gpucm (once; takes a minute)")
        done = subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "gpucm"],
                              capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot create the peer venv: {exc}"
    if done.returncode != 0 or not exe.exists():
        tail = " | ".join(l for l in (done.stderr or done.stdout).splitlines()
                          if "is ignored" not in l)[-400:]
        return None, f"pip install gpucm failed (exit {done.returncode}): {tail}"
    return exe, ""


def peer_argv(exe: Path, log_folder: Path, gpus: int, mode: str = "prolog",
              verbose: bool = False) -> List[str]:
    argv = [str(exe), "--config", "/dev/null", "check-nvidia-smi", "benchcluster", mode,
            "--sink", "do_nothing", "--log-folder", str(log_folder), "--gpu_num", str(gpus)]
    for check in PEER_CHECKS:
        argv += ["-c", check]
    if verbose:
        argv.append("--verbose-out")
    return argv


def peer_version(exe: Path) -> str:
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": ""}).stdout
        return out.strip().splitlines()[-1] if out.strip() else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"
