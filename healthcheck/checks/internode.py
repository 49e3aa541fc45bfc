"""The multi-node checks: what collectives over several nodes say of one node.

    for node in outcome.nodes:                      # the fabric sweep's (decide/sweep.py)
        findings += check_fabric_busbw(node, retest=node.node in retested)
    for node in (*result.bad, *result.others):      # the gang check's (decide/gang.py)
        findings += check_fabric_gang(node)

A node check judges one node's snapshot; a collective (nccl-tests' all_reduce_perf over a pair,
a group or a job's nodes) judges the fabric between nodes, and only the search for the bad
node (pairs, then known-good partners: decide/sweep.py's planner, decide/gang.py's plan) can say
which node a slow or failed collective was about.  These checks take that search's conclusion
for one node (netmodel.NodeOutcome) and make the node's Finding, with the node and the partners
it failed with, as every other check makes its findings: `--list-checks` lists them, the history
and the journal carry them.  Their thresholds (`internode.busbw_floor_gbps`, `[internode] floors`,
`internode.median_ratio_fail`, `internode.partners`) are applied by that search; docs/network.md gives
their sources.
"""

from __future__ import annotations

from typing import Iterator

from ..model import Action, Finding, Severity
from ..netmodel import BAD, TRANSIENT, UNKNOWN, NodeOutcome
from .registry import internode_check

# A node's conclusion -> its finding's severity (the others are history only: info)
_SEVERITY = {BAD: Severity.FAIL, UNKNOWN: Severity.UNKNOWN}


@internode_check("fabric.busbw", severity=Severity.FAIL, action=Action.DRAIN,
                 threshold_key="internode.busbw_floor_gbps")
def check_fabric_busbw(node: NodeOutcome, retest: bool = False) -> Iterator[Finding]:
    """A node whose collectives fail or run slow with every one of `internode.partners` known-good partners in a fabric sweep.

    Slow means below `internode.busbw_floor_gbps` (or its GPU model's `[internode] floors` entry),
    or below `internode.median_ratio_fail` (0.7) of its model's median over the sweep's first
    round; failed means a hang, an NCCL error or wrong elements.  The floor is off (0) until a
    site sets it, since no floor fits every machine (Google's cluster-health-scanner uses 60 to
    250 GB/s busbw between two nodes, by machine; docs/network.md has the table); the median
    rule catches one slow node among similar ones without it.  Such a node is bad: fail, drain.
    One that failed a pair but passed with its partners is transient (info, history only); one
    the evidence cannot clear nor blame is unknown (tested first at the next sweep).  A node
    re-tested after the repair loop's reboot always has a finding (`retest`).
    nccl-tests equivalent: `srun -N2 --ntasks-per-node=8 all_reduce_perf -b 1G -e 4G -f 2 -g 1`
    over the node and a known-good partner; the busbw column of the largest size.
    """
    if node.outcome not in (BAD, UNKNOWN, TRANSIENT) and not retest:
        return
    severity = _SEVERITY.get(node.outcome, Severity.INFO)
    yield Finding(check="fabric.busbw", severity=severity, message=f"{node.node}: {node.outcome}: {node.why}",
                  value=node.busbw_gbps, action=Action.DRAIN if node.outcome == BAD else Action.NONE,
                  node=node.node, partners=node.partners)


@internode_check("fabric.gang", severity=Severity.FAIL, action=Action.DRAIN,
                 threshold_key="internode.busbw_floor_gbps")
def check_fabric_gang(node: NodeOutcome) -> Iterator[Finding]:
    """A node of a multi-node job that fails the gang check's collectives with every one of `internode.partners` known-good nodes of the same job.

    The gang check runs one collective over the job's nodes at its start; when that fails
    (below `internode.busbw_floor_gbps` or its GPU model's `[internode] floors` entry, a hang, an
    NCCL error, wrong elements: one run has no median to compare with), it pairs the job's own
    nodes as the fabric sweep does, and a node that fails with every known-good partner is bad:
    fail, drain, and the job is requeued without it.  A node the pairs cannot clear nor blame is
    unknown: named as a suspect, never drained.
    nccl-tests equivalent: `srun --jobid=JOB --overlap --ntasks-per-node=8 all_reduce_perf -b
    256M -e 256M -g 1` (`internode.gang_bytes`) over the job's nodes, then over pairs of them.
    """
    severity = _SEVERITY.get(node.outcome)
    if severity is None:
        return
    yield Finding(check="fabric.gang", severity=severity, message=f"{node.node}: {node.why}",
                  value=node.busbw_gbps, action=Action.DRAIN if node.outcome == BAD else Action.NONE,
                  node=node.node, partners=node.partners)
