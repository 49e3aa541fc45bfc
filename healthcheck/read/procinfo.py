"""Reader of process owners, commands and Slurm jobs, for processes NVML found on a GPU.

    gpus = with_owners(gpus, proc_root="/proc")       # user, command, job id from the cgroup
    gpus = with_jobs(gpus, {4242: "17"})               # job ids Slurm gave (scontrol listpids)
    ids = job_gpus_of(4242, proc_root="/proc")          # its SLURM_JOB_GPUS, None = not said
    device_holders(["/dev/nvidia2"])                    # ((4242, "nv-hostengine ..."),): who holds it
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional, Sequence, Tuple

from ..model import GpuProcess, GpuSnapshot
from ..text import printable


# Slurm's cgroup plugins put a job's processes under .../job_<id>/ (cgroup v1 and v2)
_JOB_CGROUP_RE = re.compile(r"/job_(\d{1,20})(?:/|$)")


def job_of_cgroup(text: str) -> Optional[str]:
    """The Slurm job id in a /proc/PID/cgroup text, or None (pure)."""
    for line in text.splitlines()[:64]:
        m = _JOB_CGROUP_RE.search(line.rsplit(":", 1)[-1])
        if m:
            return m.group(1)
    return None


def _cgroup_job(pid: int, proc_root: str) -> Optional[str]:
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), "rb") as handle:
            return job_of_cgroup(handle.read(16384).decode("utf-8", "replace"))
    except OSError:
        return None


def with_jobs(gpus: Tuple[GpuSnapshot, ...], jobs: Mapping[int, str]) -> Tuple[GpuSnapshot, ...]:
    """The processes' job ids from what Slurm says runs on this node (pid -> job id)."""
    return tuple(g._replace(processes=tuple(p._replace(job_id=p.job_id or jobs.get(p.pid))
                                            for p in g.processes)) if g.processes else g
                 for g in gpus)


def with_owners(gpus: Tuple[GpuSnapshot, ...], proc_root: str = "/proc") -> Tuple[GpuSnapshot, ...]:
    """GPUs whose processes carry user and command, where the process is visible to us, and
    the Slurm job of their cgroup where Slurm confines jobs in cgroups."""
    if not any(g.processes for g in gpus):
        return gpus  # the common case: psutil is never imported
    import psutil

    def describe(proc: GpuProcess) -> GpuProcess:
        try:
            p = psutil.Process(proc.pid)
            with p.oneshot():
                command = " ".join(p.cmdline()) or p.name()
                # the name is the process owner's to choose: one printable line only
                return proc._replace(user=printable(p.username(), 64), command=printable(command, 200),
                                     job_id=_cgroup_job(proc.pid, proc_root))
        except (psutil.Error, KeyError, OSError):
            # gone, or in another PID namespace (a container): NVML still counts it
            return proc._replace(user=proc.user or "?", command=proc.command or "(not visible)")

    return tuple(g._replace(processes=tuple(describe(p) for p in g.processes)) if g.processes else g
                 for g in gpus)


# what slurmstepd puts in a job's environment naming its GPUs (gres indices), in that order
_GPU_VARS = (b"SLURM_JOB_GPUS=", b"SLURM_STEP_GPUS=")


def job_gpus_of(pid: int, proc_root: str = "/proc") -> Optional[Tuple[str, ...]]:
    """The gres indices a job process was given (SLURM_JOB_GPUS in /proc/PID/environ, root
    only), or None where the environment does not say: gres/mps sets no GPU list, and a
    process we may not read says nothing."""
    from .slurmenv import GpuListError, parse_gpu_list

    try:
        with open(os.path.join(proc_root, str(pid), "environ"), "rb") as handle:
            entries = handle.read(1 << 20).split(b"\0")
    except OSError:
        return None
    for var in _GPU_VARS:
        for entry in entries:
            if entry.startswith(var):
                try:
                    return parse_gpu_list(entry[len(var):].decode("ascii", "replace")[:4096])
                except GpuListError:
                    return None
    return None


def device_holders(paths: Sequence[str], proc_root: str = "/proc",
                   skip: Sequence[int] = ()) -> Tuple[Tuple[int, str], ...]:
    """The processes (pid, command) that hold one of `paths` open, from /proc/PID/fd as `fuser`
    reads it: what keeps a GPU's device file (/dev/nvidiaN) busy, nv-hostengine (DCGM) among
    them, though NVML lists no process of it.  A process we may not look into, or that ends
    while we look, is not seen."""
    wanted = set(paths)
    found = []
    try:
        pids = sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return ()
    for pid in pids:
        if pid in skip:
            continue
        fd_dir = os.path.join(proc_root, str(pid), "fd")
        try:
            held = any(os.readlink(os.path.join(fd_dir, fd)) in wanted for fd in os.listdir(fd_dir))
        except OSError:
            continue
        if held:
            found.append((pid, _command(pid, proc_root)))
    return tuple(found)


def _command(pid: int, proc_root: str) -> str:
    """The process's command line (NUL-separated in /proc), as one printable line."""
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as handle:
            words = handle.read(4096).split(b"\0")
    except OSError:
        return "?"
    return printable(" ".join(w.decode("utf-8", "replace") for w in words if w), 200) or "?"
