"""healthcheck/checks/board.py, pure: thermal, HBM temperature, PCIe replays and width, clock
slowdowns, persistence mode, on snapshot records."""

from __future__ import annotations

import pytest

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config, Thresholds
from healthcheck.model import Action, Mode, Severity
from tests.lib.snapshots import catalogue_cases, epilog, faulty, findings_of, found, gpu

FAIL, WARN, INFO, UNKNOWN = Severity.FAIL, Severity.WARN, Severity.INFO, Severity.UNKNOWN


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("board"))


def test_pcie_width_degraded_warns_below_the_configured_minimum():
    config = Config(thresholds=Thresholds(pcie_width_min=16))
    found, _ = run_checks(faulty(dict(gpu=dict(pcie_width_current=8))), CheckContext(config, Mode.NODE))
    assert [(f.check, f.severity) for f in found] == [("pcie.width_degraded", Severity.WARN)]


def test_persistence_mode_boot_grace_holds_it_until_it_has_passed():
    """The shared boot grace (registry.in_boot_grace, `boot_grace_s`): state that settles after
    the driver loads is not judged inside it, and is judged after it or when the age is unknown."""
    from healthcheck.checks.registry import in_boot_grace
    off = faulty(dict(gpu=dict(persistence_mode=False)))
    ctx = CheckContext(Config(boot_grace_s=300), Mode.NODE)
    young, old = off._replace(driver_age_s=42.0), off._replace(driver_age_s=301.0)
    assert in_boot_grace(young, ctx) and not in_boot_grace(old, ctx) and not in_boot_grace(off, ctx)
    assert [f.check for f in run_checks(young, ctx)[0]] == []
    assert [f.check for f in run_checks(old, ctx)[0]] == ["persistence_mode"]
    assert not in_boot_grace(young, CheckContext(Config(boot_grace_s=0), Mode.NODE))


@pytest.mark.parametrize("reasons, severity", [
    (0x8, Severity.WARN),            # HW_SLOWDOWN with no cause named
    (0x40, Severity.WARN),           # HW_THERMAL
    (0x48, Severity.WARN),
    (0xC8, Severity.WARN),           # power brake and HW thermal: the thermal one decides
    (0x88, Severity.INFO),           # power brake (and the HW_SLOWDOWN it implies): real healthy H100s
    (0x80, Severity.INFO),
    (0x20, Severity.INFO),           # SW thermal: temperatures judged by thermal.slowdown
    (0xA4, Severity.INFO),           # power brake + SW thermal + SW power cap: real healthy H100
])
def test_clocks_hw_slowdown_warns_only_on_the_gpus_own_hardware_protection(reasons, severity):
    [finding] = findings_of(faulty(dict(gpu=dict(clocks_event_reasons=reasons))), Mode.NODE,
                            "clocks.hw_slowdown")
    assert finding.severity is severity and finding.action is Action.NONE


@pytest.mark.parametrize("reasons", [0x1, 0x4, 0x10, 0x2])
def test_clocks_hw_slowdown_idle_power_cap_sync_boost_and_app_clocks_are_not_slowdowns(reasons):
    assert findings_of(faulty(dict(gpu=dict(clocks_event_reasons=reasons))), Mode.NODE,
                       "clocks.hw_slowdown") == []


def test_pcie_replay_new_during_the_job_warns_with_the_count():
    [f] = found(epilog(dict(pcie_replay=67), pcie_replay=400), Mode.EPILOG, "pcie.replay")
    assert f.severity is WARN and f.value == 333 and "333 PCIe replays new during the job" in f.message
    assert found(epilog(dict(pcie_replay=67), pcie_replay=120), Mode.EPILOG, "pcie.replay") == []
    assert found(gpu(pcie_replay=10_000), Mode.NODE, "pcie.replay") == []  # no baseline: no rate


def test_memory_temperature_hbm_at_its_slowdown_warns_and_remap_histogram_a_bank_without_remap_availability_warns():
    [f] = found(gpu(memory_temperature_c=95, memory_temperature_max_c=95), check="memory.temperature")
    assert f.severity is WARN and "HBM at 95 C" in f.message
    [f] = found(gpu(remap_histogram=(2559, 0, 0, 0, 1)), check="remap.histogram")
    assert f.severity is WARN and "RMA" in f.message
    [f] = found(gpu(remap_histogram=(2559, 0, 0, 1, 0)), check="remap.histogram")
    assert f.severity is INFO
