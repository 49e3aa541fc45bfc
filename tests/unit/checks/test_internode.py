"""The multi-node checks (checks/internode.py) on plain records: what the search for the bad
node concluded of one node becomes that node's Finding, with the node and its partners; they are
listed beside the catalogue and never run over a node's snapshot."""

from __future__ import annotations

from healthcheck.checks import CATALOGUE, INTERNODE
from healthcheck.checks.internode import check_fabric_busbw, check_fabric_gang
from healthcheck.historyline import finding_item
from healthcheck.model import Action, Severity
from healthcheck.netmodel import NodeOutcome

BAD = NodeOutcome("gpu-c", "bad", 41.2, ("gpu-a", "gpu-e"), "busbw=41.2<100")
TRANSIENT = NodeOutcome("gpu-d", "transient", 41.2, ("gpu-b",), "busbw=41.2<100; passed with gpu-a,gpu-f")
UNKNOWN = NodeOutcome("gpu-f", "unknown", None, (), "hang: ended by its time limit with gpu-g; no known-good node to tell")
PASSED = NodeOutcome("gpu-a", "pass")


def test_fabric_busbw_names_the_bad_node_and_its_partners_and_drains() -> None:
    [found] = check_fabric_busbw(BAD)
    assert (found.check, found.severity, found.action) == ("fabric.busbw", Severity.FAIL, Action.DRAIN)
    assert (found.node, found.partners, found.value, found.gpu) == ("gpu-c", ("gpu-a", "gpu-e"), 41.2, None)
    assert found.message == "gpu-c: bad: busbw=41.2<100"


def test_fabric_busbw_transient_is_history_and_unknown_never_drains() -> None:
    assert [(f.severity, f.action) for f in check_fabric_busbw(TRANSIENT)] == [(Severity.INFO, Action.NONE)]
    assert [(f.severity, f.action) for f in check_fabric_busbw(UNKNOWN)] == [(Severity.UNKNOWN, Action.NONE)]


def test_fabric_busbw_a_passing_node_has_no_finding_unless_re_tested() -> None:
    assert list(check_fabric_busbw(PASSED)) == []
    [found] = check_fabric_busbw(PASSED, retest=True)
    assert (found.severity, found.message) == (Severity.INFO, "gpu-a: pass: ")


def test_fabric_busbw_history_item_keeps_the_sweeps_keys() -> None:
    [found] = check_fabric_busbw(BAD)
    assert finding_item(found, retest=False) == {
        "check": "fabric.busbw", "severity": "fail", "retest": False, "gpu": None, "node": "gpu-c",
        "value": 41.2, "message": "gpu-c: bad: busbw=41.2<100", "partners": ["gpu-a", "gpu-e"]}


def test_fabric_gang_fails_the_bad_node_and_names_a_suspect_unknown() -> None:
    [bad] = check_fabric_gang(BAD)
    assert (bad.severity, bad.action, bad.message) == (Severity.FAIL, Action.DRAIN, "gpu-c: busbw=41.2<100")
    assert finding_item(bad) == {"check": "fabric.gang", "severity": "fail", "gpu": None, "node": "gpu-c",
                                 "value": 41.2, "partners": ["gpu-a", "gpu-e"],
                                 "message": "gpu-c: busbw=41.2<100"}
    [suspect] = check_fabric_gang(UNKNOWN)
    assert (suspect.severity, suspect.action) == (Severity.UNKNOWN, Action.NONE)
    assert list(check_fabric_gang(TRANSIENT)) == list(check_fabric_gang(PASSED)) == []


def test_fabric_busbw_and_fabric_gang_sit_beside_the_catalogue_never_in_it() -> None:
    """run_checks runs CATALOGUE over a snapshot, and `[checks] disabled` names its ids: the
    multi-node checks have no snapshot, so they are neither."""
    assert set(INTERNODE) == {"fabric.busbw", "fabric.gang"}
    assert not set(INTERNODE) & set(CATALOGUE)
    assert {spec.scope for spec in INTERNODE.values()} == {"internode"}
