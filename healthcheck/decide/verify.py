"""What a suspect gets (pure): verification, then resume, a lemon hold, or the repair loop's path.

    reason = suspect_reason(suspect)        # "gpu-healthcheck: suspect black_hole failed_fast=6 users=3 jobs=41,42"
    sends = plan_sends(suspects, cluster, sent, now, config.suspects)   # which nodes --suspects --act drains
    count = lemon_count(attempts, node, now, config.suspects)           # None: not a lemon
    reason = lemon_reason(count, config.suspects, suspect_reason)       # "gpu-healthcheck: lemon remediations=5/7d ..."

Statistics never resume or repair a node by themselves; they only send it to be looked at:
1. `--suspects --act` (with `[suspects] act = true`) drains each suspect node after its running
   jobs, with the reason `gpu-healthcheck: suspect <kind> <evidence>`, within the drain budget
   (drain.max_fraction), never over an admin's reason, not under drain.report_only, and not
   again within `suspects.verify_cooldown_s` of its last send (its evidence stays in the window
   after it was verified);
2. the repair loop (`--repair`, or `--node --act` with [repair] enabled) on that node, once it is
   idle, claims the repair budget (state `verifying`), within repair.cooldown_s, and runs the
   deep level (a suspect reason names the check `suspect`, a deep one: decide.levels);
3. then: a fault found is drained for in its own words and takes the repair loop's path (reset,
   reboot, rma); a pass on a node with `suspects.remediations` repairs of its own within
   `suspects.remediation_window_s` (NVSentinel's 5 in 7 days) holds it for a person
   (`gpu-healthcheck: lemon remediations=5/7d ...`, never resumed by any run of ours); a pass
   with `suspects.internode_retest` leaves it drained for the internode sweep's re-test with known-good
   partners (decide.fabricretest); any other pass resumes it, if its reason is still ours.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from ..model import Action, Finding, Severity
from ..records import NamedTuple
from .ledgers import Attempt, counted
from .verdict import (FABRIC_PREFIX, LEMON_HOLD, LEMON_PREFIX, SUSPECT_HOLD, SUSPECT_PREFIX,  # noqa: F401
                      NodeState, is_lemon_reason, is_ours, is_suspect_reason, sanitise)

if TYPE_CHECKING:
    from ..configsections import SuspectsConfig
    from ..fleetmodel import Suspect

SUSPECT_CHECK = "suspect"  # the check a suspect reason names (decide.levels: a deep one)
VERIFY = "verify"  # the repair loop's action for a suspect drain (decide.repair)
VERIFYING = "verifying"  # its claim's state
# --suspects --act's outcome per node, in its history line (`verification`)
COOLDOWN = "cooldown"
REMEDIATIONS = frozenset({"reset", "reboot"})  # decide.suspects.REMEDIATION_KINDS: the repairs counted
RESUME, LEMON, FABRIC_RETEST = "resume", "lemon", "fabric_retest"


class Send(NamedTuple):
    """One node --suspects --act sends to verification, or why not (`skip`)."""

    node: str
    kind: str
    reason: str
    skip: str = ""  # "" sends it; else COOLDOWN, or the node is not in slurmctld's list


def _fig(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def evidence_words(s: "Suspect") -> str:
    """The evidence in a few `key=value` words (a reason holds 255 bytes; the history and
    --json keep all of it)."""
    e: Mapping[str, Any] = s.evidence
    if s.kind == "black_hole":
        words = [f"failed_fast={e.get('failed_fast')}", f"users={e.get('users')}",
                 f"within={_fig(e.get('within_s'))}s", f"jobs={','.join(map(str, e.get('jobs') or ()))}"]
    elif s.kind == "lemon":
        words = [f"failures={_fig(e.get('failures'))}", f"expected={_fig(e.get('expected'))}",
                 f"p={_fig(float(e.get('p_value') or 0.0))}", f"users={e.get('users_in_excess')}",
                 f"jobs={','.join(map(str, e.get('failed_jobs') or ()))}"]
    else:
        words = [f"{k}={_fig(v)}" for k, v in e.items() if isinstance(v, (int, float, str))]
    if s.serial:
        words.insert(0, f"sn={re.sub(r'[^A-Za-z0-9._-]', '_', s.serial)}")
    return " ".join(w.replace(" ", "_") for w in words)


def suspect_reason(s: "Suspect") -> str:
    return sanitise(f"{SUSPECT_PREFIX}{s.kind} {evidence_words(s)}")


def suspect_kind(reason: Optional[str]) -> str:
    """The rule a suspect reason names ("black_hole"), "" for any other reason."""
    if not is_suspect_reason(reason):
        return ""
    words = (reason or "")[len(SUSPECT_PREFIX):].split()
    return words[0] if words else ""


def suspect_trigger(reason: Optional[str]) -> Optional[Finding]:
    """The finding the repair loop verifies a suspect drain for (node-wide, no GPU, no ledger);
    None for any other reason."""
    if not is_suspect_reason(reason):
        return None
    return Finding(SUSPECT_CHECK, Severity.FAIL,
                   f"drained for verification as a suspect ({(reason or '')[len(SUSPECT_PREFIX):]}): "
                   f"the deep level decides", value=suspect_kind(reason), action=Action.DRAIN)


def plan_sends(suspects: Sequence["Suspect"], cluster: Sequence[NodeState], sent: Mapping[str, float],
               now: float, cfg: "SuspectsConfig") -> List[Send]:
    """One Send per suspect node, its worst suspect first named (the rules' order: black holes,
    lemons, our own history).  `sent`: node -> when this host last sent it to verification
    (its history)."""
    known = {n.name for n in cluster}
    out: List[Send] = []
    seen = set()
    for s in suspects:
        if s.node in seen:
            continue
        seen.add(s.node)
        skip = ""
        if s.node not in known:
            skip = "not in slurmctld's node list"
        elif s.node in sent and now - sent[s.node] < cfg.verify_cooldown_s:
            skip = COOLDOWN
        out.append(Send(s.node, s.kind, suspect_reason(s), skip))
    return out


def last_sends(records: Sequence[Dict[str, Any]]) -> Dict[str, float]:
    """node -> the epoch of its last send to verification, from --suspects history lines
    (their suspects' `verification`: "applied"; a node drained already, by us for a fault of
    its own or by someone else, was not sent)."""
    out: Dict[str, float] = {}
    for rec in records:
        if not isinstance(rec, dict) or rec.get("mode") != "suspects":
            continue
        epoch = rec.get("epoch")
        if not isinstance(epoch, (int, float)):
            continue
        for item in rec.get("suspects") or ():
            if isinstance(item, dict) and item.get("verification") == "applied" \
                    and isinstance(item.get("node"), str):
                out[item["node"]] = max(out.get(item["node"], 0.0), float(epoch))
    return out


def lemon_count(attempts: Mapping[str, Sequence[Attempt]], node: str, now: float,
                cfg: "SuspectsConfig") -> Optional[int]:
    """The node's own repairs (resets and reboots that ran, from every ledger read: a reboot
    blaming two GPUs is one repair) within remediation_window_s before now, when they are at
    least `remediations`; None otherwise."""
    made = {(round(a.at, 3), a.action) for runs in attempts.values() for a in runs
            if a.node == node and a.action in REMEDIATIONS and counted(a)
            and 0 <= now - a.at <= cfg.remediation_window_s}
    return len(made) if len(made) >= cfg.remediations else None


def _window_words(seconds: float) -> str:
    return f"{seconds / 86400:g}d" if seconds >= 86400 and seconds % 86400 == 0 else f"{seconds:g}s"


def lemon_reason(count: int, cfg: "SuspectsConfig", before: Optional[str]) -> str:
    """`gpu-healthcheck: lemon remediations=5/7d suspect=black_hole failed_fast=6 ...`: the
    count, its window, and the suspect's evidence from its drain reason."""
    was = (before or "")[len(SUSPECT_PREFIX):] if is_suspect_reason(before) else ""
    kind, _, rest = was.partition(" ")
    tail = f" suspect={kind} {rest}" if kind else ""
    return sanitise(f"{LEMON_PREFIX}remediations={count}/{_window_words(cfg.remediation_window_s)}{tail}")


