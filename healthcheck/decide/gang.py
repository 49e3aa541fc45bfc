"""The gang check's decisions (pure): a multi-node job's own nodes, one short collective over all
of them, and, when it fails, which node of the allocation is to blame.

    job = parse_show_job(scontrol_show_job_text)      # slurmctld's record: never the job's env
    plan = GangPlan(job.nodes, Thresholds(floor_gbps=100.0), partners=2)
    jobs = plan.next_jobs()                           # first [the whole allocation], then rounds
    while jobs:                                       # of pairs and partners inside it
        plan.record(run_them(jobs))                   # act/gangrun.py runs each with srun --overlap
        jobs = plan.next_jobs()
    result = plan.result()                            # passed | bad nodes | unknown, and why

The rounds:
1. **whole**: the collective once across every node of the job (`[internode] gang_bytes`, one
   message size).  It fails on an NCCL error, wrong elements, a hang, a run cut off, or a bus
   bandwidth below `busbw_floor_gbps` (a single run has no median to compare with, so without a
   floor only outright failures count).  Passing ends the check.
2. **find the node** (only after a failure): decide/sweep.py's SweepPlanner over the
   allocation's nodes alone: disjoint pairs, then each suspect with `partners` known-good nodes
   of the same job; a node failing with every partner is **bad**.  Nothing outside the job's
   allocation is ever run on.  A failure no pair reproduces (it needs the whole job) names no
   node: nothing is drained.
3. **cross** (only when that left nodes unknown and named none bad, as when no pair passed:
   three nodes whose one pair holds the bad node, the third odd one out): each node still in
   doubt runs with the nodes of the job it has not run with, one job per node a round, at most
   `partners` + 1 rounds.  Then every pair run is judged together (`judge_pairs`): a node of a
   passing pair is known good, and a node that failed with `partners` different known-good
   nodes is bad.  With gpu-a bad among gpu-a, gpu-b, gpu-c: (a,b) failed, then (a,c) fails
   and (b,c) passes, so b and c are good and a failed with both.

With one node there is nothing to check (`single`).  With two nodes a failing pair cannot tell
which of its two is bad (no third node to partner with): both are named as suspects, and
nothing is drained; so is every node the evidence cannot tell about (every pair failed).
"""

from __future__ import annotations

import re
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

from ..netmodel import GangOutcome, NcclRun
from ..records import NamedTuple
from ..slurmjob import job_fields
from .internodejob import require_span
from .sweep import (BAD, FABRIC_PREFIX, PASS, TRANSIENT, Job, JobResult, Medians, NodeOutcome,
                    SweepPlanner, Thresholds, failure, judge_collective, reason_token)
from .sweep import UNKNOWN as NODE_UNKNOWN
from .verdict import sanitise

PASSED, FAILED, SINGLE, UNKNOWN = GangOutcome.PASSED, GangOutcome.FAILED, GangOutcome.SINGLE, GangOutcome.UNKNOWN
LINE = "gpu-healthcheck: gang:"  # every line the gang check writes into the job's output
_JOB_ID_RE = re.compile(r"[1-9][0-9]{0,9}")


class GangJob(NamedTuple):
    job_id: str
    nodes: Tuple[str, ...]
    state: str = "UNKNOWN"
    user: str = ""  # UserId=name(uid)
    restarts: int = 0
    requeue: bool = True  # Requeue=1: the job may be requeued
    group: str = ""  # GroupId=name(gid)


