"""The check catalogue, pure: each check on a healthy and a faulty snapshot, and the guard."""

import pytest

from healthcheck.checks import CATALOGUE, CheckContext, CheckSpec, run_checks
from healthcheck.config import ChecksConfig, Config, Thresholds
from healthcheck.model import (Action, Baseline, GpuBaseline, GpuProcess, GpuSnapshot, JobContext,
                               KernelLogRead, Mode, NodeSnapshot, ProbeResult, ProbeStatus,
                               Severity, SxidEvent, XidEvent)

HEALTHY = GpuSnapshot(index=0, uuid="GPU-0", serial="1650522003800", pci_bus_id="00000000:18:00.0",
                      name="NVIDIA H100", minor_number=0, ecc_mode_current=True, ecc_mode_pending=True,
                      ecc_volatile_corrected=0, ecc_volatile_uncorrected=0,
                      ecc_aggregate_corrected=0, ecc_aggregate_uncorrected=0,
                      remap_correctable=0, remap_uncorrectable=0, remap_pending=False,
                      remap_failure=False, recovery_action=0, memory_total_mib=81559,
                      memory_used_mib=4, processes=(), temperature_c=34,
                      temperature_slowdown_c=87, clocks_event_reasons=0, pcie_gen_current=5,
                      pcie_gen_max=5, pcie_width_current=16, pcie_width_max=16,
                      persistence_mode=True, mig_mode=False, fabric_state=3, fabric_status=0,
                      fabric_health_mask=0, nvlink_links=18, nvlink_down=(), nvlink_crc_errors=0,
                      nvlink_replay_errors=0, nvlink_recovery_errors=0, pcie_replay=0,
                      memory_temperature_c=40, memory_temperature_max_c=95,
                      remap_histogram=(2560, 0, 0, 0, 0))
NODE = NodeSnapshot(host="n", gpus=(HEALTHY,), sysfs_gpus=(), selected=(0,),
                    probes=(ProbeResult(0, ProbeStatus.OK),))

# check id -> (snapshot change, mode, expected severity, expected action)
FAULTS = {
    "nvml.init": (dict(nvml_error="DRIVER_NOT_LOADED", gpus=()), Mode.NODE, Severity.FAIL, Action.DRAIN),
    "gpu.count": (dict(sysfs_gpus=("a", "b")), Mode.NODE, Severity.FAIL, Action.REBOOT),
    "gpu.lost": (dict(gpu=dict(lost="GPU_IS_LOST")), Mode.NODE, Severity.FAIL, Action.REBOOT),
    "nvml.query": (dict(gpu=dict(query_errors=(("EccMode", "CORRUPTED_INFOROM"),))), Mode.NODE, Severity.FAIL, Action.DRAIN),
    "ecc.mode": (dict(gpu=dict(ecc_mode_current=False, ecc_mode_pending=False)), Mode.NODE, Severity.WARN, Action.NONE),
    "ecc.volatile_uncorrected": (dict(gpu=dict(ecc_volatile_uncorrected=2)), Mode.NODE, Severity.FAIL, Action.RESET),
    "ecc.volatile_corrected": (dict(gpu=dict(ecc_volatile_corrected=1001)), Mode.NODE, Severity.WARN, Action.NONE),
    "ecc.aggregate_uncorrected": (dict(gpu=dict(ecc_aggregate_uncorrected=4)), Mode.NODE, Severity.INFO, Action.NONE),
    "retired_pages.pending": (dict(gpu=dict(retired_pending=True)), Mode.NODE, Severity.WARN, Action.RESET),
    "retired_pages.count": (dict(gpu=dict(retired_sbe=50, retired_dbe=10)), Mode.NODE, Severity.FAIL, Action.RMA),
    "remap.pending": (dict(gpu=dict(remap_pending=True)), Mode.NODE, Severity.WARN, Action.RESET),
    "remap.failure": (dict(gpu=dict(remap_failure=True)), Mode.NODE, Severity.FAIL, Action.RMA),
    "recovery_action": (dict(gpu=dict(recovery_action=2)), Mode.NODE, Severity.FAIL, Action.REBOOT),
    "memory.leaked": (dict(gpu=dict(memory_used_mib=70000)), Mode.PROLOG, Severity.FAIL, Action.RESET),
    "processes.leftover": (dict(gpu=dict(processes=(GpuProcess(4242, 1000, "alice", "python train.py"),))),
                           Mode.PROLOG, Severity.FAIL, Action.DRAIN),
    "thermal.slowdown": (dict(gpu=dict(temperature_c=88)), Mode.NODE, Severity.WARN, Action.NONE),
    "clocks.hw_slowdown": (dict(gpu=dict(clocks_event_reasons=0x40)), Mode.NODE, Severity.WARN, Action.NONE),
    "pcie.width_degraded": (dict(gpu=dict(pcie_width_current=8)), Mode.NODE, Severity.INFO, Action.NONE),
    "persistence_mode": (dict(gpu=dict(persistence_mode=False)), Mode.NODE, Severity.INFO, Action.NONE),
    "xid": (dict(kernel_log=KernelLogRead(events=(XidEvent("0000:18:00", 48, "NVRM: Xid 48"),))),
            Mode.EPILOG, Severity.FAIL, Action.RESET),
    "cuda.probe": (dict(probes=(ProbeResult(0, ProbeStatus.ALLOC_ERROR, 214, "CUDA_ERROR_ECC_UNCORRECTABLE"),)),
                   Mode.PROLOG, Severity.FAIL, Action.RESET),
    "slurm.job_gpus": (dict(job=JobContext("1", gpu_ids_error="SLURM_JOB_GPUS: bad")), Mode.PROLOG,
                       Severity.UNKNOWN, Action.NONE),
    "state.baseline": (dict(baseline_error="no prolog baseline for job 1"), Mode.EPILOG, Severity.INFO, Action.NONE),
    "fabric.state": (dict(gpu=dict(fabric_status=23)), Mode.NODE, Severity.FAIL, Action.REBOOT),
    "nvlink.down": (dict(gpu=dict(nvlink_down=(5,))), Mode.NODE, Severity.FAIL, Action.RESET),
    "nvlink.errors": (dict(gpu=dict(nvlink_recovery_errors=9), baseline=Baseline(
        "1", 0.0, (GpuBaseline("GPU-0", nvlink_recovery_errors=1),))), Mode.EPILOG, Severity.FAIL, Action.RESET),
    "pcie.replay": (dict(gpu=dict(pcie_replay=700), baseline=Baseline(
        "1", 0.0, (GpuBaseline("GPU-0", pcie_replay=200),))), Mode.EPILOG, Severity.WARN, Action.NONE),
    "memory.temperature": (dict(gpu=dict(memory_temperature_c=96)), Mode.NODE, Severity.WARN, Action.NONE),
    "remap.histogram": (dict(gpu=dict(remap_histogram=(2550, 5, 3, 1, 1))), Mode.NODE, Severity.WARN, Action.NONE),
    "sxid": (dict(kernel_log=KernelLogRead(sxids=(SxidEvent("0000:c3:00.0", 24007, True, "nvidia-nvswitch0: SXid"),))),
             Mode.EPILOG, Severity.FAIL, Action.REBOOT),
}


