"""Fleet memory: the nodes (and GPU serials) that pass every check but whose record says
otherwise.  Pure: jobs from Slurm's accounting and events from our own history in, suspects out.

    suspects = find_suspects(jobs, events, config.suspects, until=time.time())
    [s.as_json() for s in suspects]   # {"node", "kind", "score", "evidence"}, worst first

The rules (docs/suspects.md has the why of each default):

- **black_hole**: jobs that end FAILED or NODE_FAIL within `black_hole_s` of starting, at least
  `black_hole_jobs` of them from at least `black_hole_users` users in one incident (failures
  closer than `incident_gap_s` on the node), making up at least `black_hole_share` of the jobs
  that started on the node meanwhile.  Bursts count as incidents, not lines.
- **lemon**: a node whose jobs fail more than jobs of the same size elsewhere.  Each job is
  attributed 1/NNodes to each of its nodes and weighted by age (halving every `half_life_s`);
  the fleet's own failure rate per size class (1, 2, 3-4, 5-8, ... nodes; without the node's
  own jobs) gives the expected failures E, the node's own give O, and P(Poisson(E) >= O), on
  counts scaled to the variance of attributed shares, is its p-value.  Benjamini-Hochberg keeps the false discoveries across all nodes at `lemon_fdr`.
  A burst of one user's jobs on one node (starts closer than `incident_gap_s`) is one trial;
  the user with the largest excess counts at most `user_cap` more than the next one; and the
  excess must come from at least `lemon_users` users: one user cannot make a node suspect on
  purpose.  Explaining away: nodes are confirmed in order of evidence, and a node's
  evidence is recounted without the jobs it shared with a node already named (a black hole or
  a lemon), so a bad node's partners are not blamed for its failures.
- From our own history (FleetEvent): **remediations** (`remediations` resets or reboots of a
  node in `remediation_window_s`, NVSentinel's 5 in 7 days), **serial_remediations** (the same
  for one GPU serial, wherever it went), **same_xid_after_reboots** (one Xid back after
  `same_xid_reboots` reboots, gpud's rule), **xid_repeat** (Xid 13 or 31 twice on one GPU
  within `xid_repeat_window_s`, NVSentinel's).  A GPU's record follows its serial; a node's
  survives a GPU swap.
- From our own history's counters (CounterSample, decide/counters.py): **ecc_sbe_rate**,
  **remap_headroom**, **retired_pages**, **pcie_replay**, **nvlink_replay**, per GPU serial.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any, DefaultDict, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..fleetmodel import FAILED_STATES, CounterSample, FleetEvent, Job, Suspect, gc_paused
from ..text import iso_utc
from .counters import counter_suspects

if TYPE_CHECKING:
    from ..configsections import SuspectsConfig

EVIDENCE_JOBS = 10  # job ids kept in one suspect's evidence (the rest are counted)
REMEDIATION_KINDS = frozenset({"reset", "reboot"})


# --- statistics --------------------------------------------------------------------------

def poisson_sf(observed: float, mean: float) -> float:
    """P(X >= observed) for X ~ Poisson(mean), continued to real `observed` through the
    regularized lower incomplete gamma function (exact at whole numbers)."""
    if observed <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    return _gamma_p(observed, mean)


def _gamma_p(a: float, x: float) -> float:
    """Regularized lower incomplete gamma P(a, x) (series below a+1, Lentz's continued fraction
    above: Numerical Recipes 6.2)."""
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def bh_cutoff(p_values: Sequence[float], q: float, tested: int) -> float:
    """Benjamini-Hochberg: the largest p-value that is a discovery at false discovery rate q
    among `tested` hypotheses (p-values not given are taken as 1); -1 where there is none."""
    cutoff = -1.0
    for rank, p in enumerate(sorted(p_values), 1):
        if p <= q * rank / tested:
            cutoff = p
    return cutoff


def size_class(nnodes: int) -> int:
    """1, 2, 3-4, 5-8, ...: jobs of one class fail at a comparable rate."""
    return (max(1, nnodes) - 1).bit_length() + 1


_CLASSES = tuple(size_class(n) for n in range(4097))  # a million jobs look their class up here


def _class_of(nnodes: int) -> int:
    return _CLASSES[nnodes] if nnodes < len(_CLASSES) else size_class(nnodes)


# --- black holes -------------------------------------------------------------------------

def _incidents(jobs: Sequence[Job], gap_s: float) -> List[List[Job]]:
    """Jobs (sorted by start) split where the node had a pause longer than gap_s."""
    out: List[List[Job]] = []
    for job in jobs:
        if out and job.start - out[-1][-1].start <= gap_s:
            out[-1].append(job)
        else:
            out.append([job])
    return out


def black_holes(jobs: Sequence[Job], cfg: "SuspectsConfig",
                by_node: Optional[Dict[str, List[Job]]] = None) -> List[Suspect]:
    fast: DefaultDict[str, List[Job]] = defaultdict(list)
    for job in jobs:
        if job.state in FAILED_STATES and job.end - job.start <= cfg.black_hole_s:
            for node in job.nodes:
                fast[node].append(job)
    if by_node is None:  # every job of the nodes that might be black holes, none other
        by_node = index_by_node(jobs, {n for n, js in fast.items() if len(js) >= cfg.black_hole_jobs})
    named: Set[str] = set()
    found: List[Suspect] = []
    # the node with the most fast failures first: its partners' share of them is explained away
    for node in sorted(fast, key=lambda n: (-len(fast[n]), n)):
        own = sorted((j for j in fast[node] if named.isdisjoint(j.nodes)), key=lambda j: j.start)
        if len(own) < cfg.black_hole_jobs:
            continue
        hits = []
        for incident in _incidents(own, cfg.incident_gap_s):
            users = {j.user for j in incident}
            if len(incident) < cfg.black_hole_jobs or len(users) < cfg.black_hole_users:
                continue
            first, last = incident[0].start, incident[-1].start
            ran = sum(1 for j in by_node.get(node, ()) if first <= j.start <= last)
            share = len(incident) / max(ran, len(incident))
            if share >= cfg.black_hole_share:
                hits.append((incident, users, share))
        if not hits:
            continue
        named.add(node)
        failed = [j for incident, _, _ in hits for j in incident]
        found.append(Suspect(node, "black_hole", float(len(failed)), {
            "failed_fast": len(failed), "users": len({j.user for j in failed}),
            "within_s": cfg.black_hole_s,
            "incidents": [{"from": iso_utc(incident[0].start), "to": iso_utc(incident[-1].end), "jobs": len(incident),
                           "users": len(users), "share": round(share, 3)}
                          for incident, users, share in hits],
            "jobs": [j.job_id for j in failed[:EVIDENCE_JOBS]]}))
    return found


def index_by_node(jobs: Iterable[Job], only: Optional[Set[str]] = None) -> Dict[str, List[Job]]:
    """Each node's jobs, in the order given; of the nodes in `only` alone where it is given (a
    rule that looks at a few hundred nodes of ten thousand need not index them all)."""
    out: DefaultDict[str, List[Job]] = defaultdict(list)
    if only is None:
        for job in jobs:
            for node in job.nodes:
                out[node].append(job)
        return out
    if not only:
        return out
    for job in jobs:
        if not only.isdisjoint(job.nodes):
            for node in job.nodes:
                if node in only:
                    out[node].append(job)
    return out


# --- lemons ------------------------------------------------------------------------------

class _Tally:
    """One node's observed and expected failures, per user (decayed, attributed, in bursts)."""

    __slots__ = ("expected", "observed", "variance", "jobs", "failed")

    def __init__(self) -> None:
        self.expected: DefaultDict[str, float] = defaultdict(float)
        self.observed: DefaultDict[str, float] = defaultdict(float)
        self.variance = 0.0  # of the observed sum, were the node like the fleet
        self.jobs = 0
        self.failed: List[str] = []


