"""repair.max_concurrent as a count or a share of the cluster's GPU nodes, and the repair state
--cluster shows for each node (decide.repair.cluster_state)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from healthcheck.config import ConfigError, RepairConfig, parse_config
from healthcheck.configsections import count_or_share
from healthcheck.decide import repair as rd
from healthcheck.decide.verdict import NodeState
from healthcheck.model import Action, Finding, GpuSnapshot, Severity

OURS = "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=SN2 ecc.volatile_uncorrected=1 epilog job=7"
DBE = Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=2, value=1, action=Action.RESET)
NOW = 1_800_000_000.0


def max_concurrent(value: str):
    return parse_config(f"[repair]\nmax_concurrent = {value}\n", "/etc/gh.toml").repair.max_concurrent


def gpu_node(i: int, state: str = "IDLE", reason=None, comment=None) -> NodeState:
    return NodeState(name=f"gpu-{i:03d}", state=state, reason=reason, gres="gpu:8", comment=comment)


def claim(i: int, at: str, state: str = "resetting") -> NodeState:
    return gpu_node(i, "IDLE+DRAIN", OURS, f"gpu-healthcheck: repair {state} gpus=2 at={at}")


def test_repair_max_concurrent_takes_a_count_a_share_or_a_percentage():
    assert max_concurrent("1") == 1 and isinstance(max_concurrent("1"), int)
    assert max_concurrent("3") == 3
    assert max_concurrent("0.05") == 0.05 and isinstance(max_concurrent("0.05"), float)
    assert max_concurrent('"5%"') == pytest.approx(0.05)
    assert max_concurrent('" 12.5 % "') == pytest.approx(0.125)
    assert max_concurrent('"100%"') == 1.0
    assert RepairConfig().max_concurrent == 1


@pytest.mark.parametrize("value", ["0", "-1", "100001", "1.0", "2.5", "0.0", "nan", "inf", "true",
                                   '"5"', '"abc"', '"0%"', '"150%"', '"%"', "[1]"])
def test_repair_max_concurrent_errors_name_the_file_and_key(value):
    with pytest.raises(ConfigError) as err:
        max_concurrent(value)
    assert str(err.value).startswith("/etc/gh.toml: repair.max_concurrent: "), str(err.value)


@given(st.one_of(st.text(max_size=12), st.floats(allow_nan=True), st.integers(), st.booleans(),
                 st.none(), st.lists(st.integers(), max_size=2)))
def test_repair_max_concurrent_parser_never_crashes_and_gives_a_count_or_a_share(value):
    counted, problem = count_or_share(value)
    if counted is None:
        assert problem
    elif isinstance(counted, float):
        assert 0.0 < counted <= 1.0 and math.isfinite(counted) and problem == ""
    else:
        assert 1 <= counted <= 100000 and not isinstance(counted, bool)


def test_repair_budget_is_a_share_of_the_gpu_nodes_at_least_one():
    cluster = [gpu_node(i) for i in range(100)] + [NodeState(name=f"cpu{i}", state="IDLE", gres="")
                                                   for i in range(900)]
    assert rd.repair_budget(cluster, 0.05) == 5  # of the 100 GPU nodes, not of all 1000
    assert rd.repair_budget(cluster, 0.001) == 1
    assert rd.repair_budget(cluster[:10], 0.05) == 1
    assert rd.repair_budget(cluster, 3) == 3
    assert rd.repair_budget(cluster, 1.0) == 100


def test_repair_share_lets_that_many_nodes_repair_at_once():
    """With 0.05 of 41 or 42 GPU nodes (2), a third node waits while two claim; with 1 it waits
    while one claims (the count it was before)."""
    this = gpu_node(0, "IDLE+DRAIN", OURS)
    others = [gpu_node(i) for i in range(3, 43)]
    gpus = [GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}") for i in range(4)]

    def plan(claims, share):
        cluster = [this, *claims, *others]
        return rd.decide_repair(this, cluster, [DBE], gpus, {}, NOW,
                                RepairConfig(enabled=True, max_concurrent=share), False)

    one = [claim(1, "2027-01-15T08:00:00Z")]
    two = one + [claim(2, "2027-01-15T08:00:01Z")]
    assert plan(one, 0.05).action == rd.RESET
    assert plan(two, 0.05).action == rd.NONE and plan(two, 0.05).state == "waiting_for_budget"
    assert plan(one, 1).state == "waiting_for_budget"


def test_repair_share_ranks_claims_past_the_share():
    claims = [claim(i, f"2027-01-15T08:00:0{i}Z") for i in range(4)]
    cluster = claims + [gpu_node(i) for i in range(4, 60)]
    assert rd.repairs_beyond_budget(cluster, 0.05) == ["gpu-003"]  # 5 % of 60 GPU nodes: 3
    assert rd.repairs_beyond_budget(cluster, 0.04) == ["gpu-002", "gpu-003"]  # 2.4: 2
    assert rd.repairs_beyond_budget(cluster, 1) == ["gpu-001", "gpu-002", "gpu-003"]


def test_repair_cluster_state_from_what_slurmctld_shows():
    rma = OURS.replace("=1 epilog", "=1 rma epilog")
    claimed = claim(1, "2027-01-15T08:00:00Z")
    validating = claim(2, "2027-01-15T08:00:00Z", "validating")
    waiting = gpu_node(3, "IDLE+DRAIN", OURS)
    busy = gpu_node(4, "MIXED+DRAIN", OURS)
    marked = gpu_node(5, "IDLE+DRAIN", rma)
    admin = gpu_node(6, "IDLE+DRAIN", "memtest by admin")
    healthy = gpu_node(7)
    cluster = [claimed, validating, waiting, busy, marked, admin, healthy]
    states = {n.name: rd.cluster_state(n, cluster, 1) for n in cluster}
    assert states == {"gpu-001": "resetting", "gpu-002": "validating", "gpu-003": "waiting_for_budget",
                      "gpu-004": "waiting_for_idle", "gpu-005": "rma", "gpu-006": None,
                      "gpu-007": None}
    # with room in the budget, a drained idle node is waiting for its next check
    assert rd.cluster_state(waiting, cluster, 2) == "drained"
    assert set(states.values()) - {None} <= set(rd.REPAIR_STATES)
