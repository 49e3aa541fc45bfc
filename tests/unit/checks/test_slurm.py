"""healthcheck/checks/slurm.py, pure: the job's GPU list and the prolog's baseline, on snapshot
records."""

from tests.lib.snapshots import catalogue_cases

# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("slurm"))
