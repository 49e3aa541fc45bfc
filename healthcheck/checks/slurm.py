"""What Slurm and our own state tell the run: the job's GPU list, the prolog's baseline."""

from __future__ import annotations

from typing import Iterator

from ..model import Action, Finding, Mode, NodeSnapshot, Severity
from .registry import CheckContext, finding as _f, node_check


@node_check("slurm.job_gpus", severity=Severity.UNKNOWN, action=Action.NONE)
def check_slurm_job_gpus(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The job's GPU list from Slurm could not be read, or names a gres index that gres.conf
    does not map to a GPU for certain, so we cannot tell which GPUs to probe.

    SLURM_JOB_GPUS holds gres indices (positions in slurmd's device list), not /dev/nvidiaN
    minors: read/gres.py and decide/gpumap.py map them as slurmd numbers its devices, and an
    index they cannot prove is reported here rather than guessed (guessing probed the wrong GPU,
    issue 17).
    Unknown, never fail: a malformed environment is not a GPU fault, and must not drain.
    The GPUs then get the NVML checks only, and no CUDA probe.
    """
    job = node.job
    if job is not None and job.gpu_ids_error:
        yield _f("slurm.job_gpus", Severity.UNKNOWN, None,
                 f"cannot tell the job's GPUs: {job.gpu_ids_error}; probed none, checked all "
                 f"with NVML only", value="malformed")


@node_check("state.baseline", severity=Severity.INFO, action=Action.NONE)
def check_state_baseline(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The epilog found no usable prolog baseline, so it judges absolute counters.

    Info: errors cannot be attributed to this job, but absolute volatile counters still fail.
    """
    if ctx.mode is Mode.EPILOG and node.baseline_error:
        yield _f("state.baseline", Severity.INFO, None,
                 f"{node.baseline_error}; judging absolute counters")

