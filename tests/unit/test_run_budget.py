"""The run's budget: `act_budget_s` under `--node --act`, the SPANK plugin's deadline
($GPU_HEALTHCHECK_DEADLINE_S) in a prolog or epilog, none otherwise; the deadlines shrink to it."""

from __future__ import annotations

from healthcheck.config import Config
from healthcheck.decide.budget import DEADLINE_VAR, fit_to_budget, probe_cap_s, run_budget_s


def test_the_plugins_deadline_bounds_a_prolog_and_act_budget_bounds_a_health_check() -> None:
    config = Config()
    assert run_budget_s(False, config, {DEADLINE_VAR: "12"}) == (12.0, None)
    assert run_budget_s(False, config, {}) == (None, None)  # Prolog= script: slurmd tells it nothing
    assert run_budget_s(True, config, {DEADLINE_VAR: "12"}) == (50.0, None)


def test_a_malformed_deadline_is_named_and_ignored() -> None:
    for raw in ("soon", "0", "-3", "nan", "inf", ""):
        budget, problem = run_budget_s(False, Config(), {DEADLINE_VAR: raw})
        assert budget is None and problem and DEADLINE_VAR in problem and repr(raw) in problem


def test_a_short_deadline_shrinks_nvml_scontrol_and_the_probe_to_fit() -> None:
    fitted = fit_to_budget(Config(), 20.0)
    assert fitted.nvml_timeout_s == 3.0 and fitted.scontrol_timeout_s == 3.0
    # 20 s from the start, 1 s gone: the probe leaves room for two scontrol calls and a margin
    assert probe_cap_s(20.0, 1.0, False, fitted) == 20.0 - 1.0 - 2 * 3.0 - 2.0
    assert fit_to_budget(Config(), 115.0) == Config()  # the defaults fit PrologEpilogTimeout 120
