"""A snapshot judged: findings, crashes and the verdict (pure).

    findings, crashes, verdict = judge(snapshot, config, Mode.PROLOG, "quick", selected)
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..checks import CheckContext, CheckCrash, run_checks
from ..config import Config
from ..model import Finding, Mode, NodeSnapshot, Verdict
from .verdict import parse_reason, verdict_of


def judge(snapshot: NodeSnapshot, config: Config, mode: Mode, level: str,
          selected: Optional[Tuple[int, ...]],
          only_gpus: Optional[Tuple[int, ...]] = None) -> Tuple[List[Finding], List[CheckCrash], Verdict]:
    """Every enabled check of the catalogue on the snapshot.  `only_gpus` (--node --gpus) leaves
    the other GPUs out of the judgement altogether."""
    ctx = CheckContext(config=config, mode=mode, level=level, selected=selected)
    if only_gpus is not None:
        snapshot = snapshot._replace(gpus=tuple(g for g in snapshot.gpus if g.index in only_gpus))
    findings, crashes = run_checks(snapshot, ctx)
    return findings, crashes, verdict_of(findings)


def judge_as_drained(snapshot: NodeSnapshot, config: Config, reason: Optional[str],
                     level: str) -> Tuple[Optional[str], List[Finding]]:
    """The findings of this snapshot judged in the context our drain reason names (prolog or
    epilog), on every GPU.  A prolog-only fault (memory.leaked, processes.leftover) is a
    warning by hand but failed the prolog: resuming because `--node` calls it a warning would
    drain the node again at the next job start, and so on."""
    fields = parse_reason(reason or "") or {}
    context = fields.get("context")
    if context not in (Mode.PROLOG.value, Mode.EPILOG.value):
        return None, []
    ctx = CheckContext(config=config, mode=Mode(context), level=level, selected=None)
    return context, run_checks(snapshot, ctx)[0]


def as_drained(findings: Sequence[Finding], snapshot: NodeSnapshot, config: Config,
               reason: Optional[str], level: str) -> List[Finding]:
    """One judgement for the resume and the repair: the run's findings, and in place of each
    finding the context that drained the node (judge_as_drained) judges as draining, that
    one.  The resume keeps the node drained for what the prolog would fail; the repair then
    repairs that, rather than finding nothing to repair in `--node`'s milder words and
    leaving the node drained for ever."""
    _, context_findings = judge_as_drained(snapshot, config, reason, level)
    worse = {(f.check, f.gpu): f for f in context_findings if f.drains}
    kept = [f for f in findings if (f.check, f.gpu) not in worse or f.drains]
    seen = {(f.check, f.gpu) for f in kept}
    return kept + [f for key, f in worse.items() if key not in seen]
