"""Which nodes a fabric sweep takes (pure), from the nodes `scontrol -o show nodes` shows
(act/scontrol.py reads them into NodeState records).

    chosen, why_not = candidates(nodes, wanted=None, partition="gpu", reservation_nodes=None)
    retest, waiting = retest_candidates(nodes, wanted=None, partition="gpu")
    why = retest_refused(act, report_only, reservation)     # None: re-test them
    idle = idle_nodes(nodes, "gpu-healthcheck-sweep", already=["gpu-c"])   # the idle sweep's

A candidate is plainly idle (no DRAIN, DOWN, RESERVED, MAINT, REBOOT or other flag; with
`[internode] reservation` the idle nodes of that reservation), not claimed by the repair loop, with
GPUs, in the partition.  A node the repair loop rebooted for its fabric is no candidate: it is
re-tested in the partner rounds (decide/fabricretest.py).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .fabricretest import awaiting_retest
from .repair import parse_mark, reboot_flags
from .verdict import NodeState


def candidates(nodes: Sequence[NodeState], wanted: Optional[Sequence[str]], partition: Optional[str],
               reservation_nodes: Optional[Sequence[str]]) -> Tuple[List[str], Dict[str, str]]:
    """(the nodes to sweep, {a node of --nodes left out: why}) of the nodes `scontrol -o show
    nodes` shows: plainly idle (or reserved in [internode] reservation), in the partition, not
    claimed by the repair loop, with GPUs."""
    chosen: List[str] = []
    why_not: Dict[str, str] = {}
    seen = set()
    allowed = {"IDLE"} | ({"RESERVED", "MAINT"} if reservation_nodes is not None else set())
    for node in nodes:
        seen.add(node.name)
        if wanted is not None and node.name not in wanted:
            continue
        flags = set(node.state.upper().replace("*", "+NOT_RESPONDING").split("+"))
        reason = None
        if not node.in_partition(partition):
            reason = f"not in partition {partition}"
        elif reservation_nodes is not None and node.name not in reservation_nodes:
            reason = "not in the reservation"
        elif "IDLE" not in flags or not flags <= allowed or node.drained or reboot_flags(node.state):
            reason = f"not idle ({node.state})"
        elif parse_mark(node.comment):
            reason = f"claimed by the repair loop ({node.comment})"
        elif not node.has_gpus:
            reason = "no GPUs"
        if reason is None:
            chosen.append(node.name)
        elif wanted is not None:
            why_not[node.name] = reason
    for name in wanted or ():
        if name not in seen:
            why_not[name] = "not a node scontrol knows"
    return chosen, why_not


def retest_refused(act: bool, report_only: bool, reservation: Optional[str]) -> Optional[str]:
    """Why a node awaiting its fabric re-test is not re-tested by this sweep (its re-test
    resumes it into a reservation of its own), or None."""
    if not act:
        return "awaiting a fabric re-test: only --internode-sweep --act re-tests it"
    if report_only:
        return "awaiting a fabric re-test: report_only: would re-test it"
    if reservation:
        return (f"awaiting a fabric re-test: not re-tested while the sweep runs in [internode] "
                f"reservation {reservation}")
    return None


def retest_candidates(nodes: Sequence[NodeState], wanted: Optional[Sequence[str]],
                      partition: Optional[str]) -> Tuple[List[NodeState], Dict[str, str]]:
    """(the nodes the repair loop rebooted for their fabric that this sweep re-tests, {a node
    awaiting its re-test that is not re-tested now: why}) of the nodes `scontrol -o show nodes`
    shows (awaiting_retest)."""
    chosen: List[NodeState] = []
    why_not: Dict[str, str] = {}
    for node in nodes:
        if wanted is not None and node.name not in wanted:
            continue
        why = awaiting_retest(node)
        if why == "":
            continue  # not awaiting a re-test
        if why is None and not node.in_partition(partition):
            why = f"awaiting a fabric re-test, not in partition {partition}"
        if why is None:
            chosen.append(node)
        else:
            why_not[node.name] = why
    return chosen, why_not


# Node state flags after which a node is not plainly idle (scontrol's State=IDLE+FLAG+...):
# every flag excludes it, so a node that is drained, down, reserved, powering, rebooting or
# failing is never swept; only State=IDLE alone is.
IDLE = "IDLE"


def idle_nodes(nodes: Iterable[NodeState], partition: str, already: Iterable[str] = ()) -> List[str]:
    """The idle sweep's nodes (deploy/slurm/gpu-healthcheck-sweep): those of `partition` whose
    state is plain IDLE and which no sweep job asks for."""
    skip = set(already)
    return [n.name for n in nodes if partition in (n.partitions or ()) and n.state == IDLE and n.name not in skip]
