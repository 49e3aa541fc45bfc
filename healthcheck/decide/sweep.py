"""The fabric sweep's decisions (pure): which nodes run together in each round, how a job's
output is judged, which node is bad, and the drain reason.

    planner = SweepPlanner(candidates, Thresholds(floor_gbps=100.0), partners=2, group_size=0)
    while True:
        jobs = planner.next_jobs()          # one round: disjoint sets of nodes, each one Slurm job
        if not jobs:
            break
        planner.record(run_them(jobs))      # JobResult per job (act/sweeprun.py runs them)
    outcome = planner.outcome()             # per node: bad | transient | unknown | pass | skipped

The rounds (the issue's design, each bounded by the jobs' time limit):
1. **pairs**: the candidates in disjoint pairs, all at once, nodes of one GPU model together.
   A pair below the bus-bandwidth floor, or below `median_ratio_fail` of the round's median of
   its GPU model (a mixed pair: the lower of its models' medians), or with an NCCL error, wrong
   elements, a hang or a slow rail, makes both its nodes suspects; an odd node out is a suspect
   with no evidence yet.
2. **partners**: each suspect runs with `partners` different known-good nodes (from passing
   pairs, of its own model first), one job at a time per node, so `partners` rounds when good
   nodes are plenty.  Failing
   with every one of them is **bad** (drained); passing with every one is **transient** (history
   only: the pair's failure did not come back); mixed, or too few good partners to tell, is
   **unknown** (tested first at the next sweep).  A suspect's partners are judged against the
   floor and the first round's medians: a partner round's own median is made of suspects.
3. **group** (optional, `group_size`): the nodes still in service in groups of that size, all at
   once; a group that fails while its pairs passed is **bisected**: both halves at once, and so
   on, at most log2(n) rounds, until a failing pair is left (its two nodes go to the partner
   round) or both halves pass (the failure needs the whole group: its nodes are unknown).

Nodes the repair loop rebooted for their fabric (`retest`, decide/fabricretest.py) are no
candidates: suspects from the start, they run only in the partner rounds, never partner another
node, and pass (outcome pass) only with `partners` known-good nodes.

So one bad node among N is found in 3 rounds (pairs, then two partners; with 5 candidates
the 2 known-good nodes partner 3 suspects a job at a time: up to 5), and one that fails
only at scale in 3 + ceil(log2 N); gcm's all-pairs mode runs N(N-1)/2 jobs instead.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from ..model import NodeAction, Outcome
from ..netmodel import BAD, PASS, SKIPPED, TRANSIENT, UNKNOWN, NcclRun, NodeOutcome, NodeVerdict, Word
from ..records import NamedTuple
from .internodefloor import floor_for, node_floors, node_models, parse_floors
from .verdict import FABRIC_PREFIX, RMA_TOKEN, is_fabric_reason, sanitise

if TYPE_CHECKING:
    from ..configsections import InternodeConfig

RETEST_WHY = "awaiting a fabric re-test after a reboot"  # a retest suspect before its partner jobs


class Thresholds(NamedTuple):
    floor_gbps: float = 0.0  # [internode] busbw_floor_gbps; 0 = only the median rule
    median_ratio_fail: float = 0.7
    rail_floor_gbps: float = 0.0  # [internode] rail_floor_gbps: ib_write_bw per rail; 0 = off
    # (node, floor GB/s) of the nodes whose GPU model has a `[internode] floors` entry
    # (decide/internodefloor.py); the others take floor_gbps
    node_floors: Tuple[Tuple[str, float], ...] = ()
    # (node, GPU model) of the nodes whose Gres= names a type (decide/internodefloor.py); the others
    # are of the model "": each model has its own median (Medians)
    node_models: Tuple[Tuple[str, str], ...] = ()

    def floor_for(self, nodes: Sequence[str]) -> float:
        """The bus-bandwidth floor of a job over `nodes`: the lowest of its nodes' floors."""
        if not self.node_floors:
            return self.floor_gbps
        return floor_for(nodes, self.node_floors, self.floor_gbps)

    def models_of(self, nodes: Sequence[str]) -> Tuple[str, ...]:
        """The GPU models of a job's nodes, each once, in the nodes' order."""
        known = dict(self.node_models)
        return tuple(dict.fromkeys(known.get(n, "") for n in nodes))