class _Rates:
    """The fleet's failure rate per size class, without one node's own jobs (leave-one-out: a
    lemon on a small cluster must not raise the rate it is measured against)."""

    def __init__(self, jobs: Sequence[Job], weights: Sequence[float]) -> None:
        self.total: DefaultDict[int, float] = defaultdict(float)
        self.bad: DefaultDict[int, float] = defaultdict(float)
        total, bad = self.total, self.bad
        for job, w in zip(jobs, weights):
            cls = _class_of(len(job.nodes))
            total[cls] += w
            if job.state in FAILED_STATES:
                bad[cls] += w

    def without(self, own: Sequence[Tuple[Job, float]]) -> Dict[int, float]:
        total, bad = dict(self.total), dict(self.bad)
        for job, w in own:
            cls = _class_of(len(job.nodes))
            total[cls] -= w
            if job.state in FAILED_STATES:
                bad[cls] -= w
        # a class no other node ran (or none of whose jobs failed) keeps the fleet's own rate
        return {c: (max(0.0, bad.get(c, 0.0)) / total[c] if total[c] > 1e-9
                    else self.bad.get(c, 0.0) / self.total[c])
                for c in total if self.total[c] > 0}


def _tally(jobs: Sequence[Tuple[Job, float]], rates: Dict[int, float], gap_s: float,
           explained: Set[int]) -> _Tally:
    """A user's jobs on the node that started within gap_s of each other are one burst, one
    trial: observed 1 if any of them failed, expected the chance that any would have (an array
    of forty failing in minutes is one piece of evidence, not forty)."""
    tally = _Tally()
    burst: List[Tuple[Job, float]] = []

    def close() -> None:
        if not burst:
            return
        share = sum(w / len(j.nodes) for j, w in burst) / len(burst)
        part = sum(1.0 / len(j.nodes) for j, _ in burst) / len(burst)
        none_fail = 1.0
        for j, _ in burst:
            none_fail *= 1.0 - rates[_class_of(len(j.nodes))]
        user = burst[0][0].user
        tally.expected[user] += share * (1.0 - none_fail)
        tally.variance += share * part * (1.0 - none_fail) * none_fail
        failed = [j for j, _ in burst if j.state in FAILED_STATES]
        if failed:
            tally.observed[user] += share
            tally.failed.append(failed[0].job_id)
        tally.jobs += len(burst)
        burst.clear()

    for job, w in sorted(jobs, key=lambda jw: (jw[0].user, jw[0].start)):
        if id(job) in explained:
            continue  # explained by a node already named (ids of its jobs: a set of ints)
        if burst and (job.user != burst[-1][0].user or job.start - burst[-1][0].start > gap_s):
            close()
        burst.append((job, w))
    close()
    return tally


