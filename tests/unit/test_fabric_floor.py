"""decide/internodefloor.py and the per-model floors in decide/sweep.py: a node's GPU model from
its Gres= as `scontrol show nodes` prints it, the floor of a job over nodes of several models
(the lowest), and the sweep and gang decisions judged against it (pure)."""

from __future__ import annotations

import pytest

from healthcheck.configsections import InternodeConfig
from healthcheck.decide.internodefloor import floor_for, gpu_types, node_floor, node_floors, node_models, parse_floors
from healthcheck.decide.gang import FAILED, PASSED, GangPlan
from healthcheck.decide.sweep import (BAD, PASS, Job, JobResult, Medians, SweepPlanner, Thresholds, failure,
                                     fabric_thresholds)

FLOORS = parse_floors(("h100:busbw_gbps=360", "A100:busbw_gbps=150"))


@pytest.mark.parametrize("gres,types", [
    ("gpu:h100:8(S:0-1)", ("h100",)),
    ("gpu:a100:8(S:1,3,5,7)", ("a100",)),  # a socket list with commas (numa_node_as_socket)
    ("gpu:ADA6000:4(S:0-1)", ("ada6000",)),
    ("gpu:h100:4(S:0-3),gpu:a100:4(S:0-3)", ("h100", "a100")),
    ("gpu:h100:8(S:0-1),shard:h100:64(S:0-1)", ("h100",)),  # shards are no GPUs of their own
    ("gpu:tesla:no_consume:2", ("tesla",)),
    ("gpu:8", ()), ("gpu:4,mps:400", ()), ("gpu:8(S:0-1)", ()), ("(null)", ()), ("", ()), (None, ()),
    ("gpu:1g.10gb:7", ("1g.10gb",)),  # a MIG profile as a type
])
def test_fabric_floor_gpu_types_from_the_gres_slurmctld_shows(gres, types) -> None:
    assert gpu_types(gres) == types


def test_fabric_floor_parse_matches_any_case() -> None:
    assert FLOORS == {"h100": 360.0, "a100": 150.0}
    assert node_floor("gpu:H100:8(S:0-1)", FLOORS, 100.0) == 360.0


def test_fabric_floor_a_node_takes_its_lowest_type_and_an_unknown_type_the_default() -> None:
    assert node_floor("gpu:h100:4,gpu:a100:4", FLOORS, 100.0) == 150.0
    assert node_floor("gpu:h100:4,gpu:l40s:4", FLOORS, 100.0) == 100.0  # l40s: no entry
    assert node_floor("gpu:l40s:8", FLOORS, 100.0) == 100.0
    assert node_floor("gpu:8", FLOORS, 100.0) == 100.0  # no type: the default
    assert node_floor("gpu:h100:4,gpu:l40s:4", FLOORS, 0.0) == 0.0  # no default: no floor at all


def test_fabric_floor_a_mixed_pair_is_held_to_the_lower_floor() -> None:
    per_node = node_floors({"gpu-a": "gpu:h100:8(S:0-1)", "gpu-b": "gpu:a100:8(S:0-1)",
                            "gpu-c": "gpu:8", "gpu-d": "gpu:h100:8"}, FLOORS, 100.0)
    assert per_node == (("gpu-a", 360.0), ("gpu-b", 150.0), ("gpu-d", 360.0))  # gpu-c: the default
    assert floor_for(("gpu-a", "gpu-d"), per_node, 100.0) == 360.0
    assert floor_for(("gpu-a", "gpu-b"), per_node, 100.0) == 150.0
    assert floor_for(("gpu-a", "gpu-c"), per_node, 100.0) == 100.0
    assert node_floors({"gpu-a": "gpu:h100:8"}, {}, 100.0) == ()  # no floors: nothing per node


def test_fabric_floor_failure_names_the_floor_of_the_pairs_models() -> None:
    thresholds = Thresholds(100.0, node_floors=(("gpu-a", 360.0), ("gpu-b", 360.0), ("gpu-c", 150.0)))
    h100s = JobResult(Job(("gpu-a", "gpu-b"), "pair", 1), 300.0)
    assert failure(h100s, thresholds, None) == "busbw=300.0<360"
    mixed = JobResult(Job(("gpu-a", "gpu-c"), "pair", 1), 300.0)
    assert failure(mixed, thresholds, None) is None  # the A100's floor: 300 passes it
    other = JobResult(Job(("gpu-x", "gpu-y"), "pair", 1), 90.0)
    assert failure(other, thresholds, None) == "busbw=90.0<100"  # no model floor: busbw_floor_gbps
    assert Thresholds(100.0).floor_for(("gpu-a",)) == 100.0