def fabric_retest_reason(before: Optional[str]) -> str:
    """A verified suspect left for the internode sweep's re-test: a fabric reason (decide.sweep's
    form, so decide.fabricretest takes it) naming the suspect's rule."""
    kind = suspect_kind(before) or "suspect"
    return sanitise(f"{FABRIC_PREFIX}suspect={kind} partners=- verification")


def after_pass(count: Optional[int], fabric_retest: bool) -> str:
    """What follows a verification that found nothing: LEMON (the lemon rule met), FABRIC_RETEST
    (`suspects.internode_retest`: the sweep re-tests it), RESUME."""
    if count is not None:
        return LEMON
    return FABRIC_RETEST if fabric_retest else RESUME


def may_resume_verified(this: Optional[NodeState], reason_then: Optional[str]) -> Optional[str]:
    """None when the verified node may be resumed now: still drained by us for this
    verification; else why not (an admin's reason is never overwritten nor resumed)."""
    if this is None:
        return "it is gone from scontrol's node list"
    if not this.drained:
        return f"it is no longer drained (State={this.state})"
    if not is_ours(this.reason) or not is_suspect_reason(this.reason):
        return f"its reason is no longer our suspect drain (now: {this.reason})"
    if reason_then and this.reason != reason_then:
        return f"its reason changed (now: {this.reason})"
    return None
