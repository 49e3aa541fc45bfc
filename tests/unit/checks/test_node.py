"""healthcheck/checks/node.py, pure: NVML initialisation, the GPU count and lost GPUs, on snapshot
records."""

from healthcheck.model import Mode, NodeSnapshot, Severity
from tests.lib.snapshots import catalogue_cases, findings_of


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("node"))


def test_nvml_init_no_gpus_node_passes_with_info():
    node = NodeSnapshot(host="n", nvml_error="LIBRARY_NOT_FOUND", sysfs_gpus=())
    [finding] = findings_of(node, Mode.NODE, "nvml.init")
    assert finding.severity is Severity.INFO and "no GPUs" in finding.message
    node = node._replace(sysfs_gpus=("0000:41:00.0",))
    [finding] = findings_of(node, Mode.NODE, "nvml.init")
    assert finding.severity is Severity.FAIL


def test_gpu_count_names_each_missing_gpu_by_pci_and_serial_and_the_rest_stay_unnamed():
    from healthcheck.config import Config
    from healthcheck.model import GpuSnapshot
    from tests.lib.snapshots import found as found_in

    present = tuple(GpuSnapshot(index=i, serial=f"SN{i}", pci_bus_id=f"00000000:{0x18 + 16 * i:02X}:00.0")
                    for i in range(6))
    gone = GpuSnapshot(index=6, serial="SN6", pci_bus_id="00000000:78:00.0")
    node = NodeSnapshot(host="n", gpus=present, sysfs_gpus=(), missing_gpus=(gone,))
    # expected_gpus = 8: one of the two missing GPUs is known, the other is not
    found = [f for f in found_in(node, Mode.NODE, "gpu.count", Config(expected_gpus=8)) if f.drains]
    assert [(f.pci, f.serial) for f in found] == [("00000000:78:00.0", "SN6"), (None, None)], found
    assert "the GPU at 00000000:78:00.0 (SN SN6; GPU 6 when last listed) is missing" in found[0].message