class Medians(NamedTuple):
    """The first round's median bus bandwidth of each GPU model, from the jobs whose nodes are
    all of that model.  A job is compared with the lowest median of its nodes' models (a mixed
    pair with the lower model's), and with none when one of its models has no median: its
    figure cannot be told from what that model reaches, so only the floor judges it."""

    by_model: Tuple[Tuple[str, float], ...] = ()

    def of(self, nodes: Sequence[str], thresholds: Thresholds) -> Optional[float]:
        known = dict(self.by_model)
        values = [known.get(m) for m in thresholds.models_of(nodes)]
        return min(v for v in values if v is not None) if values and None not in values else None


def fabric_thresholds(internode: "InternodeConfig", gres_of: Mapping[str, Optional[str]]) -> Thresholds:
    """The thresholds of `[internode]`, with the per-model floors of the nodes in `gres_of`
    ({node: its Gres= as scontrol shows it})."""
    return Thresholds(internode.busbw_floor_gbps, internode.median_ratio_fail, internode.rail_floor_gbps,
                      node_floors(gres_of, parse_floors(internode.floors), internode.busbw_floor_gbps),
                      node_models(gres_of))


class Job(NamedTuple):
    nodes: Tuple[str, ...]
    kind: str  # pair | partner | group
    round: int


class RailResult(NamedTuple):
    node: str  # the node whose HCA this is (the job's first node runs the client)
    hca: str
    gbps: Optional[float]
    problem: Optional[str] = None


class JobResult(NamedTuple):
    job: Job
    busbw_gbps: Optional[float] = None
    problem: Optional[str] = None  # failed outright: "hang", "NCCL WARN ...", "wrong=3", ...
    rails: Tuple[RailResult, ...] = ()
    job_id: Optional[str] = None
    skipped: Optional[str] = None  # never ran (Slurm could not place it): no evidence either way


class SweepOutcome(NamedTuple):
    nodes: Tuple[NodeOutcome, ...]
    rounds: int
    jobs: int
    median_gbps: Optional[float]  # over every model's jobs (what the report prints)
    results: Tuple[JobResult, ...]
    medians: Medians = Medians()  # what each job was judged against

    def of(self, outcome: NodeVerdict) -> List[str]:
        return [n.node for n in self.nodes if n.outcome == outcome]


class RetestEnd(Word):
    """How the re-test of a node the repair loop rebooted for its fabric ends
    (act/fabricretest.py carries out decide/fabricretest.py's decision): resumed, drained
    (failed again: drained for another reboot), rma, kept (no verdict: drained again until the
    next sweep; or drained meanwhile by someone else, whose drain stays), error (scontrol did
    not answer: the node stays held in its reservation)."""

    RESUMED = "resumed"
    DRAINED = "drained"
    RMA = "rma"
    KEPT = "kept"
    ERROR = "error"


class SweepAction(NamedTuple):
    """What the sweep did about one node: its own drain of a bad node (`drain`, what
    Slurm.drain_remote returned), or the end of a re-tested node's re-test (`retest`).  The
    report prints `said`; the history and the journal count `holds_node`, `resumed` and
    `report_only`, never the words."""

    reason: Optional[str]  # the node's drain reason now (None: resumed, or nothing done)
    drain: Optional[NodeAction] = None
    retest: Optional[RetestEnd] = None
    detail: str = ""  # a re-test's error: scontrol's message

    @property
    def said(self) -> str:
        """"applied", "refused", "report_only", "error: ..." (a drain); "resumed", "drained",
        "rma", "kept", "error: ..." (a re-test)."""
        if self.drain is not None:
            return self.drain.said
        if self.retest is RetestEnd.ERROR:
            return f"error: {self.detail}"
        return str(self.retest) if self.retest is not None else "none"

    @property
    def holds_node(self) -> bool:
        """The node is drained by this sweep: its own drain applied, or a re-test that ended
        drained, rma or kept."""
        if self.drain is not None:
            return self.drain.outcome is Outcome.APPLIED
        return self.retest in (RetestEnd.DRAINED, RetestEnd.RMA, RetestEnd.KEPT)

    @property
    def resumed(self) -> bool:
        return self.retest is RetestEnd.RESUMED

    @property
    def report_only(self) -> bool:
        return self.drain is not None and self.drain.outcome is Outcome.REPORT_ONLY


