"""decide/gang.py: the gang check's rounds inside one job's allocation, driven by a model of the
job's nodes (which one is slow, hangs or errs) in place of srun: the plan is pure."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Sequence, Set

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.decide.internodejob import NotSpanned, SetupProblem
from healthcheck.decide.gang import (FAILED, PASSED, SINGLE, UNKNOWN, GangPlan, gang_reason, job_lines,
                                     judge_gang_run, judge_pairs, parse_show_job, suspects, valid_job_id)
from healthcheck.decide.sweep import BAD, Job, JobResult, NodeOutcome, Thresholds
from healthcheck.read.nccltests import parse_nccl_tests
from healthcheck.read.slurmconf import expand_hostlist

HEALTHY = 380.0
FLOOR = Thresholds(floor_gbps=100.0)


def run(nodes: Sequence[str], model: Callable[[Job], JobResult], thresholds: Thresholds = FLOOR,
        first: Sequence[str] = ()):
    plan = GangPlan(nodes, thresholds, partners=2, first=first)
    ran: List[List[Job]] = []
    while True:
        jobs = plan.next_jobs()
        if not jobs:
            break
        for job in jobs:
            assert set(job.nodes) <= set(nodes)  # never a node outside the allocation
            assert not set(job.nodes) & {n for j in jobs if j is not job for n in j.nodes}
        ran.append(jobs)
        plan.record([model(j) for j in jobs])
    return plan.result(), ran


def slow(bad: Set[str], figure: float = 41.2) -> Callable[[Job], JobResult]:
    return lambda job: JobResult(job, figure if set(job.nodes) & bad else HEALTHY)


def test_gang_four_nodes_one_slow_names_it_inside_the_allocation() -> None:
    nodes = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    result, ran = run(nodes, slow({"gpu-c"}))
    assert result.outcome == FAILED
    assert [n.node for n in result.bad] == ["gpu-c"]
    [bad] = result.bad
    assert bad.why == "busbw=41.2<100" and set(bad.partners) == {"gpu-a", "gpu-b"}
    assert ran[0] == [Job(tuple(nodes), "gang", 1)]  # the whole job first, once
    assert result.rounds == len(ran) == 4  # whole, pairs, two partner rounds
    assert {n.node: n.outcome for n in result.others}["gpu-d"] == "transient"


def test_gang_passing_collective_runs_once_and_passes() -> None:
    result, ran = run(["gpu-a", "gpu-b", "gpu-c"], slow(set()))
    assert result.outcome == PASSED and len(ran) == 1 and result.whole.busbw_gbps == HEALTHY


def test_gang_one_node_runs_nothing() -> None:
    result, ran = run(["gpu-a"], slow({"gpu-a"}))
    assert result.outcome == SINGLE and ran == []
    assert job_lines(result, "7", 1 << 28, {}) == ["gpu-healthcheck: gang: job 7 has one node: nothing to check"]


def hang(bad: Set[str]) -> Callable[[Job], JobResult]:
    return lambda job: (JobResult(job, None, "hang: ended by its time limit") if set(job.nodes) & bad
                        else JobResult(job, HEALTHY))


@pytest.mark.parametrize("count,position", [(c, p) for c in (3, 4, 5) for p in range(c)])
@pytest.mark.parametrize("fault", ["slow", "hang"])
def test_gang_one_bad_node_is_named_in_every_position(count: int, position: int, fault: str) -> None:
    """3, 4 and 5 nodes, the bad one first, in the middle, last or the odd one out: it alone is
    named, with two known-good partners of the job, and no other node is blamed."""
    nodes = [f"gpu-{c}" for c in "abcde"[:count]]
    culprit = nodes[position]
    result, ran = run(nodes, slow({culprit}) if fault == "slow" else hang({culprit}))
    assert result.outcome == FAILED, result.why
    [bad] = result.bad
    assert bad.node == culprit and len(set(bad.partners)) == 2 and culprit not in bad.partners
    assert bad.why == ("busbw=41.2<100" if fault == "slow" else "hang: ended by its time limit")
    assert all(n.outcome in ("pass", "transient") for n in result.others), result.others
    # the whole run, the pairs, then the partner (or cross) rounds
    assert len(ran) <= (4 if count in (3, 4) else 6)
    line = job_lines(result, "12", 256 << 20, {culprit: "drained"})[1]
    assert line.startswith(f"gpu-healthcheck: gang: {culprit} is bad: ")


def test_gang_three_nodes_bad_in_the_only_pair_is_found_through_the_odd_node() -> None:
    """gpu-a bad: (a,b) fails and c was odd, so no pair passed; a then runs with c (fails) and
    b with c (passes): b and c are good, and a failed with both."""
    result, ran = run(["gpu-a", "gpu-b", "gpu-c"], slow({"gpu-a"}))
    assert [n.node for n in result.bad] == ["gpu-a"] and set(result.bad[0].partners) == {"gpu-b", "gpu-c"}
    assert [[j.nodes for j in r] for r in ran[1:]] == [[("gpu-a", "gpu-b")], [("gpu-a", "gpu-c")],
                                                        [("gpu-b", "gpu-c")]]
    assert [j.kind for r in ran[2:] for j in r] == ["cross", "cross"]
    others = {n.node: n for n in result.others}
    assert others["gpu-b"].outcome == "transient" and others["gpu-c"].outcome == "transient"


@pytest.mark.parametrize("position", [0, 1])
def test_gang_two_nodes_cannot_tell_which_names_both_suspects_and_drains_nothing(position: int) -> None:
    nodes = ["gpu-a", "gpu-b"]
    result, ran = run(nodes, slow({nodes[position]}))
    assert result.outcome == UNKNOWN and result.bad == ()
    assert "two nodes" in result.why and len(ran) == 2  # the whole run, the pair again: no third node
    assert suspects(result) == nodes
    assert job_lines(result, "13", 1 << 28, {}) == [  # as docs/network.md shows them
        "gpu-healthcheck: gang: job 13: 2 nodes failed: busbw=41.2<100 (busbw 41.2 GB/s at 256 MiB)",
        "gpu-healthcheck: gang: no node named: busbw=41.2<100; with two nodes there is no third to tell "
        "which one it is; suspects: gpu-a,gpu-b; nothing drained"]


def test_gang_three_nodes_two_bad_every_pair_fails_names_none_and_says_so() -> None:
    """Every pair failing leaves no known-good node: the evidence cannot tell, so no node is
    named (draining one would be a guess), and the job's output names the suspects."""
    result, _ = run(["gpu-a", "gpu-b", "gpu-c"], slow({"gpu-a", "gpu-b"}))
    assert result.outcome == UNKNOWN and result.bad == ()
    assert suspects(result) == ["gpu-a", "gpu-b", "gpu-c"]
    assert "cannot tell" in result.why
    assert "suspects: gpu-a,gpu-b,gpu-c; nothing drained" in job_lines(result, "7", 1 << 28, {})[-1]


