"""The catalogue as `--list-checks` describes it, pure: threshold keys, listed severities and
actions against what each check reports (tests/cli/test_admin.py runs the options)."""

from __future__ import annotations

from healthcheck.checks import CATALOGUE
from healthcheck.config import describe_schema
from healthcheck.model import Action, Severity

CONFIG_KEYS = {key for key, _type, _default in describe_schema()}


def test_threshold_keys_are_real_config_keys_named_in_the_docstring_or_config() -> None:
    keyed = [spec for spec in CATALOGUE.values() if spec.threshold_key]
    assert keyed, "at least the [thresholds] keys belong to checks"
    for spec in keyed:
        assert spec.threshold_key in CONFIG_KEYS, (spec.check_id, spec.threshold_key)
    # Every [thresholds] key is some check's limit: otherwise it sets nothing.
    owners = {spec.threshold_key for spec in keyed}
    orphans = {k for k in CONFIG_KEYS if k.startswith("thresholds.")} - owners
    assert not orphans, f"no check names these thresholds as its key: {orphans}"


def test_a_fail_that_drains_is_listed_with_its_action() -> None:
    # What an admin reads before disabling a check: the ones that drain must say so.
    assert (CATALOGUE["ecc.volatile_uncorrected"].severity, CATALOGUE["ecc.volatile_uncorrected"].action) \
        == (Severity.FAIL, Action.RESET)
    assert CATALOGUE["remap.failure"].action is Action.RMA
    assert CATALOGUE["persistence_mode"].severity is Severity.INFO


def test_listed_severity_and_action_cover_what_each_check_reports() -> None:
    """--list-checks must not understate a check: each fault case in tests/lib/snapshots.FAULTS reports
    at most the listed severity, and a failing case that acts lists an action.  This is what
    catches a new check registered with the decorator's defaults (warn, none) that fails."""
    from tests.lib.snapshots import FAULTS, faulty, findings_of

    rank = {Severity.UNKNOWN: -1, Severity.INFO: 0, Severity.WARN: 1, Severity.FAIL: 2}
    for check_id, (change, mode, _severity, _action) in FAULTS.items():
        spec = CATALOGUE[check_id]
        for found in findings_of(faulty(change), mode, check_id):
            if found.severity is Severity.UNKNOWN:
                continue  # "could not check" is open to every check
            assert rank[found.severity] <= rank[spec.severity], (check_id, found.severity, spec.severity)
            if found.severity is Severity.FAIL and found.action is not Action.NONE:
                assert spec.action is not Action.NONE, (check_id, found.action)
