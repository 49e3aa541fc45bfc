"""healthcheck/checks/floors.py, pure: deep.floors on its snapshot record (tests/lib/snapshots.FAULTS);
the floors themselves end to end on the fake GPUs are in tests/cli/test_deep_floors.py."""

from tests.lib.snapshots import catalogue_cases

globals().update(catalogue_cases("floors"))