class SweepReport(NamedTuple):
    """What one --internode-sweep found and did (commands/internodesweep.py fills it; report/sweep.py prints it)."""

    sweep_id: str
    outcome: Optional[SweepOutcome]
    actions: Dict[str, SweepAction]  # node -> what the sweep did about it
    not_candidates: Dict[str, str]  # --nodes that were not swept, and why
    error: Optional[str] = None
    retested: Tuple[str, ...] = ()  # the nodes re-tested for the repair loop (decide.fabricretest)


def judge_collective(run: NcclRun, exited: Optional[int], timed_out: bool) -> Tuple[Optional[float], Optional[str]]:
    """A collective's output -> (bus bandwidth GB/s, why it failed outright or None).  A run
    that hung, printed an NCCL error, counted wrong elements or never reached its summary fails
    whatever its figure; the error is named.  Wrong elements lead (silent data corruption must
    not read like a crash): nccl-tests 2.17 prints "Test failure common.cu:1189" after every
    failed validation."""
    if timed_out:
        return run.busbw_gbps, "hang: ended by its time limit"
    if run.oob_failed or run.wrong:
        said = f"NCCL WARN {run.warnings[0]}" if run.warnings else run.errors[0] if run.errors else ""
        return run.busbw_gbps, f"wrong={run.wrong}" + (f" ({said})" if said else "")
    if run.warnings:
        return run.busbw_gbps, f"NCCL WARN {run.warnings[0]}"
    if run.errors:
        return run.busbw_gbps, run.errors[0]
    if not run.complete or run.busbw_gbps is None:
        why = "no result table" if not run.rows else "cut off before its summary"
        return run.busbw_gbps, why + (f" (exit status {exited})" if exited else "")
    if exited:
        return run.busbw_gbps, f"exit status {exited}"
    return run.busbw_gbps, None


def median_of(results: Sequence[JobResult]) -> Optional[float]:
    """The median bus bandwidth of the jobs that ran to a figure without failing outright."""
    figures = [r.busbw_gbps for r in results if r.busbw_gbps is not None and not r.problem
               and not r.skipped]
    return statistics.median(figures) if figures else None


def medians_of(results: Sequence[JobResult], thresholds: Thresholds) -> Medians:
    """Each GPU model's median over the jobs whose nodes are all of that model (a mixed job's
    figure is neither model's)."""
    by_model: Dict[str, List[JobResult]] = {}
    for result in results:
        models = thresholds.models_of(result.job.nodes)
        if len(models) == 1:
            by_model.setdefault(models[0], []).append(result)
    figures = ((model, median_of(jobs)) for model, jobs in sorted(by_model.items()))
    return Medians(tuple((model, figure) for model, figure in figures if figure is not None))


def failure(result: JobResult, thresholds: Thresholds,
            medians: "Union[Medians, float, None]") -> Optional[str]:
    """Why this job failed, in the drain reason's words, or None when it passed.  `medians`:
    the first round's per model, or one figure for every job (a fleet of one model)."""
    median = medians.of(result.job.nodes, thresholds) if isinstance(medians, Medians) else medians
    if result.problem:
        return result.problem
    busbw = result.busbw_gbps
    if busbw is None:
        return "no bus bandwidth"
    floor = thresholds.floor_for(result.job.nodes)
    if floor and busbw < floor:
        return f"busbw={busbw:.1f}<{floor:g}"
    if median and busbw < thresholds.median_ratio_fail * median:
        return f"busbw={busbw:.1f}<{thresholds.median_ratio_fail:g}*median={median:.1f}"
    for rail in result.rails:
        if rail.problem:
            return f"rail {rail.node}:{rail.hca} {rail.problem}"
        if rail.gbps is None:
            return f"rail {rail.node}:{rail.hca} no result"
        if thresholds.rail_floor_gbps and rail.gbps < thresholds.rail_floor_gbps:
            return f"rail {rail.node}:{rail.hca}={rail.gbps:.1f}<{thresholds.rail_floor_gbps:g}"
    return None


def disjoint_pairs(nodes: Sequence[str]) -> Tuple[List[Tuple[str, str]], List[str]]:
    """Consecutive nodes in pairs; the odd one out (if any) separately."""
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    return pairs, list(nodes[len(pairs) * 2:])


