"""--level deep end to end: the real CLI on 8 fake GPUs whose libcuda.so.1 runs the host build
of the kernels the package ships as PTX (tests/fakegpu/cuda_deep.c)."""

from __future__ import annotations

# Small boards: the fake runs the kernels over host copies of the GPU's memory (64 sweeps of
# walking ones among them).  cuda.pause_on_stall_s: a host stall does not let a fake GPU's
# queued work drain, so the clock trace (the throttle test's) does not depend on the host.
DEEP = """gpus = 8
gpu.*.memory.total_mib = 24
cuda.pause_on_stall_s = 0.2
"""
# [probe] full_fraction: the memory test sweeps a third of each board (4 MiB, past the 2 MiB
# the stuck-bit case needs); on the fake the deep level's cost grows with what it sweeps.
CONFIG = "[probe]\nfull_fraction = 0.35\n[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


def deep_run(node, scenario: str):
    node.write_config(CONFIG)
    return node.run("--node", "--level", "deep", "--json", scenario=DEEP + scenario, timeout=300)


def by_check(result, check):
    return [f for f in result.json["findings"] if f["check"] == check]


def test_deep_healthy_node_passes_with_every_figure_in_the_json(node):
    result = deep_run(node, "")
    assert result.rc == 0, result.stderr
    doc = result.json
    assert doc["verdict"] == "pass", doc["findings"]
    assert doc["level"] == "deep"
    rows = doc["deep"]["gpus"]
    assert sorted(r["gpu"] for r in rows) == list(range(8))
    for row in rows:
        assert row["status"] == "ok" and row["memory_errors"] == 0 and row["memory_bytes"] > 0
        # the fake's timeline follows the scenario's defaults (tests/fakegpu/README.md)
        assert round(row["hbm_read_gbps"]) == 3000 and round(row["hbm_copy_gbps"]) == 3000
        assert round(row["h2d_gbps"]) == 50 and round(row["d2h_gbps"]) == 50
        assert round(row["gflops"]) == 55000
        assert set(row["times_s"]) == {"memory", "hbm_read", "hbm_copy", "h2d", "d2h", "compute"}
    peers = doc["deep"]["peers"]
    assert [(p["src"], p["dst"], p["via"]) for p in peers] == [(i, (i + 1) % 8, "nvswitch") for i in range(8)]
    assert all(p["links"] == list(range(18)) for p in peers)
    assert all(round(p["gbps"]) == 370 for p in peers)
    assert not [f for f in doc["findings"] if f["check"].startswith("deep.")]


def test_deep_hbm_names_the_slow_gpu_its_value_and_the_median(node):
    result = deep_run(node, "gpu.3.perf.hbm_gbps = 1800\n")  # 60 % of its siblings' 3000
    hbm = by_check(result, "deep.hbm")
    assert {f["gpu"] for f in hbm} == {3}, result.json["findings"]
    read = next(f for f in hbm if "HBM read" in f["message"])
    assert read["severity"] == "fail" and read["action"] == "reset"
    assert "HBM read 1,800 GB/s, 60 % of its 7 siblings' median 3,000 GB/s (limit 70 %)" in read["message"]
    assert read["message"].startswith("GPU 3 (")
    assert result.json["verdict"] == "fail"


def test_deep_memory_stuck_bit_fails_rma_naming_address_and_bit(node):
    result = deep_run(node, "gpu.5.mem.stuck_bits = 0x200043:3\n")
    memory = by_check(result, "deep.memory")
    assert [f["gpu"] for f in memory] == [5], result.json["findings"]
    f = memory[0]
    assert f["severity"] == "fail" and f["action"] == "rma"
    assert "byte offset 0x200043 bit 3" in f["message"]
    assert "first at offset 0x200040" in f["message"]
    row = next(r for r in result.json["deep"]["gpus"] if r["gpu"] == 5)
    first = row["memory_first_errors"][0]
    assert first["offset"] == 0x200040 and first["expected"] ^ first["actual"] == 1 << 27


def test_deep_throttle_names_the_gpu_and_the_reason(node):
    result = deep_run(node, "gpu.1.perf.throttle_under_load = hw_slowdown,sw_thermal\n")
    throttle = by_check(result, "deep.throttle")
    assert [f["gpu"] for f in throttle] == [1], result.json["findings"]
    assert throttle[0]["severity"] == "warn"
    assert "HW_SLOWDOWN" in throttle[0]["message"] and "SW_THERMAL" in throttle[0]["message"]
    assert "SM clock 990 MHz of 1980 MHz" in throttle[0]["message"]


def test_deep_pcie_and_peer_and_compute_slow_gpus_are_named(node):
    result = deep_run(node, "gpu.2.perf.h2d_gbps = 20\ngpu.4.nvlink.peer_gbps = 100\n"
                            "gpu.6.perf.gflops = 45000\n")
    assert {f["gpu"] for f in by_check(result, "deep.pcie")} == {2}
    assert "host-to-device 20 GB/s" in by_check(result, "deep.pcie")[0]["message"]
    # GPU 4's slow side slows its copies to GPU 5 and from GPU 3 through the NVSwitches: slow
    # with every peer it has, GPU 4 alone is named; the pairs are not warned on their own
    assert [(f["gpu"], f["severity"], f["action"]) for f in by_check(result, "deep.nvlink_peer")] == [
        (4, "fail", "reset")]
    assert not by_check(result, "deep.nvlink_pair")
    compute = by_check(result, "deep.compute")
    assert [f["gpu"] for f in compute] == [6] and compute[0]["severity"] == "warn"


def test_deep_floor_fails_a_node_whose_gpus_are_all_slow(node):
    result = deep_run(node, "gpu.*.perf.hbm_gbps = 1500\n")  # below DCGM's 1,905 GB/s for the H100 SXM
    hbm = by_check(result, "deep.hbm")
    assert {f["gpu"] for f in hbm} == set(range(8))
    assert all("below its floor 1,905 GB/s (DCGM's memory_bandwidth minimum for SKU 2330" in f["message"]
               for f in hbm)


def test_deep_level_is_offered_by_the_cli(node):
    result = node.run("--help")
    assert "deep" in result.stdout
