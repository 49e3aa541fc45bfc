"""decide/sweep.py: the fabric sweep's rounds and judgements, driven by a model of the cluster
(which node is slow, which pair fails once) in place of Slurm: the planner is pure."""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence, Set, Tuple

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.decide.sweep import (BAD, PASS, TRANSIENT, UNKNOWN, Job, JobResult, NodeOutcome,
                                      RailResult, SweepPlanner, Thresholds, failure, fabric_reason,
                                      is_fabric_reason, judge_collective, median_of)
from healthcheck.netmodel import NcclRow, NcclRun

HEALTHY = 380.0


def nodes(n: int) -> list:
    return [f"gpu-{i:05d}" for i in range(n)]


def sweep(candidates: Sequence[str], model: Callable[[Job], JobResult], group_size: int = 0,
          thresholds: Thresholds = Thresholds(floor_gbps=100.0), partners: int = 2):
    planner = SweepPlanner(candidates, thresholds, partners=partners, group_size=group_size)
    seen = []
    while True:
        jobs = planner.next_jobs()
        if not jobs:
            break
        for job in jobs:  # a node is in at most one job of a round
            assert not set(job.nodes) & {n for j in jobs if j is not job for n in j.nodes}
        seen.append(jobs)
        planner.record([model(job) for job in jobs])
    return planner.outcome(), seen


def slow(bad: Set[str], figure: float = 41.2, at_scale: Set[str] = frozenset()) -> Callable[[Job], JobResult]:
    def model(job: Job) -> JobResult:
        if set(job.nodes) & bad or (len(job.nodes) > 2 and set(job.nodes) & at_scale):
            return JobResult(job, figure)
        return JobResult(job, HEALTHY)
    return model


def test_fabric_sweep_finds_one_slow_node_in_three_rounds_and_clears_its_partner() -> None:
    outcome, rounds = sweep(nodes(8), slow({"gpu-00003"}))
    assert outcome.of(BAD) == ["gpu-00003"]
    assert outcome.of(TRANSIENT) == ["gpu-00002"]  # its first-round partner, cleared by two others
    assert len(rounds) == outcome.rounds == 3 and [j.kind for j in rounds[0]] == ["pair"] * 4
    bad = next(n for n in outcome.nodes if n.outcome == BAD)
    assert bad.why == "busbw=41.2<100" and len(set(bad.partners)) == 2
    assert "gpu-00002" not in bad.partners  # partners are known-good nodes


def test_fabric_sweep_pair_that_fails_once_drains_nothing() -> None:
    fired: Set[Tuple[str, ...]] = set()

    def once(job: Job) -> JobResult:
        if job.nodes == ("gpu-00004", "gpu-00005") and job.nodes not in fired:
            fired.add(job.nodes)
            return JobResult(job, HEALTHY, problem="wrong=1")
        return JobResult(job, HEALTHY)
    outcome, _ = sweep(nodes(8), once)
    assert outcome.of(BAD) == [] and sorted(outcome.of(TRANSIENT)) == ["gpu-00004", "gpu-00005"]


def test_fabric_sweep_median_rule_catches_a_node_above_the_floor() -> None:
    outcome, _ = sweep(nodes(8), slow({"gpu-00006"}, figure=200.0))
    assert outcome.of(BAD) == ["gpu-00006"] and outcome.median_gbps == HEALTHY
    why = next(n.why for n in outcome.nodes if n.outcome == BAD)
    assert why == "busbw=200.0<0.7*median=380.0"


def test_fabric_sweep_mixed_results_are_unknown_and_never_bad() -> None:
    def mixed(job: Job) -> JobResult:
        # gpu-00001 is slow only with gpu-00000 and gpu-00002: one of its partners passes
        if "gpu-00001" in job.nodes and set(job.nodes) & {"gpu-00000", "gpu-00002"}:
            return JobResult(job, 41.2)
        return JobResult(job, HEALTHY)
    outcome, _ = sweep(nodes(8), mixed)
    assert outcome.of(BAD) == [] and "gpu-00001" in outcome.of(UNKNOWN)


def test_fabric_sweep_with_no_known_good_node_drains_nothing() -> None:
    outcome, rounds = sweep(nodes(4), slow(set(nodes(4))))
    assert outcome.of(BAD) == [] and outcome.of(UNKNOWN) == nodes(4) and len(rounds) == 1


def test_fabric_sweep_odd_node_out_is_tested_with_known_good_partners() -> None:
    outcome, rounds = sweep(nodes(7), slow({"gpu-00006"}))
    assert outcome.of(BAD) == ["gpu-00006"] and len(rounds) == 3
    outcome, _ = sweep(nodes(7), slow(set()))
    assert outcome.of(BAD) == [] and outcome.of(TRANSIENT) == ["gpu-00006"]


def test_fabric_sweep_skipped_pair_names_its_nodes_and_is_no_evidence() -> None:
    def unplaceable(job: Job) -> JobResult:
        if "gpu-00000" in job.nodes:
            return JobResult(job, skipped="sbatch: Requested node configuration is not available")
        return JobResult(job, HEALTHY)
    outcome, _ = sweep(nodes(6), unplaceable)
    assert outcome.of("skipped") == ["gpu-00000", "gpu-00001"] and outcome.of(BAD) == []


def test_fabric_sweep_hang_and_nccl_error_fail_and_are_named() -> None:
    def broken(job: Job) -> JobResult:
        if "gpu-00002" in job.nodes:
            return JobResult(job, None, problem="hang: ended by its time limit")
        return JobResult(job, HEALTHY)
    outcome, _ = sweep(nodes(8), broken)
    bad = [n for n in outcome.nodes if n.outcome == BAD]
    assert [n.node for n in bad] == ["gpu-00002"] and bad[0].why.startswith("hang")
    assert fabric_reason(bad[0], "all_reduce_perf").startswith("gpu-healthcheck: fabric nccl=hang partners=")