def _judge(tally: _Tally, cfg: "SuspectsConfig") -> Tuple[float, float, float, int]:
    """(p-value, observed, expected, users with an excess).  The user with the largest excess
    counts at most `user_cap` more than the next one: no single user carries a node."""
    expected = sum(tally.expected.values())
    excess = sorted((tally.observed.get(u, 0.0) - e for u, e in tally.expected.items()), reverse=True)
    positive = [x for x in excess if x > 0]
    if positive:
        second = positive[1] if len(positive) > 1 else 0.0
        excess[0] = min(excess[0], second + cfg.user_cap)
    observed = expected + sum(excess)
    # Attributed counts (a 4-node job's failure is 1/4 here) vary less than whole ones: the test
    # runs on counts scaled to the variance they would have (moment matching), so that many
    # small shares are evidence too; the decay's weights scale both alike and still fade.
    scale = min(1000.0, max(1.0, expected / tally.variance)) if tally.variance > 0 else 1.0
    return poisson_sf(observed * scale, expected * scale), observed, expected, len(positive)


# Above this many nodes, one plain pass (every job at the fleet's rate per size class, no bursts,
# no per-user cap) screens the nodes, and only those at or below SCREEN_P get the full count.
# The full count only lowers a node's evidence, except through leaving the node's own jobs out
# of its baseline, which matters on a small cluster: below SCREEN_ABOVE every node is counted
# in full.  The false discovery rate is still taken over every node.
SCREEN_ABOVE = 500
SCREEN_P = 0.05