def test_gang_three_nodes_a_failure_of_one_pair_only_drains_nothing() -> None:
    """(a,b) fails together, yet each passes with c: a fault of the pair (their path), not of
    a node: both are transient, none is drained."""
    def pair_fault(job: Job) -> JobResult:
        return JobResult(job, 41.2 if {"gpu-a", "gpu-b"} <= set(job.nodes) else HEALTHY)

    result, _ = run(["gpu-a", "gpu-b", "gpu-c"], pair_fault)
    assert result.bad == () and result.outcome == UNKNOWN
    assert {n.node: n.outcome for n in result.others} == {"gpu-a": "transient", "gpu-b": "transient",
                                                           "gpu-c": "pass"}


def test_gang_judge_pairs_needs_known_good_partners() -> None:
    """The evidence, judged together and in any order: a node is bad only after failing with
    `partners` different nodes that passed a pair."""
    def res(a: str, b: str, figure: float) -> JobResult:
        return JobResult(Job((a, b), "cross", 1), figure)

    runs = [res("a", "b", 41.2), res("a", "c", 41.2), res("b", "c", HEALTHY)]
    for order in (runs, runs[::-1]):
        judged = judge_pairs(["a", "b", "c"], order, FLOOR, None, 2)
        assert judged["a"].outcome == "bad" and set(judged["a"].partners) == {"b", "c"}
    judged = judge_pairs(["a", "b", "c"], runs, FLOOR, None, 3)
    assert judged["a"].outcome == "unknown" and "2 known-good node(s) (b,c), 3 needed" in judged["a"].why
    judged = judge_pairs(["a", "b", "c"], runs[:2], FLOOR, None, 2)
    assert {n.outcome for n in judged.values()} == {"unknown"}
    assert "no known-good node to tell" in judged["a"].why


