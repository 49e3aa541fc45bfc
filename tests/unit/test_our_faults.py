"""Our faults are ours (issue 13), pure: the act budget shrinks our own deadlines to fit Slurm's
(tests/cli/test_our_faults.py: the rest, through the real CLI)."""

from __future__ import annotations


def test_the_act_budget_shrinks_nvml_and_scontrol_deadlines_to_fit():
    from healthcheck.config import Config
    from healthcheck.decide.budget import fit_to_budget
    fitted = fit_to_budget(Config())  # 50 s: what Slurm's 60 s HealthCheckProgram limit allows
    assert fitted.nvml_timeout_s == 7.5 and fitted.scontrol_timeout_s == 7.5
    assert fit_to_budget(Config(act_budget_s=600, nvml_timeout_s=3)).nvml_timeout_s == 3
