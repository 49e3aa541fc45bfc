"""The level a drain was found at, and what a run must have judged to undo it (pure).

    level = drain_level("deep", reason)                 # "quick" < "full" < "deep"
    why = short_of(level, ("deep.hbm",), "quick", snapshot)
    # "drained at level deep (deep.hbm): ... needs a pass at --level deep ..."

A fault that only a deeper level sees (an HBM 50 % slower than its siblings, a `dcgmi diag`
failure, memory that reads back wrong only when every byte is read) is invisible to the quick
check slurmd's HealthCheckProgram runs every few minutes: that check passing says nothing of
it.  So the note of our drain (staterecords.OurDrain) keeps the level and the checks of the
run that drained, and only a run at that level (or above) that judged those checks may resume
it, or the repair's own validation, which runs at that level (validation_level).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ..model import NodeSnapshot

LEVELS = ("quick", "full", "deep")
# Checks whose data only --level deep gathers: the on-device tests and dcgmi diag.  A reason
# naming one was a deep run's even where no note says so (a note lost, a pending drain).  A
# suspect's drain for verification (`gpu-healthcheck: suspect ...`, decide/verify.py) names
# `suspect`: what the statistics saw only the deep level may clear.
DEEP_CHECKS = ("deep.", "dcgm.diag", "suspect")


def rank(level: Optional[str]) -> int:
    """quick 0, full 1, deep 2; anything else counts as quick."""
    return LEVELS.index(level) if level in LEVELS else 0


def highest(*levels: Optional[str]) -> str:
    return max((lv for lv in levels if lv in LEVELS), key=rank, default="quick")


def found_at(checks: Iterable[str], run_level: str = "quick") -> str:
    """The least level whose run sees what these checks found, in a run at `run_level`: the deep
    tests and dcgmi diag only at deep, the CUDA probe's read-back of every byte only at full (at
    deep the probe is the quick one: the memory tests do the rest); anything else at any level,
    so an Xid a deep run drained for is resumed by the quick check once it is dealt with."""
    found = "quick"
    for check in checks:
        if check.startswith(DEEP_CHECKS):
            return "deep"
        if check == "cuda.probe" and run_level == "full":
            found = "full"
    return found


def drain_level(noted: Optional[str], checks: Iterable[str] = ()) -> str:
    """The level a drain was found at: the note's, and at least what its checks need."""
    return highest(noted, found_at(checks))


def validation_level(level: str) -> str:
    """The level a repair is proved at: the drain's, and never below full (every byte of every
    GPU's memory read back once the GPU was reset)."""
    return highest("full", level)


def unjudged(checks: Iterable[str], snapshot: NodeSnapshot) -> list:
    """The drain's checks this run gathered no data for: a --level deep run with the deep
    tests disabled, or dcgmi diag not run, has not looked at what drained the node."""
    missing = []
    for check in checks:
        if check.startswith("deep.") and snapshot.deep is None:
            missing.append(check)
        elif check.startswith("dcgm.diag") and not (snapshot.dcgm is not None and snapshot.dcgm.diag_ran):
            missing.append(check)
    return missing


def short_of(drained: str, checks: Sequence[str], level: str, snapshot: NodeSnapshot) -> Optional[str]:
    """Why a run at `level` may not resume a drain found at `drained` by `checks`, or None."""
    which = f" ({', '.join(checks)})" if checks else ""
    if rank(level) < rank(drained):
        return (f"drained at level {drained}{which}: a pass at --level {level} does not look at "
                f"it; resuming needs a pass at --level {drained} (gpu-healthcheck --node --act "
                f"--level {drained}) or the repair's validation at that level")
    missing = unjudged(checks, snapshot)
    if missing:
        return (f"drained for {', '.join(missing)}, which this run did not test (disabled in the "
                f"config, or not run): resuming needs a run that tests it again")
    return None