_DIGIT_RUNS = re.compile(r"(\d+)")
_FIXED = float(2 ** 64)  # the screen sums in integers of 2**-64: exact, so adding and taking away cancel


def _natural(name: str) -> Tuple[Tuple[Any, ...], str]:
    """gpu-2 before gpu-10: the order hostlists count in, so a job's nodes are one run of it."""
    parts = _DIGIT_RUNS.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def _screen(jobs: Sequence[Job], weights: Sequence[float], rates: Dict[int, float]) -> Dict[str, float]:
    """Each node's p-value with every job at the fleet's rate.  A million jobs name ten million
    node places: the jobs are summed per distinct node list, and a list that is one run of the
    nodes in hostlist order (what Slurm allocates, mostly) is added to the run at its two ends
    (a difference array) instead of at each node."""
    shapes: Dict[Tuple[str, ...], List[float]] = {}
    for job, w in zip(jobs, weights):
        acc = shapes.get(job.nodes)
        if acc is None:
            acc = shapes[job.nodes] = [0.0, 0.0]
        acc[0] += w
        if job.state in FAILED_STATES:
            acc[1] += w
    order = tuple(sorted(set().union(*shapes), key=_natural))
    at = {node: i for i, node in enumerate(order)}
    size = len(order)
    runs = [[0, 0, 0] for _ in range(size + 1)]  # expected, variance, observed: at a run's ends
    points = [[0, 0, 0] for _ in range(size)]  # the same for lists that are not one run
    for nodes, (w_all, w_failed) in shapes.items():
        n = len(nodes)
        share = 1.0 / n
        q = rates[_class_of(n)]
        e, v, o = (int(w_all * share * q * _FIXED), int(w_all * share * share * q * (1.0 - q) * _FIXED),
                   int(w_failed * share * _FIXED))
        first = at[nodes[0]]
        if order[first:first + n] == nodes:
            head, tail = runs[first], runs[first + n]
            head[0] += e
            head[1] += v
            head[2] += o
            tail[0] -= e
            tail[1] -= v
            tail[2] -= o
        else:
            for node in nodes:
                got = points[at[node]]
                got[0] += e
                got[1] += v
                got[2] += o
    out = {}
    e_run = v_run = o_run = 0
    for node, (de, dv, do), (pe, pv, po) in zip(order, runs, points):
        e_run += de
        v_run += dv
        o_run += do
        e_sum, v_sum, o_sum = (e_run + pe) / _FIXED, (v_run + pv) / _FIXED, (o_run + po) / _FIXED
        scale = min(1000.0, max(1.0, e_sum / v_sum)) if v_sum > 0 else 1.0
        out[node] = poisson_sf(o_sum * scale, e_sum * scale)
    return out


