"""healthcheck/checks/registry.py, pure: the catalogue (every check with a fault case and a
docstring), disabled checks, and the guard that makes a crashing check unknown."""

from healthcheck.checks import CATALOGUE, CheckContext, CheckSpec, run_checks
from healthcheck.config import ChecksConfig, Config
from healthcheck.model import Mode, Severity
from tests.lib.snapshots import FAULTS, NODE, faulty


def test_every_check_in_the_catalogue_has_a_fault_case_and_a_docstring():
    assert set(FAULTS) == set(CATALOGUE)
    for spec in CATALOGUE.values():
        assert spec.fn.__doc__ and len(spec.fn.__doc__.split()) > 10, spec.check_id


def test_disabled_check_does_not_run():
    config = Config(checks=ChecksConfig(disabled=("persistence_mode",)))
    found, _ = run_checks(faulty(dict(gpu=dict(persistence_mode=False))), CheckContext(config, Mode.NODE))
    assert not found


def test_a_crashing_check_becomes_unknown_never_fail(monkeypatch):
    def boom(gpu, node, ctx):
        raise RuntimeError("bug")
        yield

    monkeypatch.setitem(CATALOGUE, "ecc.mode", CheckSpec("ecc.mode", "gpu", boom))
    found, crashes = run_checks(NODE, CheckContext(Config(), Mode.PROLOG, selected=(0,)))
    assert [(f.check, f.severity) for f in found] == [("ecc.mode", Severity.UNKNOWN)]
    assert "RuntimeError: bug" in crashes[0].traceback
