"""What a run may do to the node, and which step it takes once judged (pure).

    plan = plan_run(request, config)            # before reading: may it act at all?
    step = next_step(plan, reason, verdict)     # after judging: drain, resume, report only, none

The prolog and the epilog always act (Slurm runs them to protect the next job); `--node` acts
only with `--act` (HealthCheckProgram, the systemd timer), which is then also the run that
resumes our own drains, acknowledges Xids an admin dealt with, and must end within
`act_budget_s`.  `[drain] report_only` turns every change into a log line.
"""

from __future__ import annotations

from typing import Optional, Tuple

from ..config import Config
from ..model import Mode, RunRequest, Verdict
from ..records import NamedTuple


class RunPlan(NamedTuple):
    mode: Mode
    acting: bool  # prolog, epilog, --node --act: a fault becomes a drain
    health_check: bool  # --node --act: budgeted, may resume our drain and acknowledge Xids
    report_only: bool  # [drain] report_only on an acting run: say it, change nothing
    only_gpus: Optional[Tuple[int, ...]] = None  # --node --gpus: judge and list only these

    @property
    def changes_node(self) -> bool:
        return self.acting and not self.report_only

    def records_baseline(self, job_id: Optional[str]) -> bool:
        """The prolog leaves the job's epilog its counters and kernel-log position."""
        return self.mode is Mode.PROLOG and bool(job_id)

    def consumes_baseline(self, job_id: Optional[str], have_baseline: bool) -> bool:
        """The epilog removes the baseline it judged against."""
        return self.mode is Mode.EPILOG and bool(job_id) and have_baseline


class Step:
    """The step a judged run takes (plain strings: an Enum class costs ~0.2 ms to create, at
    every job start)."""

    REPORT_ONLY = "report_only"  # log what would be done
    DRAIN = "drain"
    RESUME = "resume"  # resume our own drain if the node passes in the drain's context
    NONE = "none"


def plan_run(request: RunRequest, config: Config) -> RunPlan:
    acting = request.mode is not Mode.NODE or request.act
    return RunPlan(mode=request.mode, acting=acting,
                   health_check=request.mode is Mode.NODE and request.act,
                   report_only=acting and config.drain.report_only,
                   only_gpus=request.gpus if request.mode is Mode.NODE else None)


def next_step(plan: RunPlan, reason: Optional[str], verdict: Verdict) -> str:
    if plan.report_only:
        return Step.REPORT_ONLY
    if plan.acting and reason:
        return Step.DRAIN
    if plan.health_check and verdict is not Verdict.FAIL:
        return Step.RESUME
    return Step.NONE
