"""Memory and processes left on a GPU: leaked contexts and leftover processes."""

from __future__ import annotations

from typing import Iterator

from ..model import Action, Finding, GpuProcess, GpuSnapshot, Mode, NodeSnapshot, Severity
from ..procinfo import is_mps_daemon
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

    Only the job's GPUs count: on a shared node other jobs legitimately use the rest.  With
    gres/mps or gres/shard several live jobs share one GPU: a process of another live job (its
    job cgroup, else `scontrol listpids` on this node) and the MPS server are co-tenants (info),
    not leftovers.  Fail in the prolog (the job would start out of memory); warn in the epilog
    (Slurm could not kill them); info by hand (the GPU is busy).
    nvidia-smi equivalent: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`.
    """
    if not gpu.processes or not ctx.is_selected(gpu.index):
        return
    procs = gpu.processes
    if ctx.mode is not Mode.NODE:
        # gres/mps and gres/shard give several live jobs the same GPU: their processes (and
        # the MPS server) are co-tenants, not leftovers.  This job's own processes in the
        # epilog are leftovers: they outlived it.
        this_job = node.job.job_id if node.job else None
        tenants = [p for p in procs if is_mps_daemon(p) or (p.job_id and p.job_id != this_job)]
        procs = tuple(p for p in procs if p not in tenants)
        if tenants and not procs:
            jobs = sorted({p.job_id for p in tenants if p.job_id})
            yield _f("processes.leftover", Severity.INFO, gpu,
                     f"{label(gpu)}: shared with live job(s) {', '.join(jobs) or '-'} "
                     f"(co-tenants of a shared GPU, gres/mps or gres/shard): "
                     f"{', '.join(_describe(p) for p in tenants[:4])}", value=0, threshold=0)
            return
    who = ", ".join(_describe(p) for p in procs[:4])
    more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
    if ctx.mode is Mode.PROLOG:
        yield _f("processes.leftover", Severity.FAIL, gpu,
                 f"{label(gpu)}: {len(procs)} process(es) left on the GPU, in no live job: "
                 f"{who}{more}; kill them or reset the GPU", value=len(procs), threshold=0,
                 action=Action.DRAIN)
    elif ctx.mode is Mode.EPILOG:
        yield _f("processes.leftover", Severity.WARN, gpu,
                 f"{label(gpu)}: {len(procs)} process(es) outlived the job: {who}{more}",
                 value=len(procs), threshold=0)
    else:
        yield _f("processes.leftover", Severity.INFO, gpu,
                 f"{label(gpu)}: in use by {who}{more}", value=len(procs))


def _describe(proc: GpuProcess) -> str:
    mem = f" {proc.used_mib} MiB" if proc.used_mib is not None else ""
    job = f" job {proc.job_id}" if proc.job_id else ""
    return f"pid {proc.pid} ({proc.user or '?'}: {(proc.command or '?')[:40]}){mem}{job}"