def faulty(change):
    change = dict(change)
    gpu_change = change.pop("gpu", None)
    node = NODE._replace(**change)
    if gpu_change:
        node = node._replace(gpus=(HEALTHY._replace(**gpu_change),))
    return node


def findings_of(node, mode, check_id):
    found, crashes = run_checks(node, CheckContext(Config(), mode, selected=(0,)))
    assert not crashes
    return [f for f in found if f.check == check_id]


def test_every_check_in_the_catalogue_has_a_fault_case_and_a_docstring():
    assert set(FAULTS) == set(CATALOGUE)
    for spec in CATALOGUE.values():
        assert spec.fn.__doc__ and len(spec.fn.__doc__.split()) > 10, spec.check_id


@pytest.mark.parametrize("check_id", sorted(FAULTS))
def test_healthy_snapshot_passes(check_id):
    mode = FAULTS[check_id][1]
    assert findings_of(NODE, mode, check_id) == []


@pytest.mark.parametrize("check_id", sorted(FAULTS))
def test_fault_is_found_with_severity_and_action(check_id):
    change, mode, severity, action = FAULTS[check_id]
    found = findings_of(faulty(change), mode, check_id)
    assert found, check_id
    assert (found[0].severity, found[0].action) == (severity, action)
    assert found[0].message


def test_messages_name_gpu_pci_and_serial():
    [finding] = findings_of(faulty(dict(gpu=dict(ecc_volatile_uncorrected=2))), Mode.NODE,
                            "ecc.volatile_uncorrected")
    assert finding.message.startswith("GPU 0 (00000000:18:00.0, SN 1650522003800): 2 volatile")
    assert finding.gpu == 0 and finding.value == 2 and finding.threshold == 0


def test_leftover_processes_count_only_on_the_jobs_gpus():
    node = faulty(dict(gpu=dict(processes=(GpuProcess(1, 10),))))
    found, _ = run_checks(node, CheckContext(Config(), Mode.PROLOG, selected=()))
    assert not [f for f in found if f.check == "processes.leftover"]


def test_epilog_attributes_new_aggregate_errors_to_the_job():
    node = faulty(dict(gpu=dict(ecc_aggregate_uncorrected=5)))
    node = node._replace(baseline=Baseline("1", 0.0, (GpuBaseline("GPU-0", ecc_aggregate_uncorrected=3),)))
    [finding] = findings_of(node, Mode.EPILOG, "ecc.aggregate_uncorrected")
    assert finding.severity is Severity.FAIL and finding.value == 2


def test_prolog_ignores_old_xids():
    change = FAULTS["xid"][0]
    assert findings_of(faulty(change), Mode.PROLOG, "xid") == []


