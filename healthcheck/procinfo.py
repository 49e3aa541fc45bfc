"""Reader of process owners and commands (psutil), for processes NVML found on a GPU."""

from __future__ import annotations

from typing import Tuple

from .model import GpuProcess, GpuSnapshot


def with_owners(gpus: Tuple[GpuSnapshot, ...]) -> Tuple[GpuSnapshot, ...]:
    """GPUs whose processes carry user and command, where the process is visible to us."""
    if not any(g.processes for g in gpus):
        return gpus  # the common case: psutil is never imported
    import psutil

    def describe(proc: GpuProcess) -> GpuProcess:
        try:
            p = psutil.Process(proc.pid)
            with p.oneshot():
                command = " ".join(p.cmdline()) or p.name()
                return proc._replace(user=p.username(), command=command[:200])
        except (psutil.Error, KeyError, OSError):
            # gone, or in another PID namespace (a container): NVML still counts it
            return proc._replace(user=proc.user or "?", command=proc.command or "(not visible)")

    return tuple(g._replace(processes=tuple(describe(p) for p in g.processes)) if g.processes else g
                 for g in gpus)