def test_gang_without_a_floor_a_slow_whole_run_passes_but_an_nccl_error_fails() -> None:
    result, _ = run(["gpu-a", "gpu-b", "gpu-c"], slow({"gpu-c"}), thresholds=Thresholds())
    assert result.outcome == PASSED  # one run has no median: only the floor judges its figure

    def err(job: Job) -> JobResult:
        return JobResult(job, HEALTHY, "NCCL WARN Net : Connection closed" if "gpu-c" in job.nodes else None)

    result, _ = run(["gpu-a", "gpu-b", "gpu-c", "gpu-d"], err, thresholds=Thresholds())
    assert result.outcome == FAILED and [n.node for n in result.bad] == ["gpu-c"]


def test_gang_failure_that_needs_the_whole_job_names_no_node() -> None:
    def at_scale(job: Job) -> JobResult:
        return JobResult(job, 41.2 if len(job.nodes) > 2 else HEALTHY)

    result, _ = run(["gpu-a", "gpu-b", "gpu-c", "gpu-d"], at_scale)
    assert result.outcome == UNKNOWN and result.bad == ()
    assert "needs more nodes" in result.why


def test_gang_a_claim_only_orders_the_pairs_and_never_decides() -> None:
    nodes = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    result, ran = run(nodes, slow({"gpu-d"}), first=["gpu-b"])  # the claim names a healthy node
    assert [n.node for n in result.bad] == ["gpu-d"]
    assert ran[1][0].nodes[0] == "gpu-b"  # tested first, found healthy
    result, _ = run(nodes, slow(set()), first=["gpu-b"])
    assert result.outcome == PASSED and result.bad == ()


def test_gang_hang_of_the_whole_run_fails_and_names_the_hanging_node() -> None:
    def hang(job: Job) -> JobResult:
        return JobResult(job, None, "hang: ended by its time limit" if "gpu-b" in job.nodes else None) \
            if "gpu-b" in job.nodes else JobResult(job, HEALTHY)

    result, _ = run(["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e"], hang)
    assert result.outcome == FAILED and [n.node for n in result.bad] == ["gpu-b"]
    assert gang_reason(result.bad[0], "all_reduce_perf", "12").startswith(
        "gpu-healthcheck: fabric nccl=hang partners=")


def test_gang_reason_names_figure_partners_collective_and_job() -> None:
    node = NodeOutcome("gpu-c", BAD, 41.2, ("gpu-a", "gpu-b"), "busbw=41.2<100")
    assert gang_reason(node, "all_reduce_perf", "1234") == \
        "gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-a,gpu-b all_reduce_perf gang job=1234"


def test_gang_job_lines_name_node_partner_and_figure() -> None:
    result, _ = run(["gpu-a", "gpu-b", "gpu-c", "gpu-d"], slow({"gpu-c"}))
    lines = job_lines(result, "12", 256 << 20, {"gpu-c": "drained; job requeued"})
    assert lines[0] == "gpu-healthcheck: gang: job 12: 4 nodes failed: busbw=41.2<100 (busbw 41.2 GB/s at 256 MiB)"
    assert lines[1].startswith("gpu-healthcheck: gang: gpu-c is bad: busbw=41.2<100 with every partner (gpu-")
    assert lines[1].endswith("busbw 41.2 GB/s; drained; job requeued")


SHOW_JOB = """JobId=1234 JobName=train
   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   NodeList=gpu-[a-b],gpu-[01-02]
   BatchHost=gpu-01
"""


def test_gang_job_from_scontrol_show_job_both_layouts() -> None:
    with pytest.raises(Exception):
        parse_show_job(SHOW_JOB, expand_hostlist)  # gpu-[a-b] is no hostlist Slurm writes
    text = SHOW_JOB.replace("gpu-[a-b],", "")
    job = parse_show_job(text, expand_hostlist)
    assert job.nodes == ("gpu-01", "gpu-02") and job.state == "RUNNING" and job.user == "alice(1001)"
    one_line = " ".join(text.split())
    assert parse_show_job(one_line, expand_hostlist) == job
    with pytest.raises(ValueError):
        parse_show_job("slurm_load_jobs error: Invalid job id specified", expand_hostlist)
    with pytest.raises(ValueError):
        parse_show_job("JobId=5 JobState=PENDING NodeList=(null)", expand_hostlist)