def test_application_xids_are_info():
    node = faulty(dict(kernel_log=KernelLogRead(events=(XidEvent("0000:18:00", 13, "x"),))))
    [finding] = findings_of(node, Mode.EPILOG, "xid")
    assert finding.severity is Severity.INFO and finding.gpu == 0


def test_unreadable_kernel_log_is_unknown_for_xid_only():
    node = faulty(dict(kernel_log=KernelLogRead(error="cannot read /dev/kmsg: Permission denied")))
    found, _ = run_checks(node, CheckContext(Config(), Mode.EPILOG, selected=(0,)))
    assert [(f.check, f.severity) for f in found] == [("xid", Severity.UNKNOWN)]


def test_disabled_check_does_not_run():
    config = Config(checks=ChecksConfig(disabled=("persistence_mode",)))
    found, _ = run_checks(faulty(dict(gpu=dict(persistence_mode=False))), CheckContext(config, Mode.NODE))
    assert not found


def test_pcie_width_warns_below_the_configured_minimum():
    config = Config(thresholds=Thresholds(pcie_width_min=16))
    found, _ = run_checks(faulty(dict(gpu=dict(pcie_width_current=8))), CheckContext(config, Mode.NODE))
    assert [(f.check, f.severity) for f in found] == [("pcie.width_degraded", Severity.WARN)]


def test_thresholds_come_from_config():
    config = Config(thresholds=Thresholds(ecc_volatile_corrected=5000))
    found, _ = run_checks(faulty(dict(gpu=dict(ecc_volatile_corrected=1001))), CheckContext(config, Mode.NODE))
    assert not found


def test_a_crashing_check_becomes_unknown_never_fail(monkeypatch):
    def boom(gpu, node, ctx):
        raise RuntimeError("bug")
        yield

    monkeypatch.setitem(CATALOGUE, "ecc.mode", CheckSpec("ecc.mode", "gpu", boom))
    found, crashes = run_checks(NODE, CheckContext(Config(), Mode.PROLOG, selected=(0,)))
    assert [(f.check, f.severity) for f in found] == [("ecc.mode", Severity.UNKNOWN)]
    assert "RuntimeError: bug" in crashes[0].traceback


def test_no_gpus_node_passes_with_info():
    node = NodeSnapshot(host="n", nvml_error="LIBRARY_NOT_FOUND", sysfs_gpus=())
    [finding] = findings_of(node, Mode.NODE, "nvml.init")
    assert finding.severity is Severity.INFO and "no GPUs" in finding.message
    node = node._replace(sysfs_gpus=("0000:41:00.0",))
    [finding] = findings_of(node, Mode.NODE, "nvml.init")
    assert finding.severity is Severity.FAIL


def test_boot_grace_holds_persistence_state_until_it_has_passed():
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


def test_memory_without_a_visible_process_leak_or_busy():
    from healthcheck.checks.processes import busy_signs
    held = dict(memory_used_mib=9216, processes=())
    busy = faulty(dict(gpu=dict(held, utilization_gpu_pct=65, pstate=2)))
    idle = faulty(dict(gpu=dict(held, utilization_gpu_pct=0, pstate=0)))
    unknown_util = faulty(dict(gpu=dict(held, utilization_gpu_pct=None, pstate=2)))
    for mode, severity in ((Mode.PROLOG, Severity.FAIL), (Mode.NODE, Severity.WARN), (Mode.EPILOG, Severity.WARN)):
        ctx = CheckContext(Config(), mode)
        [b] = [f for f in run_checks(busy, ctx)[0] if f.check == "memory.leaked"]
        [i] = [f for f in run_checks(idle, ctx)[0] if f.check == "memory.leaked"]
        assert b.severity is severity and i.severity is severity
        assert b.action is (Action.DRAIN if severity is Severity.FAIL else Action.NONE)
        assert i.action is (Action.RESET if severity is Severity.FAIL else Action.NONE)
        assert "not visible from here" in b.message and "reset the GPU" not in b.message
        assert "reset the GPU" in i.message
    assert busy_signs(unknown_util.gpus[0]) == ["performance state P2 with utilization unknown"]
    assert busy_signs(idle.gpus[0]) == []


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
def test_clock_slowdowns_warn_only_on_the_gpus_own_hardware_protection(reasons, severity):
    [finding] = findings_of(faulty(dict(gpu=dict(clocks_event_reasons=reasons))), Mode.NODE,
                            "clocks.hw_slowdown")
    assert finding.severity is severity and finding.action is Action.NONE


@pytest.mark.parametrize("reasons", [0x1, 0x4, 0x10, 0x2])
def test_idle_power_cap_sync_boost_and_app_clocks_are_not_slowdowns(reasons):
    assert findings_of(faulty(dict(gpu=dict(clocks_event_reasons=reasons))), Mode.NODE,
                       "clocks.hw_slowdown") == []