class GangResult(NamedTuple):
    outcome: GangOutcome  # passed | failed | single | unknown
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
    this module imports no reader).  Raises ValueError when the text names no job or no nodes,
    or when the job's own text (its name, its comment) holds one of the keys read here
    (slurmjob.job_fields: read by key, never by position, never guessed).
    """
    fields = job_fields(text, (), ("JobId", "NodeList", "UserId", "GroupId", "JobState", "Restarts", "Requeue"))
    job_id = fields.get("JobId", "")
    if not valid_job_id(job_id):
        raise ValueError(f"scontrol show job printed no job id: {text[:200]!r}")
    nodelist = fields.get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        raise ValueError(f"job {job_id} has no nodes (JobState={fields.get('JobState', '?')})")
    nodes = tuple(expand(nodelist)) if expand else tuple(nodelist.split(","))
    restarts = fields.get("Restarts", "0")
    return GangJob(job_id, nodes, fields.get("JobState", "UNKNOWN"), fields.get("UserId", ""),
                   int(restarts) if restarts.isdigit() else 0, fields.get("Requeue", "1") != "0",
                   fields.get("GroupId", ""))


class StepUser(NamedTuple):
    """Whom the privileged side's srun steps run as: the job's owner (slurmctld lets only a
    job's owner create a step in it, root included: "Security violation, JOB_STEP_CREATE RPC
    from uid=0 to run as uid N")."""
    uid: int
    gid: int
    groups: Tuple[int, ...]


_ID_RE = re.compile(r"(?:.*)\(([0-9]+)\)")  # UserId=name(uid), GroupId=name(gid); the name may be anything


def step_user(job: GangJob, groups_of: Callable[[int, int], Sequence[int]]) -> StepUser:
    """The job's owner's uid and gid from slurmctld's record (UserId=name(uid) GroupId=name(gid),
    never the job's environment), and her supplementary groups from `groups_of(uid, gid)` (the
    node's own account database: act/gangrun.py's node_groups), her gid first.  Raises
    ValueError when the record lacks either id: root then runs nothing as anyone."""
    ids = []
    for key, value in (("UserId", job.user), ("GroupId", job.group)):
        found = _ID_RE.fullmatch(value)
        if not found:
            raise ValueError(f"job {job.job_id}: slurmctld's record has no numeric {key} "
                             f"({key}={value!r}): cannot run its steps as its owner")
        ids.append(int(found.group(1)))
    uid, gid = ids
    # always an explicit list: the drop replaces root's own groups, never keeps them
    return StepUser(uid, gid, tuple(dict.fromkeys([gid, *groups_of(uid, gid)])))


def judge_gang_run(job: Job, run: NcclRun, exited: Optional[int], timed_out: bool) -> JobResult:
    """One collective of the gang check, judged as the fabric sweep judges its jobs: first
    whether its output proves it spanned the job's nodes (decide/internodejob.span_problem), then
    its figure and errors (decide/sweep.judge_collective).

    Raises:
        NotSpanned: the collective did not span `job.nodes` (nccl-tests without MPI, srun
            without --mpi=pmix): the site's setup, never a pass and never a node's fault.
    """
    busbw, problem = judge_collective(run, exited, timed_out)
    require_span(run, job.nodes, problem)
    return JobResult(job, busbw, problem)


def judge_pairs(nodes: Sequence[str], results: Sequence[JobResult], thresholds: Thresholds,
                median: "Union[Medians, float, None]", partners: int) -> Dict[str, NodeOutcome]:
    """Every two-node run of the job judged together (pure).  A node of a passing pair is known
    good (transient when it also failed a pair); a node that never passed is bad when it failed
    with at least `partners` different known-good nodes, else unknown.  The order the runs came
    in does not matter: a run's figure does not depend on what was known when it ran."""
    runs = [(r.job.nodes, failure(r, thresholds, median), r.busbw_gbps) for r in results
            if len(r.job.nodes) == 2 and not r.skipped]
    good = {n for pair, why, _ in runs if why is None for n in pair}
    judged: Dict[str, NodeOutcome] = {}
    for node in nodes:
        mine = [(pair[1] if pair[0] == node else pair[0], why, figure) for pair, why, figure in runs
                if node in pair]
        failed = [(p, why, figure) for p, why, figure in mine if why]
        if node in good:
            passed = ",".join(dict.fromkeys(p for p, why, _ in mine if why is None))
            judged[node] = (NodeOutcome(node, TRANSIENT, failed[0][2], tuple(p for p, _, _ in failed),
                                        f"{failed[0][1]}; passed with {passed}") if failed
                            else NodeOutcome(node, PASS))
            continue
        with_good = [(p, why, figure) for p, why, figure in failed if p in good]
        partners_seen = tuple(dict.fromkeys(p for p, _, _ in with_good))
        figures = [f for _, _, f in with_good if f is not None]
        if with_good and len(partners_seen) >= partners:
            judged[node] = NodeOutcome(node, BAD, min(figures) if figures else None, partners_seen,
                                       with_good[-1][1] or "failed")
        elif failed:
            others = ",".join(dict.fromkeys(p for p, _, _ in failed))
            tell = (f"failed with {len(partners_seen)} known-good node(s) ({','.join(partners_seen)}), "
                    f"{partners} needed" if partners_seen else "no known-good node to tell")
            judged[node] = NodeOutcome(node, NODE_UNKNOWN, failed[0][2], (),
                                       f"{failed[0][1]} with {others}; {tell}")
        else:
            judged[node] = NodeOutcome(node, NODE_UNKNOWN, None, (), "no pair ran with it")
    return judged


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
        self.cross: Optional[List[JobResult]] = None  # the cross rounds' results, once begun
        self.cross_rounds = 0
        self.recorded: List[JobResult] = []  # every run, in order (the metrics' pair figures)
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
        jobs = [] if self.cross is not None else self.planner.next_jobs()
        if not jobs:
            jobs = self._cross_jobs()
        if jobs:
            self.rounds += 1
            self.jobs += len(jobs)
            jobs = [j._replace(round=self.rounds) for j in jobs]
        return jobs

    def _pair_results(self) -> List[JobResult]:
        assert self.planner is not None
        return [r for r in self.planner.results if len(r.job.nodes) == 2] + list(self.cross or ())

    def _judged(self) -> Dict[str, NodeOutcome]:
        assert self.planner is not None
        return judge_pairs(self.nodes, self._pair_results(), self.thresholds, self.planner.medians,
                           self.partners)

    def _cross_jobs(self) -> List[Job]:
        """The next cross round (module docstring, 3.), or [] when there is none to run."""
        assert self.planner is not None
        if self.cross is None:
            outcome = self.planner.outcome()
            doubtful = [n.node for n in outcome.nodes if n.outcome == NODE_UNKNOWN]
            if len(self.nodes) < 3 or not doubtful or any(n.outcome == BAD for n in outcome.nodes):
                return []
            self.cross = []
        if self.cross_rounds > self.partners:
            return []
        judged = self._judged()
        doubtful = [n for n in self.nodes if judged[n].outcome == NODE_UNKNOWN]
        good = [n for n in self.nodes if judged[n].outcome in (PASS, TRANSIENT)]
        tried: Set[FrozenSet[str]] = {frozenset(r.job.nodes) for r in self._pair_results()}
        busy: Set[str] = set()
        jobs = []
        for node in doubtful:
            if node in busy:
                continue
            # known-good partners first: one passing run of theirs settles nothing new
            for other in good + [n for n in self.nodes if n not in good]:
                if other != node and other not in busy and frozenset((node, other)) not in tried:
                    busy.update((node, other))
                    jobs.append(Job((node, other), "cross", 0))
                    break
        if jobs:
            self.cross_rounds += 1
        return jobs

    def record(self, results: Sequence[JobResult]) -> None:
        self.recorded.extend(results)
        for result in results:
            if result.job.kind == "gang":
                self.whole = result
                # one run: no median to compare with; the floor and outright failures decide
                self.whole_why = failure(result, self.thresholds, None)
        cross = [r for r in results if r.job.kind == "cross"]
        if cross and self.cross is not None:
            self.cross.extend(cross)
        rest = [r for r in results if r.job.kind not in ("gang", "cross")]
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
        if self.cross:
            judged = self._judged()
            nodes = tuple(judged[n] for n in self.nodes)
        else:
            nodes = self.planner.outcome().nodes
        bad = tuple(n for n in nodes if n.outcome == BAD)
        others = tuple(n for n in nodes if n.outcome != BAD)
        if bad:
            return GangResult(FAILED, self.whole, bad, others, self.whole_why, self.rounds, self.jobs)
        if len(self.nodes) == 2:
            why = f"{self.whole_why}; with two nodes there is no third to tell which one it is"
        elif any(n.outcome == NODE_UNKNOWN for n in others):
            why = f"{self.whole_why}; the pairs cannot tell which node it is (no node failed with " \
                  f"{self.partners} known-good partners)"
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
        named = suspects(result)
        lines.append(f"{LINE} no node named: {result.why}"
                     + (f"; suspects: {','.join(named)}" if named else "") + "; nothing drained")
    return lines


def suspects(result: GangResult) -> List[str]:
    """The nodes the evidence could not clear nor blame (none drained for it)."""
    return [n.node for n in result.others if n.outcome == NODE_UNKNOWN]
