"""The deep level's sustained load end to end: the real CLI on 8 fake GPUs, `[deep] duration_s = 3`.
The fake's kernels take their simulated time (cuEventQuery says not ready until then), and it
records every launch in cuda.launch_log: the tests read what ran from there and from the
report, never from a clock of their own."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.conftest import Node

COMPUTE = ("hc_fma", "hc_mma_bf16", "hc_mma_f16")
# cuda.pause_on_stall_s: the fake GPUs do not run while the host stalls the process, so a
# stall longer than the queue no longer lets a GPU idle and empty the load trace: its length
# depends on the load's device time, not on how busy the host is
SCENARIO = """gpus = 8
cuda.pause_on_stall_s = 0.2
gpu.*.memory.total_mib = 24
gpu.2.perf.throttle_under_load = hw_slowdown
gpu.2.perf.throttle_after_s = 1
gpu.4.compute.wrong = 3
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory, fakegpu):
    """One deep run of the node for every test here (it lasts 3 s of load per GPU)."""
    tmp = tmp_path_factory.mktemp("deepload")
    node = Node(tmp, fakegpu)
    node.write_config("[deep]\nbandwidth_mib = 4\nduration_s = 3\n[dcgm]\nenabled = false\n")
    log = tmp / "launches"
    result = node.run("--node", "--level", "deep", "--json",
                      scenario=SCENARIO + f"cuda.launch_log = {log}\n", timeout=300)
    launches = defaultdict(list)
    for line in log.read_text().splitlines():
        fields = dict(f.split("=", 1) for f in line.split())
        launches[int(fields["gpu"])].append((fields["kernel"], float(fields["seconds"])))
    return result, launches


def _findings(result, check):
    return [f for f in result.json["findings"] if f["check"] == check]


def test_the_load_lasts_duration_s_on_every_gpu_and_every_launch_is_checked(run):
    result, launches = run
    assert result.rc == 2, result.stderr  # GPU 4's wrong answers
    rows = {r["gpu"]: r for r in result.json["deep"]["gpus"]}
    assert sorted(launches) == list(range(8))
    for gpu, ran in launches.items():
        compute = [s for k, s in ran if k in COMPUTE]
        assert sum(compute) >= 3.0, (gpu, sum(compute))  # the fake's record: >= 3 s of load
        assert {k for k, _ in ran} >= set(COMPUTE)  # FMA and both tensor-core GEMMs (sm_90)
        # one hc_check after each compute launch, into that launch's counter
        assert sum(k == "hc_check" for k, _ in ran) == len(compute) == rows[gpu]["launches"]
        assert rows[gpu]["load_s"] >= 3.0
        # NVML read while the load ran, every 100 ms: the fake's kernels kept the GPU busy for
        # their simulated time, so there was a trace to take (an instant fake gives one sample)
        assert len(rows[gpu]["load_trace"]) >= 10, rows[gpu]["load_trace"]
        assert round(rows[gpu]["gflops"]) == 55000 and round(rows[gpu]["tensor_gflops"]) == 600000


def test_a_gpu_that_throttles_after_one_second_of_load_is_named_with_its_reason(run):
    result, _ = run
    [throttle] = _findings(result, "deep.throttle")
    assert throttle["gpu"] == 2 and throttle["severity"] == "warn"
    assert "HW_SLOWDOWN (from " in throttle["message"] and "SM clock 990 MHz of 1980 MHz" in throttle["message"]
    row = next(r for r in result.json["deep"]["gpus"] if r["gpu"] == 2)
    # not at first: the reason appears only after a second of continuous load
    assert row["load_trace"][0][4] == 0 and row["reasons_first_s"]["0x8"] >= 1.0
    assert row["sm_clock_sustained_mhz"] == 990
    [clock] = _findings(result, "deep.clock")
    assert clock["gpu"] == 2 and "held down by HW_SLOWDOWN" in clock["message"]
    assert "50 % of its 7 siblings' median 1,980 MHz" in clock["message"]


def test_wrong_answers_fail_only_that_gpu_with_action_rma(run):
    result, _ = run
    [wrong] = _findings(result, "deep.compute_wrong")
    assert wrong["gpu"] == 4 and wrong["severity"] == "fail" and wrong["action"] == "rma"
    assert wrong["value"] == 3 and "3 wrong element(s) in one launch" in wrong["message"]
    row = next(r for r in result.json["deep"]["gpus"] if r["gpu"] == 4)
    assert row["wrong_launches"] == row["launches"] and row["wrong_elements"] == 3 * row["launches"]
    assert result.json["verdict"] == "fail"
    others = [r for r in result.json["deep"]["gpus"] if r["gpu"] != 4]
    assert all(r["wrong_elements"] == 0 for r in others)


def test_a_reading_taken_after_a_host_stall_let_the_gpu_idle_is_not_counted_as_load(tmp_path, fakegpu):
    """GPU 1's first SM clock read under load stalls on the host for 1 s (the fake's
    nvml.clock_stall_s), longer than the queued work lasts, and answers for an idle GPU (345 MHz).
    The trace keeps only readings taken while the GPU had work queued, so neither that reading nor
    a warning from it counts: the sustained load ran at 1,980 MHz throughout."""
    node = Node(tmp_path, fakegpu)
    node.write_config("[deep]\nbandwidth_mib = 4\nduration_s = 2\n[dcgm]\nenabled = false\n")
    result = node.run("--node", "--level", "deep", "--json", timeout=300,
                      scenario="gpus = 2\ngpu.*.memory.total_mib = 24\ngpu.1.nvml.clock_stall_s = 1\n")
    rows = {r["gpu"]: r for r in result.json["deep"]["gpus"]}
    assert {s[1] for s in rows[1]["load_trace"]} == {1980}, rows[1]["load_trace"]
    assert rows[1]["sm_clock_mhz"] == 1980 and rows[1]["load_s"] >= 2.0
    # the stall is in the trace as a gap (from the load's start, where it comes first): a
    # second without a reading
    times = [0.0] + [s[0] for s in rows[1]["load_trace"]]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) >= 1.0, rows[1]["load_trace"]
    assert not [f for f in result.json["findings"] if f["check"].startswith("deep.")], result.json["findings"]
    assert result.rc == 0, result.stderr