def test_fabric_floor_thresholds_from_the_config_and_the_nodes_gres() -> None:
    fabric = InternodeConfig(busbw_floor_gbps=50.0, median_ratio_fail=0.6, rail_floor_gbps=300.0,
                          floors=("h100:busbw_gbps=360",))
    thresholds = fabric_thresholds(fabric, {"gpu-a": "gpu:h100:8(S:0-1)", "gpu-b": "gpu:8"})
    assert thresholds == Thresholds(50.0, 0.6, 300.0, (("gpu-a", 360.0),), (("gpu-a", "h100"),))
    # no floors: the models still give each its own median
    assert fabric_thresholds(InternodeConfig(), {"gpu-a": "gpu:h100:8"}) == \
        Thresholds(0.0, 0.7, 0.0, (), (("gpu-a", "h100"),))


def test_fabric_floor_the_sweep_finds_an_h100_node_below_its_models_floor() -> None:
    """All eight pairs run near the median (the median rule sees nothing), but gpu-c's H100
    pairs stay below the H100 floor while the A100 nodes' pairs are above theirs."""
    nodes = [f"gpu-{c}" for c in "abcdefgh"]
    gres = {n: "gpu:h100:8(S:0-1)" if n in ("gpu-a", "gpu-b", "gpu-c", "gpu-d") else "gpu:a100:8(S:0-1)"
            for n in nodes}
    thresholds = fabric_thresholds(InternodeConfig(floors=("h100:busbw_gbps=360", "a100:busbw_gbps=150")), gres)
    planner = SweepPlanner(nodes, thresholds)

    def model(job: Job) -> JobResult:
        return JobResult(job, 300.0 if "gpu-c" in job.nodes else 380.0 if set(job.nodes) <= set(nodes[:4])
                         else 200.0)
    while True:
        jobs = planner.next_jobs()
        if not jobs:
            break
        planner.record([model(j) for j in jobs])
    outcome = planner.outcome()
    assert outcome.of("bad") == ["gpu-c"], outcome.nodes
    [bad] = [n for n in outcome.nodes if n.node == "gpu-c"]
    assert bad.why.startswith("busbw=300.0<")


def test_fabric_floor_the_gang_check_holds_a_job_to_its_nodes_models() -> None:
    per_node = (("gpu-a", 360.0), ("gpu-b", 360.0), ("gpu-c", 360.0), ("gpu-d", 360.0))
    plan = GangPlan(["gpu-a", "gpu-b", "gpu-c", "gpu-d"], Thresholds(0.0, node_floors=per_node))
    jobs = plan.next_jobs()
    while jobs:
        plan.record([JobResult(j, 300.0 if "gpu-b" in j.nodes else 380.0) for j in jobs])
        jobs = plan.next_jobs()
    result = plan.result()
    assert result.outcome == FAILED and [n.node for n in result.bad] == ["gpu-b"]
    assert result.bad[0].why == "busbw=300.0<360"
    # without the per-model floors one run has nothing to compare its 300 GB/s with
    plan = GangPlan(["gpu-a", "gpu-b"], Thresholds(0.0))
    plan.record([JobResult(j, 300.0) for j in plan.next_jobs()])
    assert plan.result().outcome == PASSED


# the fleet: 6 H100 nodes at 380 GB/s, 2 A100 nodes at 200 GB/s, per-model floors
MIXED_GRES = {**{f"h{i}": "gpu:h100:8(S:0-1)" for i in range(6)}, "a0": "gpu:a100:8(S:0-1)",
              "a1": "gpu:a100:8(S:0-1)"}
MIXED = fabric_thresholds(InternodeConfig(floors=("h100:busbw_gbps=360", "a100:busbw_gbps=150")), MIXED_GRES)


def mixed_figure(nodes, slow=()):
    """A job's figure on that fleet: the slowest model's, and 40 GB/s through a slow node."""
    if any(n in slow for n in nodes):
        return 40.0
    return 200.0 if any(n.startswith("a") for n in nodes) else 380.0


def sweep(candidates, slow=()):
    planner = SweepPlanner(candidates, MIXED, partners=2)
    while True:
        jobs = planner.next_jobs()
        if not jobs:
            return planner.outcome()
        planner.record([JobResult(j, mixed_figure(j.nodes, slow)) for j in jobs])


