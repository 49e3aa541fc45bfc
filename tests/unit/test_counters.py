"""decide/counters.py: the counter rules per GPU serial over our own history, and the history
line's "gpus" block (act/history.py) they read."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from healthcheck.act.history import build_record
from healthcheck.configsections import SuspectsConfig
from healthcheck.decide.counters import counter_samples, counter_suspects, growth
from healthcheck.decide.suspects import find_suspects
from healthcheck.fleetmodel import CounterSample

CFG = SuspectsConfig()
T0 = 1_796_000_000.0
HOUR = 3600.0


def _s(t: float, serial: str, node: str = "gpu-01", load: bool = True, sbe: Optional[int] = 0,
       retired: Optional[int] = 0, remap_low: Optional[int] = 0, pcie: Optional[int] = 0,
       nvlink: Optional[int] = 0, gpu: int = 0) -> CounterSample:
    return CounterSample(T0 + t, node, serial, gpu, load, sbe, retired, remap_low, pcie, nvlink)


def _kinds(samples: List[CounterSample], until: float = T0 + 100 * HOUR, cfg: SuspectsConfig = CFG) -> List[tuple]:
    return [(s.kind, s.serial, s.node) for s in counter_suspects(samples, cfg, until)]


def test_growth_counts_a_reset_from_zero_and_bridges_missing_values() -> None:
    assert growth([5, 7, 7, 10]) == 5
    assert growth([100, 120, 3, 8]) == 20 + 3 + 5  # the driver reloaded after 120
    assert growth([None, 4, None, 9]) == 5
    assert growth([]) == 0 and growth([None]) == 0


def test_steady_counters_name_nothing() -> None:
    samples = [_s(h * HOUR, f"S{g}", sbe=5 * h, gpu=g) for h in range(10) for g in range(4)]
    assert _kinds(samples) == []


def test_retired_pages_remap_headroom_and_replays_growing_name_the_serial() -> None:
    samples = [_s(0, "A", retired=2, remap_low=0, pcie=0, nvlink=10),
               _s(HOUR, "A", retired=3, remap_low=1, pcie=60, nvlink=70),
               _s(2 * HOUR, "A", retired=3, remap_low=1, pcie=5, nvlink=120)]  # pcie: reset, then 5
    got = counter_suspects(samples, CFG, T0 + 3 * HOUR)
    assert [(s.kind, s.serial) for s in got] == [("remap_headroom", "A"), ("retired_pages", "A"),
                                                 ("nvlink_replay", "A")]
    retired = next(s for s in got if s.kind == "retired_pages")
    assert retired.evidence["retired_growth"] == 1 and retired.evidence["first"] == 2
    assert retired.evidence["last"] == 3 and retired.evidence["threshold"] == CFG.retired_pages_growth
    # PCIe grew 65 (60, then 5 after a reset): under the 100 of pcie_replay_growth
    assert _kinds(samples, T0 + 3 * HOUR, CFG._replace(pcie_replay_growth=65))[2] == ("pcie_replay", "A", "gpu-01")


def test_samples_outside_the_window_do_not_count() -> None:
    samples = [_s(0, "A", retired=0), _s(HOUR, "A", retired=5)]
    assert _kinds(samples, until=T0 + HOUR + CFG.counter_window_s + 1) == []
    assert _kinds(samples, until=T0 + HOUR) == [("retired_pages", "A", "gpu-01")]


def test_ecc_sbe_rate_under_load_against_the_siblings() -> None:
    samples = []
    for h in range(6):
        samples.append(_s(h * HOUR, "HOT", sbe=400 * h, gpu=1))
        for g in (0, 2, 3):
            samples.append(_s(h * HOUR, f"S{g}", sbe=3 * h, gpu=g))
    got = counter_suspects(samples, CFG, T0 + 6 * HOUR)
    assert [(s.kind, s.serial) for s in got] == [("ecc_sbe_rate", "HOT")]
    e = got[0].evidence
    assert e["sbe_under_load"] == 2000 and e["sbe_per_hour"] == 400.0
    assert e["siblings_median_per_hour"] == 3.0 and e["siblings"] == 3 and e["gpu"] == 1


def test_ecc_sbe_rate_counts_only_intervals_under_load() -> None:
    """The hot GPU's errors came while it was idle (the interval ends without a job on it):
    no rate under load, no suspect."""
    samples = []
    for h in range(6):
        samples.append(_s(h * HOUR, "HOT", sbe=400 * h, gpu=1, load=False))
        samples.append(_s(h * HOUR, "S0", sbe=3 * h, gpu=0))
    assert _kinds(samples) == []


def test_ecc_sbe_rate_needs_siblings_and_enough_errors() -> None:
    alone = [_s(h * HOUR, "HOT", sbe=400 * h) for h in range(6)]
    assert _kinds(alone) == []  # no other GPU at the node to compare with
    few = [_s(h * HOUR, "HOT", sbe=10 * h, gpu=1) for h in range(6)] + [_s(h * HOUR, "S0", sbe=0) for h in range(6)]
    assert _kinds(few) == []  # 50 errors: under sbe_min_errors


def test_a_gpu_s_record_follows_its_serial_to_another_node() -> None:
    """Serial A retired a page on gpu-01, was moved to gpu-09 and retired another: one serial,
    named at the node it is at now, with both nodes in its evidence."""
    samples = [_s(0, "A", node="gpu-01", retired=4), _s(HOUR, "A", node="gpu-01", retired=4),
               _s(5 * HOUR, "A", node="gpu-09", retired=5)]
    got = counter_suspects(samples, CFG._replace(retired_pages_growth=1), T0 + 6 * HOUR)
    assert [(s.kind, s.serial, s.node) for s in got] == [("retired_pages", "A", "gpu-09")]
    assert got[0].evidence["nodes"] == ["gpu-01", "gpu-09"]


def _report(mode: str, gpus: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"mode": mode, "node": "gpu-01", "host": "gpu-01", "verdict": "pass", "gpus": gpus}


def _gpu(index: int, serial: Optional[str], **counters: Any) -> Dict[str, Any]:
    return {"index": index, "serial": serial, "under_test": index == 0, "lost": False,
            "ecc_aggregate_corrected": counters.get("sbe"), "retired_sbe": counters.get("rs"),
            "retired_dbe": counters.get("rd"), "pcie_replay": counters.get("pcie"),
            "remap_histogram": counters.get("hist"),
            "nvlink": None if counters.get("nvl") is None else {"replay_errors": counters["nvl"]}}


def test_history_line_carries_each_serial_s_counters_and_reads_back() -> None:
    hist = {"max": 2550, "high": 0, "partial": 0, "low": 8, "none": 2}
    rec = build_record(_report("epilog", [_gpu(0, "S0", sbe=7, rs=1, rd=2, pcie=3, hist=hist, nvl=4),
                                          _gpu(1, "S1"), _gpu(2, None, sbe=1)]), [], T0)
    assert rec["gpus"] == {
        "S0": {"gpu": 0, "load": True, "sbe": 7, "retired": 3, "remap_low": 10, "pcie_replay": 3, "nvlink_replay": 4},
        "S1": {"gpu": 1, "load": False, "sbe": None, "retired": None, "remap_low": None, "pcie_replay": None,
               "nvlink_replay": None}}
    assert counter_samples([rec]) == [
        CounterSample(T0, "gpu-01", "S0", 0, True, 7, 3, 10, 3, 4),
        CounterSample(T0, "gpu-01", "S1", 1, False, None, None, None, None, None)]
    # a node check (not an epilog) ran no job: no interval under load ends there
    assert build_record(_report("node", [_gpu(0, "S0", sbe=7)]), [], T0)["gpus"]["S0"]["load"] is False


def test_old_history_lines_and_garbage_give_no_samples() -> None:
    old = {"schema": 1, "epoch": T0, "node": "gpu-01", "findings": [], "events": []}
    assert counter_samples([old, {"epoch": "x", "gpus": {}}, {"epoch": T0, "node": "n", "gpus": []},
                            {"epoch": T0, "node": "n", "gpus": {"S": "nope"}}]) == []  # type: ignore[list-item]
    bad = {"epoch": T0, "node": "n", "gpus": {"S": {"gpu": "0", "load": "yes", "sbe": -1, "retired": True}}}
    assert counter_samples([bad]) == [CounterSample(T0, "n", "S", None, False, None, None, None, None, None)]


def test_find_suspects_adds_the_counter_rules_after_the_history_s() -> None:
    samples = [_s(0, "A", retired=0), _s(HOUR, "A", retired=1)]
    got = find_suspects([], [], CFG, T0 + 2 * HOUR, samples)
    assert [(s.kind, s.serial) for s in got] == [("retired_pages", "A")]
    assert got[0].as_json()["serial"] == "A" and got[0].as_json()["evidence"]["retired_growth"] == 1
