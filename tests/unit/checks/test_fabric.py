"""healthcheck/checks/fabric.py, pure: the NVSwitch fabric state and the NVLinks (down, errors
during the job), on snapshot records."""

from __future__ import annotations

import pytest

from healthcheck.config import Config, Thresholds
from healthcheck.decide.verdict import drain_reason
from healthcheck.model import Action, Baseline, GpuBaseline, Mode, Severity
from tests.lib.snapshots import HEALTHY, NODE, catalogue_cases, epilog, found, gpu

FAIL, WARN, INFO, UNKNOWN = Severity.FAIL, Severity.WARN, Severity.INFO, Severity.UNKNOWN


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("fabric"))


# --- fabric.state ------------------------------------------------------------------------

def test_fabric_state_completed_with_success_passes():
    assert found(gpu(fabric_state=3, fabric_status=0), check="fabric.state") == []


def test_fabric_state_completed_with_an_error_status_fails_and_says_restart_fabricmanager_or_reboot():
    [f] = found(gpu(fabric_status=23), check="fabric.state")
    assert (f.severity, f.action, f.value) == (FAIL, Action.REBOOT, "INSUFFICIENT_RESOURCES")
    assert "nvidia-fabricmanager" in f.message and "reboot" in f.message


@pytest.mark.parametrize("state", [1, 2])
def test_fabric_state_still_training_within_the_grace_is_unknown_and_never_drains(state):
    node = gpu(fabric_state=state)._replace(driver_age_s=30.0)
    [f] = found(node, check="fabric.state")
    assert f.severity is UNKNOWN and not f.drains and "still training" in f.message
    assert drain_reason(found(node), node.gpus, Mode.PROLOG, "1") is None


@pytest.mark.parametrize("state", [1, 2])
def test_fabric_state_still_training_past_the_grace_fails(state):
    node = gpu(fabric_state=state)._replace(driver_age_s=3600.0)
    [f] = found(node, check="fabric.state")
    assert f.severity is FAIL and f.drains and "boot_grace_s" in f.message


def test_fabric_state_health_mask_degraded_bandwidth_and_unhealthy_route_warn():
    [f] = found(gpu(fabric_health_mask=0x1 | (0x1 << 4)), check="fabric.state")
    assert f.severity is WARN and "bandwidth degraded" in f.message and "route unhealthy" in f.message
    # 2 = "not degraded" / "healthy" in every field: nothing to say
    assert found(gpu(fabric_health_mask=0x2 | (0x2 << 2) | (0x2 << 4)), check="fabric.state") == []
    [f] = found(gpu(fabric_health_mask=0x2, fabric_health_summary=2), check="fabric.state")
    assert f.severity is WARN and "unhealthy" in f.message


def test_fabric_state_a_pcie_board_without_fabric_or_nvlink_has_no_finding():
    pcie = HEALTHY._replace(fabric_state=None, fabric_status=None, nvlink_links=None,
                            nvlink_down=None, nvlink_crc_errors=None, nvlink_replay_errors=None,
                            nvlink_recovery_errors=None)
    node = NODE._replace(gpus=(pcie,), baseline=Baseline("1", 0.0, (GpuBaseline("GPU-0"),)))
    assert found(node, Mode.EPILOG) == [] and found(node, Mode.NODE) == []


# --- nvlink.down -------------------------------------------------------------------------

def test_nvlink_down_fails_drains_and_names_the_link():
    node = NODE._replace(gpus=(HEALTHY._replace(index=3, nvlink_down=(5,)),))
    [f] = found(node, check="nvlink.down")
    assert (f.severity, f.action, f.gpu, f.value, f.threshold) == (FAIL, Action.RESET, 3, "link5", 18)
    assert "link 5 inactive: 17 of 18 links active" in f.message
    reason = drain_reason([f], node.gpus, Mode.PROLOG, "77")
    assert reason == "gpu-healthcheck: gpu3 pci=00000000:18:00.0 sn=1650522003800 nvlink.down=link5 prolog job=77"


def test_nvlink_down_is_silent_while_the_fabric_trains_and_within_the_grace():
    assert found(gpu(nvlink_down=(5,), fabric_state=2), check="nvlink.down") == []
    assert found(gpu(nvlink_down=(5,))._replace(driver_age_s=5.0), check="nvlink.down") == []


def test_nvlink_down_expected_nvlinks_covers_skus_with_links_off_by_design():
    node = gpu(nvlink_links=18, nvlink_down=(16, 17))
    assert found(node, config=Config(expected_nvlinks=16), check="nvlink.down") == []
    [f] = found(node, config=Config(expected_nvlinks=17), check="nvlink.down")
    assert f.value == "link16,17" and "links 16,17 inactive" in f.message


# --- nvlink.errors: growth during the job --------------------------------------------------

def test_nvlink_errors_new_during_the_job_warn_above_the_thresholds_with_the_count():
    node = epilog(dict(nvlink_crc_errors=10, nvlink_replay_errors=0, nvlink_recovery_errors=0),
                  nvlink_crc_errors=250, nvlink_replay_errors=50, nvlink_recovery_errors=0,
                  nvlink_counters=((4, 250, 50, 0),))
    [f] = found(node, Mode.EPILOG, "nvlink.errors")
    assert f.severity is WARN and "240 CRC (limit 100)" in f.message and "links 4" in f.message
    below = epilog(dict(nvlink_crc_errors=10), nvlink_crc_errors=110)
    assert found(below, Mode.EPILOG, "nvlink.errors") == []


def test_nvlink_errors_any_recovery_error_warns_and_a_burst_fails():
    [f] = found(epilog(dict(nvlink_recovery_errors=2), nvlink_recovery_errors=3), Mode.EPILOG, "nvlink.errors")
    assert f.severity is WARN and "1 recovery" in f.message
    [f] = found(epilog(dict(nvlink_recovery_errors=2), nvlink_recovery_errors=7), Mode.EPILOG, "nvlink.errors")
    assert f.severity is FAIL and f.action is Action.RESET and "5 NVLink recovery errors new" in f.message
    config = Config(thresholds=Thresholds(nvlink_errors_per_job=1000))
    [f] = found(epilog(dict(nvlink_crc_errors=0), nvlink_crc_errors=500), Mode.EPILOG)
    assert f.severity is WARN
    assert found(epilog(dict(nvlink_crc_errors=0), nvlink_crc_errors=500), Mode.EPILOG,
                 "nvlink.errors", config) == []
