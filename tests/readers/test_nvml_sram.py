"""healthcheck/read/nvml.py reads NVML's SRAM ECC error status (nvmlDeviceGetSramEccErrorStatus)
from the fake NVML: the field-diagnostics threshold flag that Xid 48's workflow asks for."""

from __future__ import annotations

from tests.lib.fakenode import nvml_read


def test_ecc_sram_threshold_flag_and_counts_are_read_per_gpu(node):
    gpus = nvml_read(node, "gpus = 4\ngpu.2.sram.threshold_exceeded = 1\n"
                           "gpu.2.sram.aggregate.uncorrected_parity = 2\n"
                           "gpu.2.sram.aggregate.uncorrected_secded = 3\n")
    assert [g["sram_threshold_exceeded"] for g in gpus] == [False, False, True, False]
    assert [g["sram_aggregate_uncorrected"] for g in gpus] == [0, 0, 5, 0]
    assert all(not g["query_errors"] for g in gpus)


def test_ecc_sram_threshold_is_not_available_before_ampere_or_with_ecc_off(node):
    gpus = nvml_read(node, "gpus = 3\ngpu.*.sram.threshold_exceeded = 1\n"
                           "gpu.0.architecture = volta\ngpu.1.ecc_mode = disabled\n"
                           "gpu.2.unsupported = SramEccErrorStatus\n")
    assert [g["sram_threshold_exceeded"] for g in gpus] == [None, None, None]
    assert all(not g["query_errors"] for g in gpus)


def test_ecc_sram_threshold_no_permission_is_no_fault_but_other_errors_are_reported(node):
    # NVML requires root for the call: a user's --node reads no flag, and that is not a fault
    gpus = nvml_read(node, "gpus = 2\ngpu.*.sram.threshold_exceeded = 1\n"
                           "gpu.*.failing = SramEccErrorStatus\ngpu.0.failing.error = 4\n"
                           "gpu.1.failing.error = 14\n")
    assert [g["sram_threshold_exceeded"] for g in gpus] == [None, None]
    assert gpus[0]["query_errors"] == []
    assert gpus[1]["query_errors"] == [["SramEccErrorStatus", "CORRUPTED_INFOROM"]]
