"""healthcheck/checks/nvswitch.py, pure: SXid events judged, on snapshot records (every real SXid
line: tests/readers/test_kernlog_checks.py)."""

from tests.lib.snapshots import catalogue_cases

# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("nvswitch"))
