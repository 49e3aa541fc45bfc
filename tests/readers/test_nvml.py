"""healthcheck/read/nvml.py against the fake NVML: one pass reads every key the checks need."""

from __future__ import annotations

from tests.lib.fakenode import nvml_read


def test_one_nvml_pass_reads_links_fabric_replays_hbm_and_histogram(node):
    gpus = nvml_read(node, "gpus = 4\ngpu.3.nvlink.down = 5\ngpu.2.nvlink.*.crc_errors = 7\n"
                           "gpu.2.nvlink.4.recovery_errors = 3\ngpu.1.fabric.state = in_progress\n"
                           "gpu.0.pcie.replay = 12\ngpu.0.memory_temperature_c = 96\n"
                           "gpu.1.remap.histogram = 2550,5,3,1,1\n"
                           "gpu.0.fabric.cluster_uuid = 01234567-89ab-cdef-0123-456789abcdef\n")
    g0, g1, g2, g3 = gpus
    assert (g0["pcie_replay"], g0["memory_temperature_c"], g0["memory_temperature_max_c"]) == (12, 96, 95)
    assert g0["fabric_state"] == 3 and g0["fabric_status"] == 0
    assert g0["fabric_cluster_uuid"] == "01234567-89ab-cdef-0123-456789abcdef"
    assert g1["fabric_state"] == 2 and g1["remap_histogram"] == [2550, 5, 3, 1, 1]
    assert (g2["nvlink_crc_errors"], g2["nvlink_recovery_errors"]) == (7 * 18, 3)
    assert g3["nvlink_links"] == 18 and g3["nvlink_down"] == [5]
    assert all(not g["query_errors"] for g in gpus)
