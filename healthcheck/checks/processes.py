"""Memory and processes left on a GPU: leaked contexts and leftover processes."""

from __future__ import annotations

from typing import Iterator

from ..model import Action, Finding, GpuProcess, GpuSnapshot, Mode, NodeSnapshot, Severity
from .registry import CheckContext, finding as _f, gpu_check, label


@gpu_check("memory.leaked", severity=Severity.FAIL, action=Action.RESET,
           threshold_key="thresholds.memory_leaked_mib")
def check_memory_leaked(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Memory in use with no process on the GPU, above `thresholds.memory_leaked_mib`.

    A context that outlived its process (the incident's "CUDA out of memory" at the next job's
    start).  Fails on the GPUs under test in the prolog, warns otherwise.
    nvidia-smi equivalent: `nvidia-smi --query-gpu=memory.used --format=csv` with no process.
    """
    if not ctx.is_selected(gpu.index) or gpu.memory_used_mib is None or gpu.processes is None:
        return
    limit = ctx.config.thresholds.memory_leaked_mib
    if gpu.processes or gpu.memory_used_mib <= limit:
        return
    severity = Severity.FAIL if ctx.mode is Mode.PROLOG else Severity.WARN
    yield _f("memory.leaked", severity, gpu,
             f"{label(gpu)}: {gpu.memory_used_mib} MiB in use with no process, limit {limit} MiB; "
             f"reset the GPU", value=gpu.memory_used_mib, threshold=limit,
             action=Action.RESET if severity is Severity.FAIL else Action.NONE)


@gpu_check("processes.leftover", severity=Severity.FAIL, action=Action.DRAIN)
def check_processes_leftover(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Compute processes on a GPU that the job is about to get (prolog) or just released (epilog).

    Only the job's GPUs count: on a shared node other jobs legitimately use the rest.  Fail in
    the prolog (the job would start out of memory); warn in the epilog (Slurm could not kill
    them); info by hand (the GPU is busy).
    nvidia-smi equivalent: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`.
    """
    if not gpu.processes or not ctx.is_selected(gpu.index):
        return
    who = ", ".join(_describe(p) for p in gpu.processes[:4])
    more = f" and {len(gpu.processes) - 4} more" if len(gpu.processes) > 4 else ""
    if ctx.mode is Mode.PROLOG:
        yield _f("processes.leftover", Severity.FAIL, gpu,
                 f"{label(gpu)}: {len(gpu.processes)} process(es) left on the GPU: {who}{more}; "
                 f"kill them or reset the GPU", value=len(gpu.processes), threshold=0,
                 action=Action.DRAIN)
    elif ctx.mode is Mode.EPILOG:
        yield _f("processes.leftover", Severity.WARN, gpu,
                 f"{label(gpu)}: {len(gpu.processes)} process(es) outlived the job: {who}{more}",
                 value=len(gpu.processes), threshold=0)
    else:
        yield _f("processes.leftover", Severity.INFO, gpu,
                 f"{label(gpu)}: in use by {who}{more}", value=len(gpu.processes))


def _describe(proc: GpuProcess) -> str:
    mem = f" {proc.used_mib} MiB" if proc.used_mib is not None else ""
    return f"pid {proc.pid} ({proc.user or '?'}: {(proc.command or '?')[:40]}){mem}"

