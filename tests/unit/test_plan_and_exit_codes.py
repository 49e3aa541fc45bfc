"""decide.plan and decide.exitcodes: what each kind of run may do, and the status it ends with."""

from __future__ import annotations

import pytest

from healthcheck.config import Config, DrainConfig
from healthcheck.decide.exitcodes import job_report_exit, run_exit
from healthcheck.decide.plan import Step, next_step, plan_run
from healthcheck.model import Mode, NodeAction, Outcome, RunRequest, Verdict

REASON = "gpu-healthcheck: gpu2 ecc.volatile_uncorrected=3 prolog job=42"


@pytest.mark.parametrize("mode,act,report_only,reason,verdict,step", [
    (Mode.PROLOG, False, False, REASON, Verdict.FAIL, Step.DRAIN),
    (Mode.EPILOG, False, False, None, Verdict.PASS, Step.NONE),
    (Mode.NODE, False, False, REASON, Verdict.FAIL, Step.NONE),  # by hand: a report, no drain
    (Mode.NODE, True, False, REASON, Verdict.FAIL, Step.DRAIN),
    (Mode.NODE, True, False, None, Verdict.WARN, Step.RESUME),  # HealthCheckProgram may resume
    (Mode.NODE, True, False, None, Verdict.FAIL, Step.NONE),  # a failure that calls for no drain: no resume either
    (Mode.PROLOG, False, True, REASON, Verdict.FAIL, Step.REPORT_ONLY),
    (Mode.NODE, False, True, REASON, Verdict.FAIL, Step.NONE),  # report_only only matters when acting
])
def test_each_kind_of_run_takes_its_step(mode: Mode, act: bool, report_only: bool, reason: str,
                                         verdict: Verdict, step: str) -> None:
    config = Config(drain=DrainConfig(report_only=report_only))
    plan = plan_run(RunRequest(mode=mode, environ={}, act=act), config)
    assert next_step(plan, reason, verdict) == step
    assert plan.changes_node is (plan.acting and not report_only)


def test_only_the_prolog_records_a_baseline_and_only_the_epilog_consumes_it() -> None:
    prolog = plan_run(RunRequest(mode=Mode.PROLOG, environ={}), Config())
    epilog = plan_run(RunRequest(mode=Mode.EPILOG, environ={}), Config())
    assert prolog.records_baseline("42") and not prolog.records_baseline(None)
    assert not epilog.records_baseline("42")
    assert epilog.consumes_baseline("42", True) and not epilog.consumes_baseline("42", False)
    assert plan_run(RunRequest(mode=Mode.NODE, environ={}, gpus=(1,)), Config()).only_gpus == (1,)


@pytest.mark.parametrize("outcome,code", [
    (Outcome.APPLIED, 1), (Outcome.PENDING, 1), (Outcome.ADMIN_OWNED, 1), (Outcome.ALREADY_OURS, 1),
    (Outcome.REFUSED, 0), (Outcome.REPORT_ONLY, 0),  # the job may start: exit 1 would drain
])
def test_a_prolog_fails_exactly_when_the_job_must_not_start(outcome: Outcome, code: int) -> None:
    assert run_exit(Mode.PROLOG, Verdict.FAIL, REASON, NodeAction("none", REASON, outcome=outcome)) == code
    assert run_exit(Mode.PROLOG, Verdict.WARN, None, NodeAction("none")) == 0


def test_an_epilog_fails_exactly_when_it_drained_and_node_follows_the_verdict() -> None:
    assert run_exit(Mode.EPILOG, Verdict.FAIL, REASON, NodeAction("drain", REASON, outcome=Outcome.PENDING)) == 1
    assert run_exit(Mode.EPILOG, Verdict.FAIL, REASON, NodeAction("none", REASON, outcome=Outcome.REFUSED)) == 0
    assert [run_exit(Mode.NODE, v, None, NodeAction("none"))
            for v in (Verdict.PASS, Verdict.WARN, Verdict.FAIL, Verdict.UNKNOWN)] == [0, 1, 2, 3]


def test_job_report_status_comes_from_the_findings_not_the_wording() -> None:
    assert (job_report_exit(True), job_report_exit(False), job_report_exit(False, could_check=False)) == (2, 0, 3)
