"""Deadlines: how long each outside call of a run may take (pure).

HealthCheckProgram (`--node --act`) must end within `act_budget_s`: Slurm kills it after 60 s,
and a killed run drains nothing.  A prolog or epilog that the SPANK plugin runs must end before
the plugin's own SIGTERM, which it passes as $GPU_HEALTHCHECK_DEADLINE_S (PrologEpilogTimeout
less a margin, or its timeout=).  Each door gets a share of the budget, and the CUDA probe gets
what is left once the calls after it are reserved.

    budget_s, problem = run_budget_s(health_check, config, environ)   # None: unbounded
    config = fit_to_budget(config, budget_s)           # NVML, scontrol, nvidia-smi deadlines shrunk
    cap = probe_cap_s(ends_at, now, scontrol_unanswered, config)
    timeout = probe_timeout(config, "full", largest_mib=81559, cap_s=cap)   # None: no time left
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Tuple

from ..config import Config

# Shares of `act_budget_s` that the NVML read and each scontrol call may take at most.  With the
# defaults (50 s): NVML 7.5 s, scontrol 7.5 s a call, and the probe at most what is left after
# two more scontrol calls and a margin for writing the report and exiting.
NVML_SHARE, SCONTROL_SHARE, MARGIN_S = 0.15, 0.15, 2.0
# and each nvidia-smi call of a repair (persistence mode off, the reset, persistence mode on):
# 10 s with the defaults, so all three fit with the claim's scontrol calls, and a hung
# `nvidia-smi -pm 1` cannot keep the run past slurmd's kill (act.nvidiasmi also stops each
# call at the run's own deadline)
SMI_SHARE = 0.2
# scontrol calls a run may still make after the probe: show nodes, then drain or resume
CALLS_AFTER_PROBE = 2
# The scontrol calls of one drain at most (act.slurm.Slurm.drain): show nodes, the drain, the
# budget's two re-reads (act.scontrol.hold_budget, up to 3 s apart), then the job's AdminComment,
# or, past the budget, the resume and the refused drain's note in the node's Comment.  The
# README's and slurm.conf.example's worst cases count these (tests/unit/test_drain_calls.py).
DRAIN_CALLS_MAX = 6
# The SPANK plugin's deadline for a prolog or epilog, in seconds from its start.
DEADLINE_VAR = "GPU_HEALTHCHECK_DEADLINE_S"


def run_budget_s(health_check: bool, config: Config,
                 environ: Mapping[str, str]) -> Tuple[Optional[float], Optional[str]]:
    """(seconds the whole run must end within, or None: unbounded; a problem with the
    plugin's deadline, or None).  `--node --act`: act_budget_s.  Otherwise the SPANK plugin's
    $GPU_HEALTHCHECK_DEADLINE_S where it is set (a Prolog= script has none: slurmd's
    PrologEpilogTimeout is not told to it)."""
    if health_check:
        return config.act_budget_s, None
    raw = environ.get(DEADLINE_VAR)
    if raw is None:
        return None, None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        return None, f"{DEADLINE_VAR}={raw!r} is not a number of seconds; ignored"
    return value, None


def fit_to_budget(config: Config, budget_s: Optional[float] = None) -> Config:
    """The config of a run that must end within `budget_s` (default `act_budget_s`): NVML,
    scontrol and nvidia-smi deadlines shrunk to their shares of it."""
    budget = config.act_budget_s if budget_s is None else budget_s
    return config._replace(nvml_timeout_s=min(config.nvml_timeout_s, NVML_SHARE * budget),
                           scontrol_timeout_s=min(config.scontrol_timeout_s, SCONTROL_SHARE * budget),
                           nvidia_smi_timeout_s=min(config.nvidia_smi_timeout_s, SMI_SHARE * budget))


def probe_cap_s(ends_at: float, now: float, scontrol_unanswered: bool, config: Config) -> float:
    """Seconds the probe may take: what is left of the budget, less room for the scontrol calls
    after it (none once scontrol proved unanswering: those then fail at once) and a margin."""
    calls = 0 if scontrol_unanswered else CALLS_AFTER_PROBE
    return ends_at - now - calls * config.scontrol_timeout_s - MARGIN_S


def probe_timeout(config: Config, level: str, largest_mib: int,
                  cap_s: Optional[float] = None) -> Optional[float]:
    """The probe children's deadline, or None when the budget leaves no time to probe at all
    (the GPUs are then not checked, unknown, never drained)."""
    timeout_s = config.probe.timeout_s
    if level == "full":
        # Reading every byte back takes time in proportion to the memory: allow 1 s per GiB
        # (host copies and memcmp run at several GiB/s) on top of the quick deadline.
        timeout_s += largest_mib / 1024.0
    if cap_s is not None and cap_s < timeout_s:
        if cap_s < MARGIN_S:
            return None
        timeout_s = cap_s
    return timeout_s