def test_fabric_sweep_group_round_bisects_to_a_node_that_fails_only_at_scale() -> None:
    outcome, rounds = sweep(nodes(64), slow(set(), figure=50.0, at_scale={"gpu-00037"}), group_size=64)
    assert outcome.of(BAD) == ["gpu-00037"]
    assert len(rounds) <= 3 + math.ceil(math.log2(64))
    assert {j.kind for j in rounds[1]} == {"group"}


@pytest.mark.parametrize("n", [16, 100, 1024])
@pytest.mark.parametrize("kind", ["slow in pairs", "slow only at scale"])
def test_fabric_sweep_one_bad_node_among_n_within_the_round_bound(n: int, kind: str) -> None:
    bad = nodes(n)[n // 3]
    model = slow({bad}) if kind == "slow in pairs" else slow(set(), at_scale={bad})
    outcome, rounds = sweep(nodes(n), model, group_size=n)
    assert outcome.of(BAD) == [bad]
    assert len(rounds) <= 3 + math.ceil(math.log2(n))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 60), st.data())
def test_fabric_sweep_never_drains_a_healthy_node(n: int, data) -> None:
    """Whatever node is slow (or none), no node the model calls healthy is ever bad, and the
    slow one is bad whenever two known-good partners exist."""
    candidates = nodes(n)
    bad = set(data.draw(st.lists(st.sampled_from(candidates), max_size=1)))
    outcome, rounds = sweep(candidates, slow(bad))
    assert set(outcome.of(BAD)) <= bad
    if bad and n >= 5:
        assert set(outcome.of(BAD)) == bad
    # one bad node among N in at most 3 + ceil(log2 N) rounds whatever N; in 3 when the known-good
    # nodes are enough for every suspect's partners at once (with five, two good nodes serve the
    # bad node's pair and the odd one out: 5 rounds)
    assert len(rounds) <= 3 + math.ceil(math.log2(n))
    if n >= 7:
        assert len(rounds) <= 3


def run_of(busbw: float, **kw) -> NcclRun:
    row = NcclRow(1 << 30, 1 << 28, "float", "sum", busbw, busbw, busbw / 2, 1000.0, 0, 0)
    return NcclRun(rows=(row,), avg_busbw_gbps=busbw, **kw)


@pytest.mark.parametrize("run, exited, timed_out, problem", [
    (run_of(380.0), 0, False, None),
    (run_of(380.0), None, True, "hang: ended by its time limit"),
    (run_of(380.0, warnings=("Net : Connection closed by remote peer",)), 1, False,
     "NCCL WARN Net : Connection closed by remote peer"),
    (NcclRun(errors=("Test NCCL failure common.cu:777 'unhandled system error'",)), 1, False,
     "Test NCCL failure common.cu:777 'unhandled system error'"),
    (run_of(380.0, out_of_bounds=3, oob_failed=True), 1, False, "wrong=3"),
    (NcclRun(), 0, False, "no result table"),
    (NcclRun(rows=run_of(1.0).rows), 137, False, "cut off before its summary (exit status 137)"),
    (run_of(380.0), 1, False, "exit status 1"),
])
def test_fabric_judge_collective_names_what_failed(run, exited, timed_out, problem) -> None:
    assert judge_collective(run, exited, timed_out)[1] == problem


def test_fabric_failure_of_a_slow_rail() -> None:
    job = Job(("a", "b"), "pair", 1)
    rails = (RailResult("a", "mlx5_0", 392.0), RailResult("a", "mlx5_1", 150.0))
    assert failure(JobResult(job, HEALTHY, rails=rails), Thresholds(100.0, 0.7, 360.0), HEALTHY) == \
        "rail a:mlx5_1=150.0<360"
    assert failure(JobResult(job, HEALTHY, rails=rails), Thresholds(100.0, 0.7, 0.0), HEALTHY) is None
    assert median_of([JobResult(job, 1.0), JobResult(job, 3.0, problem="x"), JobResult(job, 2.0)]) == 1.5


def test_fabric_reason_is_ours_and_bounded() -> None:
    outcome = NodeOutcome("gpu-b", BAD, 41.2, ("gpu-c", "gpu-e"), "busbw=41.2<100")
    reason = fabric_reason(outcome, "all_reduce_perf")
    assert reason == "gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-c,gpu-e all_reduce_perf sweep"
    assert is_fabric_reason(reason) and not is_fabric_reason("gpu-healthcheck: gpu3 ecc")
    long = outcome._replace(why="NCCL WARN " + "x " * 400, partners=tuple("n" * 40 for _ in range(9)))
    assert len(fabric_reason(long, "all_reduce_perf").encode()) <= 255
    assert PASS == "pass"


def test_fabric_sweep_last_unknown_nodes_go_first_each_with_another_node() -> None:
    """The last sweep's unknown nodes are tested first, each paired in round 1 with a node
    that was not doubtful: two doubtful nodes together could not tell which one it is."""
    planner = SweepPlanner(nodes(8), Thresholds(100.0), first=["gpu-00005", "gpu-00006", "gpu-99999"])
    pairs = [job.nodes for job in planner.next_jobs()]
    assert pairs[:2] == [("gpu-00005", "gpu-00000"), ("gpu-00006", "gpu-00001")]
    assert sorted(n for p in pairs for n in p) == nodes(8)
