"""Drain one node the fabric found bad (the gang check's, and any fabric finding's), through the
one scontrol door and by the rules of every drain of ours.

    taken, reason = drain_fabric_node(ctl, "gpu-c", reason, config, act=True, events=events,
                                      fields={"GPU_HEALTHCHECK_MODE": "gang"})

Within `drain.max_fraction` (decided before, held after with act/scontrol.hold_budget), never
over an admin's reason (their drain is kept and ours only logged), and not at all under
`drain.report_only` or without `act`: then it only says what it would have done.  A refused
drain is noted in the node's Comment after the site's part of it, which is kept.  Every step
leaves a LogEvent for the journal; `taken` is an Outcome value (applied, refused, admin_owned,
already_ours, report_only) or "error: ..." when scontrol failed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Dict, List, Tuple

from ..decide.verdict import DrainDecision, NodeState, decide_drain, refused_comment, with_our_comment
from ..model import CRIT, ERR, WARNING, DoorError, LogEvent, Outcome
from ..text import iso_utc

if TYPE_CHECKING:
    from ..config import Config
    from .scontrol import Scontrol


def drain_fabric_node(ctl: "Scontrol", node: str, reason: str, config: "Config", act: bool,
                      events: List[LogEvent], fields: Dict[str, str],
                      sleep: Callable[[float], None] = time.sleep) -> Tuple[str, str]:
    from .scontrol import hold_budget

    fields = dict(fields, SLURMD_NODENAME=node)
    if not act or config.drain.report_only:
        why = "report_only" if act else "without --act"
        events.append(LogEvent("drain", WARNING, f"{why}: would drain {node}: {reason}", fields,
                               Outcome.REPORT_ONLY))
        return Outcome.REPORT_ONLY.value, reason
    try:
        nodes = ctl.show_nodes()
        this = next((n for n in nodes if n.name == node), None) or NodeState(node, "UNKNOWN")
        decision = decide_drain(this, nodes, config.drain.max_fraction)
        if decision is DrainDecision.ADMIN_OWNED:
            events.append(LogEvent("drain", WARNING, f"{node} is already drained by someone else "
                                                     f"({this.reason}); kept. Ours would be: {reason}",
                                   fields, Outcome.KEPT))
            return Outcome.ADMIN_OWNED.value, reason
        if decision is DrainDecision.ALREADY_OURS:
            return Outcome.ALREADY_OURS.value, this.reason or reason
        if decision is DrainDecision.APPLY:
            ctl.drain(node, reason)
            if hold_budget(ctl, node, reason, config.drain.max_fraction, sleep=sleep).kept:
                events.append(LogEvent("drain", CRIT, f"drained {node}: {reason}", fields, Outcome.APPLIED))
                return Outcome.APPLIED.value, reason
        # the node runs jobs, so the refusal is noted in its Comment, after the site's own note
        # (a ticket number, a word for the next admin), which is kept as it is
        ctl.set_comment(node, with_our_comment(this.comment, refused_comment(reason, iso_utc(time.time()))))
        events.append(LogEvent("refused", CRIT, f"drain of {node} refused: drain.max_fraction = "
                                                f"{config.drain.max_fraction}; would have drained with: {reason}",
                               fields, Outcome.REFUSED))
        return Outcome.REFUSED.value, reason
    except DoorError as exc:
        events.append(LogEvent("error", ERR, f"cannot drain {node}: {exc}; reason: {reason}", fields))
        return f"error: {exc}", reason