def lemons(jobs: Sequence[Job], cfg: "SuspectsConfig", until: float,
           named: Iterable[str] = (), by_node: Optional[Dict[str, List[Job]]] = None) -> List[Suspect]:
    """The lemon rule (module docstring).  `named`: nodes already suspect (black holes): the
    jobs they were in explain nothing about their partners."""
    if not jobs:
        return []
    weights = [0.5 ** (max(0.0, until - j.end) / cfg.half_life_s) for j in jobs]
    fleet = _Rates(jobs, weights)
    def weighed(node_jobs: Sequence[Job]) -> List[Tuple[Job, float]]:
        return [(j, 0.5 ** (max(0.0, until - j.end) / cfg.half_life_s)) for j in node_jobs]

    first_named = set(named)
    # every node, in the order the jobs first name them (ties in p-value keep that order)
    every = by_node if by_node is not None else dict.fromkeys(
        itertools.chain.from_iterable(map(operator.attrgetter("nodes"), jobs)))
    tested = [n for n in every if n not in first_named]
    if len(tested) > SCREEN_ABOVE:
        fleet_rates = fleet.without(())
        screen = _screen(jobs, weights, fleet_rates)
        tested_in_full = [n for n in tested if screen.get(n, 1.0) <= SCREEN_P]
    else:
        tested_in_full = tested
    if by_node is None:
        by_node = index_by_node(jobs, set(tested_in_full) | first_named)
    explained = {id(j) for n in first_named for j in by_node.get(n, ())}
    judged: Dict[str, Tuple[float, float, float, int]] = {}
    own: Dict[str, Dict[int, float]] = {}
    for node in tested_in_full:
        pairs = weighed(by_node[node])
        own[node] = fleet.without(pairs)
        judged[node] = _judge(_tally(pairs, own[node], cfg.incident_gap_s, explained), cfg)
    # the nodes the screen passed over count as tested, and as no discovery
    cutoff = bh_cutoff([v[0] for v in judged.values()], cfg.lemon_fdr, max(1, len(tested)))
    if cutoff < 0:
        return []
    found: List[Suspect] = []
    for node in sorted((n for n, v in judged.items() if v[0] <= cutoff), key=lambda n: judged[n][0]):
        pairs = weighed(by_node[node])
        tally = _tally(pairs, own[node], cfg.incident_gap_s, explained)  # recounted: explaining away
        p, observed, expected, users = _judge(tally, cfg)
        if p > cutoff or observed - expected < cfg.lemon_min_excess or users < cfg.lemon_users:
            continue
        explained.update(id(j) for j in by_node[node])
        found.append(Suspect(node, "lemon", -math.log10(max(p, 1e-300)), {
            "p_value": p, "failures": round(observed, 2), "expected": round(expected, 2),
            "jobs": tally.jobs, "users_in_excess": users, "fdr": cfg.lemon_fdr,
            "failed_jobs": tally.failed[:EVIDENCE_JOBS],
            "failed_jobs_total": len(tally.failed)}))
    return found


# --- our own history ---------------------------------------------------------------------

def _window_max(times: Sequence[float], window_s: float) -> Tuple[int, float]:
    """(the most events in any window_s, when that window ended)."""
    best, at, lo = 0, 0.0, 0
    for hi, t in enumerate(times):
        while t - times[lo] > window_s:
            lo += 1
        if hi - lo + 1 > best:
            best, at = hi - lo + 1, t
    return best, at


def history_suspects(events: Sequence[FleetEvent], cfg: "SuspectsConfig") -> List[Suspect]:
    ordered = sorted(events, key=lambda e: e.time)
    found: List[Suspect] = []
    by_node: DefaultDict[str, List[FleetEvent]] = defaultdict(list)
    by_serial: DefaultDict[str, List[FleetEvent]] = defaultdict(list)
    for event in ordered:
        by_node[event.node].append(event)
        if event.serial:
            by_serial[event.serial].append(event)
    for node, evs in sorted(by_node.items()):
        fixes = [e.time for e in evs if e.kind in REMEDIATION_KINDS]
        count, at = _window_max(fixes, cfg.remediation_window_s)
        if count >= cfg.remediations:
            found.append(Suspect(node, "remediations", float(count), {
                "remediations": count, "window_s": cfg.remediation_window_s, "last": iso_utc(at),
                "serials": sorted({e.serial for e in evs if e.serial})}))
        found += _same_xid_after_reboots(node, evs, cfg)
    for serial, evs in sorted(by_serial.items()):
        fixes = [e.time for e in evs if e.kind in REMEDIATION_KINDS]
        count, at = _window_max(fixes, cfg.remediation_window_s)
        if count >= cfg.remediations:
            found.append(Suspect(evs[-1].node, "serial_remediations", float(count), {
                "remediations": count, "window_s": cfg.remediation_window_s, "last": iso_utc(at),
                "nodes": sorted({e.node for e in evs})}, serial=serial))
        for code in ("xid:13", "xid:31"):
            times = [e.time for e in evs if e.kind == code]
            count, at = _window_max(times, cfg.xid_repeat_window_s)
            if count >= 2:
                found.append(Suspect(evs[-1].node, "xid_repeat", float(count), {
                    "xid": int(code[4:]), "times": count, "window_s": cfg.xid_repeat_window_s,
                    "last": at}, serial=serial))
    return found


