"""After the deep tests NVML and the kernel log are read again: a DBE the memory test provokes
(gpu.N.mem.dbe_under_test: the fake's memory test raises the GPU's uncorrectable ECC count, makes
a row remap pending and logs the driver's Xid 48) is judged by the run that provoked it."""

from __future__ import annotations

DEEP = "gpus = 8\ngpu.*.memory.total_mib = 24\n"
CONFIG = "[probe]\nfull_fraction = 0.35\n[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


def _by(result, check):
    return [f for f in result.json["findings"] if f["check"] == check]


def test_a_dbe_the_memory_test_provokes_fails_that_gpu_in_the_same_run(node):
    node.write_config(CONFIG)
    scenario = DEEP + f"gpu.3.mem.dbe_under_test = 2\nkernel_log = {node.kernel_log}\n"
    result = node.run("--node", "--level", "deep", "--json", scenario=scenario, timeout=300)
    assert result.rc == 2, result.stderr
    [after] = _by(result, "deep.after")
    assert after["gpu"] == 3 and after["severity"] == "fail" and after["action"] == "reset"
    assert "volatile uncorrected ECC errors 0 -> 2" in after["message"]
    assert "row remap pending no -> yes" in after["message"] and "Xid 48 logged" in after["message"]
    # the counters after the tests are what every ECC and remap check judged
    assert [f["gpu"] for f in _by(result, "ecc.volatile_uncorrected")] == [3]
    assert [f["gpu"] for f in _by(result, "remap.pending")] == [3]
    assert 3 in {f["gpu"] for f in result.json["findings"] if f["check"].startswith("xid")}
    assert {f["gpu"] for f in result.json["findings"] if f["severity"] == "fail"} == {3}


def test_a_clean_deep_run_reads_nvml_again_and_finds_nothing_changed(node):
    node.write_config(CONFIG)
    result = node.run("--node", "--level", "deep", "--json", scenario=DEEP, timeout=300)
    assert result.rc == 0, result.stderr
    assert result.json["deep"]["after"]["ran"] and result.json["deep"]["after"]["error"] is None
    assert _by(result, "deep.after") == []
