"""decide/fabricfloor.py and the per-model floors in decide/sweep.py: a node's GPU model from
its Gres= as `scontrol show nodes` prints it, the floor of a job over nodes of several models
(the lowest), and the sweep and gang decisions judged against it (pure)."""

from __future__ import annotations

import pytest

from healthcheck.configsections import FabricConfig
from healthcheck.decide.fabricfloor import floor_for, gpu_types, node_floor, node_floors, parse_floors
from healthcheck.decide.gang import FAILED, PASSED, GangPlan
from healthcheck.decide.sweep import Job, JobResult, SweepPlanner, Thresholds, failure, fabric_thresholds

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
    fabric = FabricConfig(busbw_floor_gbps=50.0, median_ratio_fail=0.6, rail_floor_gbps=300.0,
                          floors=("h100:busbw_gbps=360",))
    thresholds = fabric_thresholds(fabric, {"gpu-a": "gpu:h100:8(S:0-1)", "gpu-b": "gpu:8"})
    assert thresholds == Thresholds(50.0, 0.6, 300.0, (("gpu-a", 360.0),))
    assert fabric_thresholds(FabricConfig(), {"gpu-a": "gpu:h100:8"}) == Thresholds(0.0, 0.7, 0.0)


def test_fabric_floor_the_sweep_finds_an_h100_node_below_its_models_floor() -> None:
    """All eight pairs run near the median (the median rule sees nothing), but gpu-c's H100
    pairs stay below the H100 floor while the A100 nodes' pairs are above theirs."""
    nodes = [f"gpu-{c}" for c in "abcdefgh"]
    gres = {n: "gpu:h100:8(S:0-1)" if n in ("gpu-a", "gpu-b", "gpu-c", "gpu-d") else "gpu:a100:8(S:0-1)"
            for n in nodes}
    thresholds = fabric_thresholds(FabricConfig(floors=("h100:busbw_gbps=360", "a100:busbw_gbps=150")), gres)
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