def halves(nodes: Tuple[str, ...]) -> List[Tuple[str, ...]]:
    middle = len(nodes) // 2
    return [nodes[:middle], nodes[middle:]]


class SweepPlanner:
    """The rounds of one sweep as a state machine; see the module docstring.  Pure: it never
    runs anything, so the same planner drives the real sweep and the benchmark's simulation."""

    def __init__(self, candidates: Sequence[str], thresholds: Thresholds, partners: int = 2,
                 group_size: int = 0, first: Sequence[str] = (), retest: Sequence[str] = ()) -> None:
        # `first` (the last sweep's unknown nodes) are tested first: each paired in the first
        # round with a node that is not one of them, so that a pair of two doubtful nodes
        # cannot hide which one it is.  `retest` (fabric drains the repair loop rebooted,
        # decide.fabricretest) are no candidates: suspects from the start, they run only in the
        # partner rounds, with known-good nodes, and pass only with `partners` of them.
        wanted = set(candidates)
        doubtful = list(dict.fromkeys(n for n in first if n in wanted))
        # nodes of one GPU model next to each other, so that the first round's pairs are of one
        # model (each model's median is made of them) and at most one pair per model is mixed
        rank = {m: i for i, m in enumerate(thresholds.models_of(candidates))}
        rest = sorted((n for n in dict.fromkeys(candidates) if n not in set(doubtful)),
                      key=lambda n: rank[thresholds.models_of((n,))[0]])
        ordered: List[str] = []
        for i, node in enumerate(doubtful):
            ordered.append(node)
            if i < len(rest):
                ordered.append(rest[i])
        ordered += rest[len(doubtful):]
        self.candidates = ordered
        self.thresholds = thresholds
        self.partners = max(1, partners)
        self.group_size = group_size
        self.round = 0
        self.phase = "pairs"
        self.median: Optional[float] = None
        self.medians = Medians()
        self.results: List[JobResult] = []
        self.good: List[str] = []  # nodes of passing first-round pairs, in order
        # suspect -> its partner jobs: (the partners, why it failed or None, busbw)
        self.suspects: Dict[str, List[Tuple[Tuple[str, ...], Optional[str], Optional[float]]]] = {}
        self.at_scale: Set[str] = set()  # suspects found by a group: their partner jobs are triples
        self.leaf_of: Dict[str, Tuple[str, ...]] = {}  # such a suspect -> its failing leaf group
        self.first_failure: Dict[str, Tuple[str, Optional[float]]] = {}  # suspect -> (why, busbw)
        self.skipped: Dict[str, str] = {}
        self.settled: Dict[str, NodeOutcome] = {}
        self.failing_sets: List[Tuple[str, ...]] = []
        self.grouped = False  # the group round ran (bisection's suspects come back to partners)
        self.jobs = 0
        self.retest = [n for n in dict.fromkeys(retest) if n not in wanted]
        for node in self.retest:
            self.suspects[node] = []
            self.first_failure[node] = (RETEST_WHY, None)

    # --- planning ------------------------------------------------------------------------

    def next_jobs(self) -> List[Job]:
        """The next round's jobs; [] when the sweep is over."""
        while True:
            jobs = self._plan()
            if jobs or self.phase == "done":
                break
        if jobs:
            self.round += 1
            jobs = [j._replace(round=self.round) for j in jobs]
            self.jobs += len(jobs)
        return jobs

    def _plan(self) -> List[Job]:
        if self.phase == "pairs":
            pairs, odd = disjoint_pairs(self.candidates)
            for node in odd:
                self.suspects[node] = []
                self.first_failure[node] = ("not paired in the first round", None)
            self.phase = "partners"
            return [Job(p, "pair", 0) for p in pairs]
        if self.phase == "partners":
            jobs = self._partner_round()
            if not jobs:
                self._settle_suspects()
                self.phase = "group" if self.group_size >= 2 and not self.grouped else "done"
            return jobs
        if self.phase == "group":
            self.grouped = True
            members = [n for n in self.candidates if n not in self.settled or
                       self.settled[n].outcome in (PASS, TRANSIENT)]
            members = [n for n in members if n not in self.skipped]
            self.phase = "bisect"
            groups = [tuple(members[i:i + self.group_size]) for i in range(0, len(members), self.group_size)]
            if len(groups) > 1 and len(groups[-1]) < 2:
                groups[-2] += groups.pop()
            return [Job(g, "group", 0) for g in groups if len(g) >= 2]
        if self.phase == "bisect":
            failing, self.failing_sets = self.failing_sets, []
            jobs = [Job(h, "group", 0) for s in failing for h in halves(s) if len(h) >= 2]
            if not jobs:
                self.phase = "partners" if self._pending_suspects() else "done"
            return jobs
        return []

    def _pending_suspects(self) -> List[str]:
        return [s for s, tried in self.suspects.items() if s not in self.settled
                and len(tried) < self.partners]

    def _partner_round(self) -> List[Job]:
        """One job per suspect still short of partners, each with a good node it has not run
        with (two, for a suspect found at scale: a pair cannot show what needs three); every
        node in at most one job of the round."""
        busy: Set[str] = set()
        jobs = []
        good = [g for g in self.good if g not in self.suspects and g not in self.skipped]
        for suspect in self._pending_suspects():
            tried = {p for partners, _, _ in self.suspects[suspect] for p in partners}
            free = [g for g in good if g not in busy and g not in tried and g != suspect]
            # partners of its own model first: a mixed job is held only to the lower model
            mine = self.thresholds.models_of((suspect,))
            free.sort(key=lambda g: self.thresholds.models_of((g,)) != mine)
            wanted = 2 if suspect in self.at_scale else 1
            if len(free) < wanted:
                continue
            busy.update((suspect, *free[:wanted]))
            jobs.append(Job((suspect, *free[:wanted]), "partner", 0))
        return jobs

    # --- recording -----------------------------------------------------------------------

    def record(self, results: Sequence[JobResult]) -> None:
        self.results.extend(results)
        for result in results:
            if result.skipped:
                for node in result.job.nodes:
                    self.skipped.setdefault(node, result.skipped)
        ran = [r for r in results if not r.skipped]
        kinds = {r.job.kind for r in ran}
        if "pair" in kinds:
            self.median = median_of(ran)
            self.medians = medians_of(ran, self.thresholds)
            for r in ran:
                why = failure(r, self.thresholds, self.medians)
                if why is None:
                    self.good.extend(r.job.nodes)
                    continue
                for node in r.job.nodes:
                    self.suspects.setdefault(node, [])
                    self.first_failure.setdefault(node, (why, r.busbw_gbps))
        for r in ran:
            if r.job.kind == "partner":
                suspect, *partners = r.job.nodes
                self.suspects[suspect].append((tuple(partners), failure(r, self.thresholds, self.medians),
                                               r.busbw_gbps))
            elif r.job.kind == "group":
                self._record_group(r)

    def _record_group(self, result: JobResult) -> None:
        why = failure(result, self.thresholds, self.medians)
        if why is None:
            return
        nodes = result.job.nodes
        if len(nodes) // 2 < 3:
            # a failing leaf (its halves would be pairs, which passed): each of its nodes is
            # tried in triples with known-good nodes
            for node in nodes:
                self.leaf_of[node] = nodes
                self.settled.pop(node, None)
                self.suspects[node] = []
                self.at_scale.add(node)
                self.first_failure[node] = (f"group of {len(nodes)} {why}", result.busbw_gbps)
            return
        self.failing_sets.append(nodes)
        # both halves of an earlier failing set passed: the failure needs the whole set
        for node in nodes:
            outcome = self.settled.get(node)
            if outcome is not None and outcome.outcome == PASS:
                self.settled[node] = outcome._replace(why=f"in a failing group of {len(nodes)}: {why}")

    def _settle_suspects(self) -> None:
        for suspect, tried in self.suspects.items():
            if suspect in self.settled and self.settled[suspect].outcome != PASS:
                continue
            why, figure = self.first_failure.get(suspect, ("", None))
            partners = tuple(p for ps, _, _ in tried for p in ps)
            failed = [(p, w, f) for p, w, f in tried if w]
            if suspect in self.skipped:
                self.settled[suspect] = NodeOutcome(suspect, SKIPPED, why=self.skipped[suspect])
            elif suspect in self.retest and len(tried) >= self.partners and not failed:
                self.settled[suspect] = NodeOutcome(suspect, PASS, min(f for _, _, f in tried if f is not None)
                                                    if any(f is not None for _, _, f in tried) else None,
                                                    partners, f"re-test passed with {','.join(partners)}")
            elif len(tried) >= self.partners and len(failed) == len(tried):
                figures = [f for _, _, f in failed if f is not None]
                worst = min(figures) if figures else None
                self.settled[suspect] = NodeOutcome(suspect, BAD, worst, partners, failed[-1][1] or why)
            elif suspect in self.retest and tried and not failed:
                self.settled[suspect] = NodeOutcome(suspect, UNKNOWN, None, partners, (
                    f"re-test passed with {','.join(partners)}, only {len(tried)} of {self.partners} "
                    f"known-good partners"))
            elif tried and not failed and suspect in self.at_scale:
                # its group failed, and it passes with every partner: the failure needs the group
                self.settled[suspect] = NodeOutcome(suspect, UNKNOWN, figure, partners,
                                                    f"{why}; passed with {','.join(partners)}")
            elif tried and not failed:
                self.settled[suspect] = NodeOutcome(suspect, TRANSIENT, figure, partners,
                                                    f"{why}; passed with {','.join(partners)}")
            elif not tried:
                self.settled[suspect] = NodeOutcome(suspect, UNKNOWN, figure, (),
                                                    f"{why}; no known-good partner to tell")
            else:
                short = "" if len(tried) >= self.partners else (
                    f"; only {len(tried)} of {self.partners} known-good partners could be found")
                self.settled[suspect] = NodeOutcome(suspect, UNKNOWN, figure, partners,
                                                    f"{why}; failed with {len(failed)} of {len(tried)}" + short)

        for suspect in self.at_scale:
            # a leaf's bad node explains its group: the others that passed every triple are clear
            outcome = self.settled.get(suspect)
            culprits = [n for n in self.leaf_of.get(suspect, ()) if n != suspect
                        and n in self.settled and self.settled[n].outcome == BAD]
            if outcome is not None and outcome.outcome == UNKNOWN and culprits and \
                    not any(w for _, w, _ in self.suspects[suspect]):
                self.settled[suspect] = outcome._replace(outcome=TRANSIENT,
                                                         why=outcome.why + f"; {culprits[0]} is bad")

    def outcome(self) -> SweepOutcome:
        nodes = []
        for node in self.candidates + self.retest:
            if node in self.settled:
                nodes.append(self.settled[node])
            elif node in self.skipped:
                nodes.append(NodeOutcome(node, SKIPPED, why=self.skipped[node]))
            else:
                nodes.append(NodeOutcome(node, PASS))
        return SweepOutcome(tuple(nodes), self.round, self.jobs, self.median, tuple(self.results),
                            self.medians)