def test_fabric_floor_node_models_from_the_gres() -> None:
    assert node_models({"b": "gpu:h100:8(S:0-1)", "a": "gpu:h100:4,gpu:a100:4", "c": "gpu:8"}) == \
        (("a", "a100,h100"), ("b", "h100"))


@pytest.mark.parametrize("order", [
    ["h0", "h1", "h2", "h3", "h4", "h5", "a0", "a1"],
    ["a0", "h0", "h1", "a1", "h2", "h3", "h4", "h5"],  # interleaved by name
    ["h0", "a0", "h1", "a1", "h2", "h3", "h4", "h5"],
])
def test_fabric_floor_a_healthy_second_model_is_never_drained_by_the_firsts_median(order) -> None:
    """Every run meets its model's floor: no node is bad, whatever order the nodes came in (the
    round's single median of 380 once drained both A100 nodes: busbw=200.0<0.7*median=380.0)."""
    outcome = sweep(order)
    assert outcome.of(BAD) == [] and sorted(outcome.of(PASS)) == sorted(order), outcome
    assert dict(outcome.medians.by_model) == {"h100": 380.0, "a100": 200.0}


def test_fabric_floor_each_model_keeps_its_median_rule() -> None:
    """The median still finds a node slow for its own model (above the floor): an A100 at 120
    against the A100s' 200, with no floor set."""
    fleet = {**MIXED_GRES, **{f"a{i}": "gpu:a100:8" for i in range(2, 6)}}
    thresholds = fabric_thresholds(InternodeConfig(), fleet)
    planner = SweepPlanner(sorted(fleet), thresholds, partners=2)
    while True:
        jobs = planner.next_jobs()
        if not jobs:
            break
        planner.record([JobResult(j, 120.0 if "a3" in j.nodes else mixed_figure(j.nodes)) for j in jobs])
    outcome = planner.outcome()
    assert outcome.of(BAD) == ["a3"], outcome
    assert {n.why for n in outcome.nodes if n.outcome == BAD} == {"busbw=120.0<0.7*median=200.0"}


def test_fabric_floor_a_mixed_job_is_held_to_the_lower_models_median() -> None:
    medians = Medians((("a100", 200.0), ("h100", 380.0)))
    mixed = JobResult(Job(("h0", "a0"), "partner", 2), 200.0)
    assert failure(mixed, MIXED, medians) is None
    assert failure(mixed._replace(busbw_gbps=130.0), MIXED, medians) == "busbw=130.0<150"
    assert failure(JobResult(Job(("h0", "h1"), "pair", 1), 200.0), MIXED, medians) == \
        "busbw=200.0<360"
    # a model with no median of its own (its only node ran mixed): only the floor judges the job
    assert failure(mixed._replace(busbw_gbps=160.0), MIXED, Medians((("h100", 380.0),))) is None
    assert failure(mixed, MIXED, 380.0) == "busbw=200.0<0.7*median=380.0"  # one figure: as given


def test_fabric_floor_a_slow_node_of_the_second_model_is_still_found() -> None:
    outcome = sweep(["h0", "h1", "h2", "h3", "h4", "h5", "a0", "a1"], slow=("a1",))
    assert outcome.of(BAD) == ["a1"], outcome


def test_fabric_floor_the_gang_localisation_holds_a_mixed_job_to_each_model() -> None:
    """The gang check's localisation runs the same planner: in a job over both models with one
    slow H100 node, that node alone is bad; the A100 nodes' 200 GB/s pairs pass their own median."""
    plan = GangPlan(sorted(MIXED_GRES), MIXED, partners=2)
    while True:
        jobs = plan.next_jobs()
        if not jobs:
            break
        plan.record([JobResult(j, mixed_figure(j.nodes, slow=("h3",))) for j in jobs])
    result = plan.result()
    assert result.outcome == FAILED and [n.node for n in result.bad] == ["h3"], result
    assert not [n for n in result.others if n.node.startswith("a") and n.outcome != PASS], result.others


def test_fabric_floor_the_sweeps_summary_names_each_models_median() -> None:
    from healthcheck.commands.internodesweep import _summary_event
    from healthcheck.decide.sweep import SweepReport

    outcome = sweep(["h0", "h1", "h2", "h3", "h4", "h5", "a0", "a1"])
    event = _summary_event(SweepReport("s1", outcome, {}, {}))
    assert "median busbw 380.0 GB/s (a100 200.0, h100 380.0); bad: none" in event.message, event.message
