"""healthcheck/checks/deeptopo.py, pure: deep.nvlink_pair and deep.nvlink_peer on their snapshot
records (tests/lib/snapshots.FAULTS); the topologies end to end on the fake GPUs are in
tests/cli/test_deep_topology.py."""

from healthcheck.checks.deeptopo import links_text
from tests.lib.snapshots import catalogue_cases

globals().update(catalogue_cases("deeptopo"))


def test_links_text_joins_runs():
    assert links_text(tuple(range(12))) == "0-11"
    assert links_text((0, 2, 4, 5)) == "0, 2, 4-5"
    assert links_text(()) == ""