def reason_token(why: str) -> str:
    """A failure in one word of a drain reason: busbw=41.2<100, wrong=3, nccl=hang,
    nccl_warn=Net_:_Connection_closed..., rail_gpu-a:mlx5_1=150.0<360."""
    if why.startswith(("busbw=", "wrong=")):
        return why.split()[0]
    if why.startswith("hang"):
        return "nccl=hang"
    if why.startswith("NCCL WARN "):
        return "nccl_warn=" + "_".join(why[len("NCCL WARN "):].split())[:80]
    if why.startswith("rail "):
        return "rail_" + "_".join(why[len("rail "):].split())
    return "nccl_error=" + "_".join(why.split())[:80]


def fabric_reason(outcome: NodeOutcome, collective: str, rma: bool = False) -> str:
    """The drain reason of a bad node, e.g.
    `gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-c,gpu-e all_reduce_perf sweep`; with
    `rma` (a re-test after the repair loop's last reboot failed) the token follows the figure,
    as it follows `check=value` in every reason of ours (CONTRACTS §4)."""
    why = reason_token(outcome.why) if outcome.why else "failed"
    token = f" {RMA_TOKEN}" if rma else ""
    return sanitise(f"{FABRIC_PREFIX}{why}{token} partners={','.join(outcome.partners) or '-'} "
                    f"{collective} sweep")


def fabric_columns(reason: str) -> Optional[str]:
    """--cluster's FABRIC column of a fabric drain: "busbw=41.2<100 partners=gpu-c,gpu-e"."""
    if not is_fabric_reason(reason):
        return None
    words = reason[len(FABRIC_PREFIX):].split()
    return " ".join(w for w in words if not w.endswith("_perf") and w != "sweep") or None
