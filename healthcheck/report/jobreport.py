"""What `gpu-healthcheck --job-report` says (commands/jobreport.py runs it): one line per faulty
GPU of the job, naming its worst finding, or one saying they look healthy; and why a requeued
job was requeued.

    gpu-healthcheck: gpu-a GPU 2 (00000000:38:00.0, SN 1650522003802): 3 volatile uncorrected
    ECC errors, limit 0; this node will be drained
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from ..model import Finding, NodeSnapshot

PREFIX = "gpu-healthcheck:"


def _short(message: str) -> str:
    """A check message without its advice: "GPU 2 (...): 3 volatile ... errors, limit 0"."""
    head, sep, _ = message.partition(". ")
    return head if sep else message.rstrip(".")


def job_faults(findings: Sequence[Finding], snapshot: NodeSnapshot) -> Dict[Optional[int], Finding]:
    """The worst draining finding of each of the job's GPUs (None: node-wide), worst first."""
    from ..decide.verdict import draining

    selected = set(snapshot.selected)
    worst: Dict[Optional[int], Finding] = {}
    for f in draining(findings):  # worst first
        if f.gpu is None or f.gpu in selected:
            worst.setdefault(f.gpu, f)
    return worst


def report_lines(node: str, findings: Sequence[Finding], snapshot: NodeSnapshot,
                 whose: str = "the job's GPUs") -> List[str]:
    """One line per faulty GPU of the job, naming its worst finding (node-wide faults too), or
    one line saying the job's GPUs look healthy."""
    selected = set(snapshot.selected)
    worst = job_faults(findings, snapshot)
    if worst:
        return [f"{PREFIX} {node} {_short(f.message)}; this node will be drained"
                for f in worst.values()]
    gpus = ", ".join(str(i) for i in sorted(selected)) or "none"
    return [f"{PREFIX} {node}: {whose} ({gpus}) look healthy (ECC, row remapping, "
            f"retired pages, lost GPUs read through NVML)"]


def requeue_line(restarts: int, admin_comment: Optional[str]) -> Optional[str]:
    """Why a requeued job was requeued, as far as the job may see it."""
    if restarts <= 0:
        return None
    times = "once" if restarts == 1 else f"{restarts} times"
    if admin_comment and admin_comment.startswith(PREFIX):
        return (f"{PREFIX} this job was requeued {times}; the node it was first given failed "
                f"its check: {admin_comment[len(PREFIX):].strip()}")
    if admin_comment:
        return f"{PREFIX} this job was requeued {times}; AdminComment: {admin_comment}"
    return f"{PREFIX} this job was requeued {times}; Slurm recorded no reason the job can see"
