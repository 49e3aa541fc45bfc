"""healthcheck/checks/ecc.py, pure: ECC counters, retired pages, row remapping and the recovery
action, on snapshot records."""

from __future__ import annotations

from healthcheck.checks import CheckContext, run_checks
from healthcheck.checks.ecc import recovery_action_name
from healthcheck.config import Config, Thresholds
from healthcheck.model import Action, Baseline, GpuBaseline, Mode, Severity
from tests.lib.snapshots import catalogue_cases, faulty, findings_of, found, gpu

FAIL, WARN, INFO, UNKNOWN = Severity.FAIL, Severity.WARN, Severity.INFO, Severity.UNKNOWN


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("ecc"))


def test_ecc_volatile_uncorrected_messages_name_gpu_pci_and_serial():
    [finding] = findings_of(faulty(dict(gpu=dict(ecc_volatile_uncorrected=2))), Mode.NODE,
                            "ecc.volatile_uncorrected")
    assert finding.message.startswith("GPU 0 (00000000:18:00.0, SN 1650522003800): 2 volatile")
    assert finding.gpu == 0 and finding.value == 2 and finding.threshold == 0


def test_ecc_aggregate_uncorrected_epilog_attributes_new_errors_to_the_job():
    node = faulty(dict(gpu=dict(ecc_aggregate_uncorrected=5)))
    node = node._replace(baseline=Baseline("1", 0.0, (GpuBaseline("GPU-0", ecc_aggregate_uncorrected=3),)))
    [finding] = findings_of(node, Mode.EPILOG, "ecc.aggregate_uncorrected")
    assert finding.severity is Severity.FAIL and finding.value == 2


def test_ecc_volatile_corrected_thresholds_come_from_config():
    config = Config(thresholds=Thresholds(ecc_volatile_corrected=5000))
    found, _ = run_checks(faulty(dict(gpu=dict(ecc_volatile_corrected=1001))), CheckContext(config, Mode.NODE))
    assert not found


# --- recovery_action ---------------------------------------------------------------------

def test_recovery_action_values_past_4_are_named_only_as_pynvml_knows_them():
    pynvml_names = {5: "RECOVER_IMEX_DOMAIN", 6: "BUS_RESET", 7: "SYSTEM_REBOOT"}
    assert recovery_action_name(6, pynvml_names) == ("BUS_RESET", Action.RESET)
    assert recovery_action_name(7, pynvml_names) == ("SYSTEM_REBOOT", Action.REBOOT)
    assert recovery_action_name(7, {}) == ("recovery action 7", Action.DRAIN)  # an older pynvml
    [f] = found(gpu(recovery_action=42), check="recovery_action")
    assert f.severity is FAIL and f.drains and "recovery action 42" in f.message


def test_ecc_sram_threshold_aggregate_above_4_without_the_flag_warns_suggesting_rma():
    """NVIDIA's RMA policy thresholds for SRAM: more than 4 uncorrectable errors (per address
    bank) is the criterion; 5 in the aggregate without the flag warns, 4 says nothing."""
    [finding] = findings_of(faulty(dict(gpu=dict(sram_aggregate_uncorrected=5))), Mode.NODE,
                            "ecc.sram_threshold")
    assert (finding.severity, finding.action, finding.value, finding.threshold) == (WARN, Action.NONE, 5, 4)
    assert "5 uncorrectable SRAM errors since manufacture" in finding.message and "RMA" in finding.message
    assert findings_of(faulty(dict(gpu=dict(sram_aggregate_uncorrected=4))), Mode.NODE,
                       "ecc.sram_threshold") == []
    [flagged] = findings_of(faulty(dict(gpu=dict(sram_aggregate_uncorrected=5, sram_threshold_exceeded=True))),
                            Mode.NODE, "ecc.sram_threshold")
    assert (flagged.severity, flagged.action) == (FAIL, Action.RMA)
