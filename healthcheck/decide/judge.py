"""A snapshot judged: findings, crashes and the verdict (pure).

    findings, crashes, verdict = judge(snapshot, config, Mode.PROLOG, "quick", selected)
"""

from __future__ import annotations

from typing import List, Optional, Tuple

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