def _same_xid_after_reboots(node: str, events: Sequence[FleetEvent], cfg: "SuspectsConfig") -> List[Suspect]:
    chain: Dict[str, int] = {}  # Xid -> reboots it has come back after
    rebooted_since: Dict[str, bool] = {}
    out: Dict[str, Suspect] = {}
    for event in events:
        if event.kind == "reboot":
            for code in rebooted_since:
                rebooted_since[code] = True
        elif event.kind.startswith("xid:"):
            if rebooted_since.get(event.kind):
                chain[event.kind] = chain.get(event.kind, 0) + 1
            rebooted_since[event.kind] = False
            if chain.get(event.kind, 0) >= cfg.same_xid_reboots:
                out[event.kind] = Suspect(node, "same_xid_after_reboots", float(chain[event.kind]), {
                    "xid": int(event.kind[4:]), "reboots": chain[event.kind], "last": iso_utc(event.time),
                    "serial": event.serial})
    return list(out.values())


def find_suspects(jobs: Sequence[Job], events: Sequence[FleetEvent], cfg: "SuspectsConfig",
                  until: float, samples: Sequence[CounterSample] = ()) -> List[Suspect]:
    """Every rule, worst first within each kind: black holes, lemons, then our own history (its
    events, then each GPU serial's counters: decide/counters.py)."""
    with gc_paused():
        holes = black_holes(jobs, cfg)
        found = holes + lemons(jobs, cfg, until, (s.node for s in holes))
    found += sorted(history_suspects(events, cfg), key=lambda s: (-s.score, s.node))
    found += counter_suspects(samples, cfg, until)
    return found


def history_events(records: Iterable[Dict[str, Any]]) -> List[FleetEvent]:
    """FleetEvents from our history lines (act/history.py's schema 1): a repair's reset or
    reboot, and the Xid, uncorrectable ECC and remap findings, each with its GPU serial."""
    out: List[FleetEvent] = []
    for rec in records:
        if not isinstance(rec, dict):
            continue  # read_history gives objects only; a caller may not
        epoch, node = rec.get("epoch"), rec.get("node") or rec.get("host")
        if not isinstance(epoch, (int, float)) or not isinstance(node, str):
            continue
        serials: Sequence[Optional[str]] = sorted({str(f["serial"]) for f in rec.get("findings") or ()
                                               if isinstance(f, dict) and f.get("severity") == "fail"
                                               and f.get("serial")})
        for f in rec.get("findings") or ():
            if not isinstance(f, dict) or f.get("severity") not in ("fail", "warn"):
                continue
            kind = _finding_kind(str(f.get("check") or ""), f.get("value"))
            if kind:
                out.append(FleetEvent(float(epoch), node, f.get("serial") or None, kind))
        for e in rec.get("events") or ():
            if not isinstance(e, dict) or e.get("kind") != "repair":
                continue
            message = str(e.get("message") or "")
            kind = "reset" if ": reset GPU(s)" in message else "reboot" if "asked Slurm to reboot" in message else None
            if kind:
                for serial in serials or (None,):
                    out.append(FleetEvent(float(epoch), node, serial, kind))
    return out


def _finding_kind(check: str, value: Any) -> Optional[str]:
    if check == "xid":
        if value == "fallen_off_bus":
            return "otb"
        return f"xid:{value}" if isinstance(value, int) else None
    if check == "ecc.volatile_uncorrected":
        return "dbe"
    if "remap" in check:
        return "remap"
    return None
