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
