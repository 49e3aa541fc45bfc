"""The gang check's decisions (pure): a multi-node job's own nodes, one short collective over all
of them, and, when it fails, which node of the allocation is to blame.

    job = parse_show_job(scontrol_show_job_text)      # slurmctld's record: never the job's env
    plan = GangPlan(job.nodes, Thresholds(floor_gbps=100.0), partners=2)
    jobs = plan.next_jobs()                           # first [the whole allocation], then rounds
    while jobs:                                       # of pairs and partners inside it
        plan.record(run_them(jobs))                   # act/gang.py runs each with srun --overlap
        jobs = plan.next_jobs()
    result = plan.result()                            # passed | bad nodes | unknown, and why

The rounds:
1. **whole**: the collective once across every node of the job (`[fabric] gang_bytes`, one
   message size).  It fails on an NCCL error, wrong elements, a hang, a run cut off, or a bus
   bandwidth below `busbw_floor_gbps` (a single run has no median to compare with, so without a
   floor only outright failures count).  Passing ends the check.
2. **find the node** (only after a failure): decide/sweep.py's SweepPlanner over the
   allocation's nodes alone: disjoint pairs, then each suspect with `partners` known-good nodes
   of the same job; a node failing with every partner is **bad**.  Nothing outside the job's
   allocation is ever run on.  A failure no pair reproduces (it needs the whole job) names no
   node: nothing is drained.

With one node there is nothing to check (`single`).  With two nodes a failing pair cannot tell
which of its two is bad (no third node to partner with): both are unknown, nothing is drained.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..records import NamedTuple
from .sweep import (BAD, FABRIC_PREFIX, Job, JobResult, NodeOutcome, SweepPlanner, Thresholds,
                    failure, reason_token)
from .verdict import sanitise

PASSED, FAILED, SINGLE, UNKNOWN = "passed", "failed", "single", "unknown"
LINE = "gpu-healthcheck: gang:"  # every line the gang check writes into the job's output
_JOB_ID_RE = re.compile(r"[1-9][0-9]{0,9}")
_FIELD_RE = re.compile(r"(?:^|\s)(JobId|UserId|JobState|NodeList|Restarts|Requeue|BatchHost)=(\S*)")


class GangJob(NamedTuple):
    job_id: str
    nodes: Tuple[str, ...]
    state: str = "UNKNOWN"
    user: str = ""  # UserId=name(uid)
    restarts: int = 0
    requeue: bool = True  # Requeue=1: the job may be requeued


class GangResult(NamedTuple):
    outcome: str  # passed | failed | single | unknown
    whole: Optional[JobResult]  # the collective over every node
    bad: Tuple[NodeOutcome, ...] = ()  # the nodes found bad, worst evidence each
    others: Tuple[NodeOutcome, ...] = ()  # the rest of the localisation (transient, unknown, pass)
    why: str = ""  # why the whole run failed, or why no node could be named
    rounds: int = 0
    jobs: int = 0


def valid_job_id(job_id: Optional[str]) -> bool:
    """A plain numeric job id (never another job by its array syntax, `1234_5`)."""
    return bool(job_id) and _JOB_ID_RE.fullmatch(job_id or "") is not None


def parse_show_job(text: str, expand: Optional[Callable[[str], List[str]]] = None) -> GangJob:
    """`scontrol show job ID` (either layout: one line with -o, or several) -> GangJob.

    `expand` turns a hostlist into names (read/slurmconf.expand_hostlist; a parameter so that
    this module imports no reader).  Raises ValueError when the text names no job or no nodes.
    """
    fields: Dict[str, str] = {}
    for m in _FIELD_RE.finditer(text):
        fields.setdefault(m.group(1), m.group(2))
    job_id = fields.get("JobId", "")
    if not valid_job_id(job_id):
        raise ValueError(f"scontrol show job printed no job id: {text[:200]!r}")
    nodelist = fields.get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        raise ValueError(f"job {job_id} has no nodes (JobState={fields.get('JobState', '?')})")
    nodes = tuple(expand(nodelist)) if expand else tuple(nodelist.split(","))
    restarts = fields.get("Restarts", "0")
    return GangJob(job_id, nodes, fields.get("JobState", "UNKNOWN"), fields.get("UserId", ""),
                   int(restarts) if restarts.isdigit() else 0, fields.get("Requeue", "1") != "0")


class GangPlan:
    """The whole-job collective, then (after a failure) the SweepPlanner's pairs and partners
    over the job's own nodes.  `first`: nodes to pair first (a claim to test early); it only
    orders the rounds, it never decides anything."""

    def __init__(self, nodes: Sequence[str], thresholds: Thresholds, partners: int = 2,
                 first: Sequence[str] = ()) -> None:
        self.nodes = tuple(dict.fromkeys(nodes))
        self.thresholds = thresholds
        self.partners = partners
        self.first = tuple(n for n in first if n in self.nodes)
        self.whole: Optional[JobResult] = None
        self.whole_why: Optional[str] = None
        self.planner: Optional[SweepPlanner] = None
        self.rounds = 0
        self.jobs = 0

    def next_jobs(self) -> List[Job]:
        if len(self.nodes) < 2:
            return []
        if self.whole is None:
            if self.rounds:
                return []  # the whole run was asked for and never recorded: stop
            self.rounds, self.jobs = 1, 1
            return [Job(self.nodes, "gang", 1)]
        if self.whole_why is None:
            return []
        if self.planner is None:
            self.planner = SweepPlanner(self.nodes, self.thresholds, partners=self.partners,
                                        group_size=0, first=self.first)
        jobs = self.planner.next_jobs()
        if jobs:
            self.rounds += 1
            self.jobs += len(jobs)
            jobs = [j._replace(round=self.rounds) for j in jobs]
        return jobs

    def record(self, results: Sequence[JobResult]) -> None:
        for result in results:
            if result.job.kind == "gang":
                self.whole = result
                # one run: no median to compare with; the floor and outright failures decide
                self.whole_why = failure(result, self.thresholds, None)
        rest = [r for r in results if r.job.kind != "gang"]
        if rest and self.planner is not None:
            self.planner.record(rest)

    def result(self) -> GangResult:
        if len(self.nodes) < 2:
            return GangResult(SINGLE, None, why="one node: nothing to check")
        if self.whole is None:
            return GangResult(UNKNOWN, None, why="the collective never ran", rounds=self.rounds,
                              jobs=self.jobs)
        if self.whole_why is None:
            return GangResult(PASSED, self.whole, rounds=self.rounds, jobs=self.jobs)
        if self.planner is None:
            return GangResult(UNKNOWN, self.whole, why=f"{self.whole_why}; the nodes were not tested "
                              "in pairs", rounds=self.rounds, jobs=self.jobs)
        outcome = self.planner.outcome()
        bad = tuple(n for n in outcome.nodes if n.outcome == BAD)
        others = tuple(n for n in outcome.nodes if n.outcome != BAD)
        if bad:
            return GangResult(FAILED, self.whole, bad, others, self.whole_why, self.rounds, self.jobs)
        if len(self.nodes) == 2:
            why = f"{self.whole_why}; with two nodes there is no third to tell which one it is"
        else:
            why = f"{self.whole_why}; no node failed with every partner (the failure needs more nodes)"
        return GangResult(UNKNOWN, self.whole, (), others, why, self.rounds, self.jobs)


def gang_reason(node: NodeOutcome, collective: str, job_id: str) -> str:
    """The drain reason of a node the gang check found bad, e.g.
    `gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-a,gpu-b all_reduce_perf gang job=1234`."""
    why = reason_token(node.why) if node.why else "failed"
    return sanitise(f"{FABRIC_PREFIX}{why} partners={','.join(node.partners) or '-'} {collective} "
                    f"gang job={job_id}")


def _gbps(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f} GB/s"


def job_lines(result: GangResult, job_id: str, nbytes: int, actions: Dict[str, str]) -> List[str]:
    """What the job's output says, one line each: the whole run, then each bad node with its
    partners and figure and what became of it (`actions`: node -> "drained", "would drain
    (report_only)", ...), or why no node could be named."""
    if result.outcome == SINGLE:
        return [f"{LINE} job {job_id} has one node: nothing to check"]
    whole = result.whole
    size = f"{nbytes / (1 << 20):g} MiB" if nbytes >= 1 << 20 else f"{nbytes} B"
    nodes = len(whole.job.nodes) if whole else 0
    if result.outcome == PASSED and whole is not None:
        return [f"{LINE} job {job_id}: {nodes} nodes passed, busbw {_gbps(whole.busbw_gbps)} at {size}"]
    lines = []
    if whole is not None:
        lines.append(f"{LINE} job {job_id}: {nodes} nodes failed: {result.why.split(';')[0]} "
                     f"(busbw {_gbps(whole.busbw_gbps)} at {size})")
    for node in result.bad:
        lines.append(f"{LINE} {node.node} is bad: {node.why} with every partner "
                     f"({','.join(node.partners)}), busbw {_gbps(node.busbw_gbps)}; "
                     f"{actions.get(node.node, 'not drained')}")
    if result.outcome != FAILED:
        lines.append(f"{LINE} no node named: {result.why}; nothing drained")
    return lines
