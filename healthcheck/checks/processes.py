"""Memory and processes left on a GPU: leaked contexts and leftover processes."""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional

from ..model import (Action, Finding, GpuProcess, GpuSnapshot, Mode, NodeSnapshot, Severity,
                     not_a_co_tenant)
from .registry import CheckContext, finding as _f, gpu_check, label


# P0..P2: clocks up for work.  Only consulted where utilization cannot be read: data-centre
# boards idle in P0, so a readable 0 % utilization decides "idle" over the pstate.
BUSY_PSTATE_MAX = 2


def busy_signs(gpu: GpuSnapshot) -> List[str]:
    """Why a GPU whose memory no visible process holds looks in use anyway (pure): work that
    processes we cannot see (another PID namespace: a container, a slurmd in a pod) are doing."""
    signs = []
    if gpu.utilization_gpu_pct:
        signs.append(f"{gpu.utilization_gpu_pct} % GPU utilization")
    if gpu.utilization_memory_pct:
        signs.append(f"{gpu.utilization_memory_pct} % memory utilization")
    if (gpu.utilization_gpu_pct is None and gpu.pstate is not None
            and gpu.pstate <= BUSY_PSTATE_MAX):
        signs.append(f"performance state P{gpu.pstate} with utilization unknown")
    return signs


@gpu_check("memory.leaked", severity=Severity.FAIL, action=Action.RESET,
           threshold_key="thresholds.memory_leaked_mib")
def check_memory_leaked(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Memory in use with no visible process on the GPU, above `thresholds.memory_leaked_mib`.

    Two different things look alike, and the message says which:
    - idle (0 % utilization): a context that outlived its process (the incident's "CUDA out of
      memory" at the next job's start).  Prolog: fail, reset the GPU; otherwise warn.
    - busy (utilization above 0, or P0-P2 where utilization cannot be read): processes we
      cannot see are using it (another PID namespace, a container).  Resetting would kill
      someone's work: the prolog still fails (action drain, never reset); otherwise warn.
    nvidia-smi equivalent: `nvidia-smi --query-gpu=memory.used,utilization.gpu,pstate
    --format=csv` with no process listed.
    """
    if not ctx.is_selected(gpu.index) or gpu.memory_used_mib is None or gpu.processes is None:
        return
    if _other_instances(gpu, node):
        return
    limit = ctx.config.thresholds.memory_leaked_mib
    if gpu.processes or gpu.memory_used_mib <= limit:
        return
    severity = Severity.FAIL if ctx.mode is Mode.PROLOG else Severity.WARN
    signs = busy_signs(gpu)
    if signs:
        what = "the job must not start here" if severity is Severity.FAIL else "left alone"
        yield _f("memory.leaked", severity, gpu,
                 f"{label(gpu)}: in use by processes not visible from here (another container or "
                 f"PID namespace): {gpu.memory_used_mib} MiB used, {', '.join(signs)}, and no "
                 f"process we can see; not a leak, do not reset it: find who uses it ({what})",
                 value=gpu.memory_used_mib, threshold=limit,
                 action=Action.DRAIN if severity is Severity.FAIL else Action.NONE)
        return
    idle = (f"{gpu.utilization_gpu_pct} % utilization" if gpu.utilization_gpu_pct is not None
            else "utilization unknown") + (f", P{gpu.pstate}" if gpu.pstate is not None else "")
    yield _f("memory.leaked", severity, gpu,
             f"{label(gpu)}: leaked: {gpu.memory_used_mib} MiB in use on an idle GPU ({idle}) with "
             f"no process, limit {limit} MiB; a context outlived its process: reset the GPU",
             value=gpu.memory_used_mib, threshold=limit,
             action=Action.RESET if severity is Severity.FAIL else Action.NONE)


@gpu_check("processes.leftover", severity=Severity.FAIL, action=Action.DRAIN)
def check_processes_leftover(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Compute processes on a GPU that the job is about to get (prolog) or just released (epilog).

    Only the job's GPUs count: on a shared node other jobs legitimately use the rest.  With
    gres/mps or gres/shard configured for this node several live jobs share one GPU: a process
    of another job that slurmd still runs (`scontrol listpids`), on a GPU that job was given
    (its SLURM_JOB_GPUS, where it has one), and the MPS server are co-tenants (info), not
    leftovers (model.not_a_co_tenant).  A process in a stale job cgroup, of a job on a GPU it was
    not given, or of another job on a node that shares no GPU is a leftover.  Fail in the
    prolog (the job would start out of memory); warn in the epilog (Slurm could not kill them);
    info by hand (the GPU is busy).
    nvidia-smi equivalent: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`.
    """
    if not gpu.processes or not ctx.is_selected(gpu.index) or _other_instances(gpu, node):
        return
    procs = gpu.processes
    why: Dict[int, Optional[str]] = {}
    if ctx.mode is not Mode.NODE:
        # This job's own processes in the epilog are leftovers: they outlived it.
        this_job = node.job.job_id if node.job else None
        why = {p.pid: not_a_co_tenant(p, gpu.index, node.shared_gres, this_job) for p in procs}
        tenants = [p for p in procs if why[p.pid] is None]
        procs = tuple(p for p in procs if why[p.pid] is not None)
        if tenants and not procs:
            jobs = sorted({p.job_id for p in tenants if p.job_id})
            yield _f("processes.leftover", Severity.INFO, gpu,
                     f"{label(gpu)}: shared with live job(s) {', '.join(jobs) or '-'} "
                     f"(co-tenants of a shared GPU, gres/{' or gres/'.join(node.shared_gres)}): "
                     f"{', '.join(_describe(p) for p in tenants[:4])}", value=0, threshold=0)
            return
    reasons = sorted({r for r in (why.get(p.pid) for p in procs)
                      if r and r != "in no live job" and not r.startswith("of this job")})
    procs_note = f" ({'; '.join(reasons[:3])})" if reasons else ""
    who = ", ".join(_describe(p) for p in procs[:4])
    more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
    if ctx.mode is Mode.PROLOG:
        yield _f("processes.leftover", Severity.FAIL, gpu,
                 f"{label(gpu)}: {len(procs)} process(es) left on the GPU, in no live job: "
                 f"{who}{more}{procs_note}; kill them or reset the GPU", value=len(procs), threshold=0,
                 action=Action.DRAIN)
    elif ctx.mode is Mode.EPILOG:
        yield _f("processes.leftover", Severity.WARN, gpu,
                 f"{label(gpu)}: {len(procs)} process(es) outlived the job: {who}{more}{procs_note}",
                 value=len(procs), threshold=0)
    else:
        yield _f("processes.leftover", Severity.INFO, gpu,
                 f"{label(gpu)}: in use by {who}{more}", value=len(procs))


def _other_instances(gpu: GpuSnapshot, node: NodeSnapshot) -> bool:
    """A job given some MIG devices of a MIG-enabled GPU shares it with other jobs' instances:
    the GPU's memory and processes are theirs as much as its own (its instances get the probe)."""
    return bool(gpu.mig_mode and node.job is not None and node.job.mig_uuids)


def _describe(proc: GpuProcess) -> str:
    mem = f" {proc.used_mib} MiB" if proc.used_mib is not None else ""
    job = f" job {proc.job_id}" if proc.job_id else ""
    return f"pid {proc.pid} ({proc.user or '?'}: {(proc.command or '?')[:40]}){mem}{job}"