@pytest.mark.parametrize("job_id,ok", [("1234", True), ("1234_5", False), ("0", False), ("", False),
                                       ("12 34", False), (None, False)])
def test_gang_job_id_is_plain_numeric(job_id, ok) -> None:
    assert valid_job_id(job_id) is ok


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=3, max_value=24), bad=st.integers(min_value=0, max_value=23))
def test_gang_one_bad_node_is_named_alone_and_no_healthy_node_ever_is(n: int, bad: int) -> None:
    nodes = [f"gpu-{i:02d}" for i in range(n)]
    culprit = nodes[bad % n]
    result, ran = run(nodes, slow({culprit}))
    assert [b.node for b in result.bad] == [culprit]
    # whole, pairs, then partner rounds: two, or more where an odd node out waits for partners
    assert len(ran) <= (4 if n % 2 == 0 or n == 3 else 6)
    healthy, _ = run(nodes, slow(set()))
    assert healthy.outcome == PASSED and healthy.bad == ()


@settings(max_examples=80, deadline=None)
@given(n=st.integers(min_value=2, max_value=9), bad=st.sets(st.integers(min_value=0, max_value=8), max_size=3),
       fault=st.sampled_from(["slow", "hang"]))
def test_gang_never_names_a_healthy_node_whatever_is_bad(n: int, bad: Set[int], fault: str) -> None:
    """Any number of bad nodes in any positions: every node named is one of them (no false
    drain), and a single bad node among three or more is always named."""
    nodes = [f"gpu-{i}" for i in range(n)]
    culprits = {nodes[i] for i in bad if i < n}
    result, _ = run(nodes, slow(culprits) if fault == "slow" else hang(culprits))
    assert {b.node for b in result.bad} <= culprits
    if len(culprits) == 1 and n >= 3:
        assert [b.node for b in result.bad] == sorted(culprits)
    if not culprits:
        assert result.outcome == PASSED


# real outputs (tests/fixtures/fabric/SOURCES.md): one node's run alone, and a run over two nodes
FABRIC = Path(__file__).resolve().parents[1] / "fixtures" / "fabric"
SINGLE_NODE = (FABRIC / "superbench__nccl_allreduce__8xA100-SXM4-40GB.log").read_text()
TWO_NODES = (FABRIC / "cscs-docs__nccl-md__srun-pmix-2x4-GH200-ompi__2.17.1.txt").read_text()


@pytest.mark.parametrize("text, why", [
    (SINGLE_NODE.replace("localhost", "gpu-a"), "ranks on gpu-a only"),
    (SINGLE_NODE.replace("localhost", "gpu-a") + SINGLE_NODE.replace("localhost", "gpu-b"),
     "its ranks were numbered anew on each host"),
])
def test_gang_collective_that_did_not_span_the_nodes_is_a_setup_problem_never_a_pass(text: str, why: str) -> None:
    """Issue 36 case 6 for the gang check: the fabric sweep's rule (decide/internodejob.span_problem),
    before any figure is judged; the single-node run's 235 GB/s would pass any floor."""
    job = Job(("gpu-a", "gpu-b", "gpu-c"), "whole", 0)
    with pytest.raises(NotSpanned, match=f"did not span gpu-a,gpu-b,gpu-c: {why}") as err:
        judge_gang_run(job, parse_nccl_tests(text), 0, False)
    assert isinstance(err.value, SetupProblem) and "srun --mpi=pmix" in str(err.value)


def test_gang_collective_that_spanned_is_judged_and_a_hang_stays_a_hang() -> None:
    job = Job(("nid005471", "nid005487"), "whole", 0)
    assert judge_gang_run(job, parse_nccl_tests(TWO_NODES), 0, False) == JobResult(job, 123.11, None)
    # no rank lines because the run hung before its header: the node's failure, not the setup
    hung = judge_gang_run(Job(("gpu-a", "gpu-b"), "whole", 0), parse_nccl_tests("# Using devices\n"), None, True)
    assert hung.problem == "hang: ended by its time limit"
