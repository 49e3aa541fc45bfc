"""healthcheck/checks/deep.py, pure: each check on its snapshot record (tests/lib/snapshots.FAULTS);
the end-to-end cases on the fake GPUs are in tests/cli/test_deep_level.py and
tests/readers/test_dcgm_bridge.py."""

from tests.lib.snapshots import catalogue_cases

# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("deep"))
