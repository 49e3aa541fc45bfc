"""Snapshot records for the pure check tests (tests/unit/checks/, tests/unit/test_admin.py,
tests/readers/test_kernlog_checks.py): a healthy H100 in a one-GPU node, and one fault case per
check in FAULTS, which catalogue_cases() turns into a healthy and a faulty test per check."""

from __future__ import annotations

from typing import Callable, Dict, Optional

from healthcheck.checks import CATALOGUE, CheckContext, run_checks
from healthcheck.config import Config
from healthcheck.logmodel import KernelLogRead, SxidEvent, XidEvent
from healthcheck.model import (Action, Baseline, GpuBaseline, GpuProcess, GpuSnapshot, JobContext, Mode,
                               NodeSnapshot, ProbeResult, ProbeStatus, Severity)
from healthcheck.deepmodel import (AFTER_FIELDS, DcgmRead, DcgmResult, DeepGpu, DeepPeer, DeepRun,
                                   GpuCounters, MemError)
from healthcheck.netmodel import IbPort, NetworkRead, PortBaseline
from tests.lib.percheck import per_check

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

_DEEP_OK = dict(hbm_read_gbps=3000.0, hbm_copy_gbps=3000.0, h2d_gbps=50.0, d2h_gbps=50.0, gflops=55000.0)


def _deep(**fields):
    return DeepRun(gpus=(DeepGpu(0, "ok", **{**_DEEP_OK, **fields}),))


# check id -> (snapshot change, mode, expected severity, expected action)
FAULTS = {
    "nvml.query": (dict(gpu=dict(query_errors=(("EccMode", "CORRUPTED_INFOROM"),))), Mode.NODE, Severity.FAIL, Action.DRAIN),
    "deep.run": (dict(deep=DeepRun(gpus=(DeepGpu(0, "error", cu_result=214, cu_name="CUDA_ERROR_ECC_UNCORRECTABLE"),))),
                 Mode.NODE, Severity.FAIL, Action.RESET),
    "deep.memory": (dict(deep=_deep(mem_errors=1, mem_pass="address in address",
                                    mem_records=(MemError(8, 0x7f0000000008, 8, 9),))),
                    Mode.NODE, Severity.FAIL, Action.RMA),
    "deep.hbm": (dict(gpu=dict(name="NVIDIA H100 80GB HBM3"), deep=_deep(hbm_read_gbps=1000.0)), Mode.NODE, Severity.FAIL, Action.RESET),
    "deep.pcie": (dict(deep=_deep(h2d_gbps=5.0)), Mode.NODE, Severity.FAIL, Action.RESET),
    "deep.compute": (dict(gpu=dict(name="NVIDIA H100 80GB HBM3"), deep=_deep(gflops=10000.0)), Mode.NODE, Severity.FAIL, Action.RESET),
    "deep.throttle": (dict(deep=_deep(load_reasons=0x40)), Mode.NODE, Severity.WARN, Action.NONE),
    # GPU 0 (the node's one GPU) slow with both its peers through the NVSwitches
    "deep.nvlink_peer": (dict(gpu=dict(name="NVIDIA H100 80GB HBM3"), deep=_deep()._replace(peers=(
        DeepPeer(0, 1, 50.0, via="nvswitch", links=tuple(range(18))),
        DeepPeer(7, 0, 60.0, via="nvswitch", links=tuple(range(18)))))), Mode.NODE, Severity.FAIL, Action.RESET),
    "deep.nvlink_pair": (dict(gpu=dict(name="NVIDIA H100 80GB HBM3"), deep=_deep()._replace(peers=(
        DeepPeer(0, 1, 50.0, via="nvlink", links=tuple(range(12))),))), Mode.NODE, Severity.WARN, Action.NONE),
    "deep.compute_wrong": (dict(deep=_deep(launches=30, wrong_elements=90, wrong_launches=30, wrong_most=3,
                                           wrong_kernels=("hc_fma",))), Mode.NODE, Severity.FAIL, Action.RMA),
    "deep.after": (dict(gpu=dict(ecc_volatile_uncorrected=2, remap_pending=True),
                        deep=_deep()._replace(after_ran=True, before=(GpuCounters(0, "GPU-0", tuple(
                            getattr(HEALTHY, n) for n, _ in AFTER_FIELDS)),))),
                   Mode.NODE, Severity.FAIL, Action.RESET),
    "deep.clock": (dict(deep=_deep(sm_clock_sustained_mhz=900, sm_clock_max_mhz=1980)), Mode.NODE,
                   Severity.WARN, Action.NONE),
    "deep.tensor": (dict(gpus=(HEALTHY, HEALTHY._replace(index=1, uuid="GPU-1")),
                         deep=DeepRun(gpus=(DeepGpu(0, "ok", **{**_DEEP_OK, "tensor_gflops": 300000.0}),
                                            DeepGpu(1, "ok", **{**_DEEP_OK, "tensor_gflops": 600000.0})))),
                    Mode.NODE, Severity.FAIL, Action.RESET),
    "deep.peers": (dict(deep=_deep()._replace(peer_detail="killed")), Mode.NODE, Severity.UNKNOWN, Action.NONE),
    "deep.floors": (dict(gpu=dict(name="NVIDIA X900 Prototype"), deep=_deep()), Mode.NODE, Severity.INFO, Action.NONE),
    "dcgm.diag": (dict(dcgm=DcgmRead(diag=(DcgmResult(0, "Memory", "fail", "DCGM: memory error"),), diag_ran=True)),
                  Mode.NODE, Severity.FAIL, Action.RESET),
    "dcgm.health": (dict(dcgm=DcgmRead(health=(DcgmResult(0, "NVLink", "warn", "link errors"),), health_ran=True)),
                    Mode.NODE, Severity.WARN, Action.NONE),
    "nvml.init": (dict(nvml_error="DRIVER_NOT_LOADED", gpus=()), Mode.NODE, Severity.FAIL, Action.DRAIN),
    "gpu.count": (dict(sysfs_gpus=("a", "b")), Mode.NODE, Severity.FAIL, Action.REBOOT),
    "gpu.lost": (dict(gpu=dict(lost="GPU_IS_LOST")), Mode.NODE, Severity.FAIL, Action.REBOOT),
    "ecc.mode": (dict(gpu=dict(ecc_mode_current=False, ecc_mode_pending=False)), Mode.NODE, Severity.WARN, Action.NONE),
    "ecc.volatile_uncorrected": (dict(gpu=dict(ecc_volatile_uncorrected=2)), Mode.NODE, Severity.FAIL, Action.RESET),
    "ecc.volatile_corrected": (dict(gpu=dict(ecc_volatile_corrected=1001)), Mode.NODE, Severity.WARN, Action.NONE),
    "ecc.aggregate_uncorrected": (dict(gpu=dict(ecc_aggregate_uncorrected=4)), Mode.NODE, Severity.INFO, Action.NONE),
    "retired_pages.pending": (dict(gpu=dict(retired_pending=True)), Mode.NODE, Severity.WARN, Action.RESET),
    "retired_pages.count": (dict(gpu=dict(retired_sbe=50, retired_dbe=10)), Mode.NODE, Severity.FAIL, Action.RMA),
    "remap.pending": (dict(gpu=dict(remap_pending=True)), Mode.NODE, Severity.WARN, Action.RESET),
    "remap.failure": (dict(gpu=dict(remap_failure=True)), Mode.NODE, Severity.FAIL, Action.RMA),
    "ecc.sram_threshold": (dict(gpu=dict(sram_threshold_exceeded=True, sram_aggregate_uncorrected=3)),
                           Mode.NODE, Severity.FAIL, Action.RMA),
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
    # the network checks (checks/network.py; tests/unit/test_network_checks.py has the rest)
    "ib.port_state": (dict(network=NetworkRead(ports=(IbPort("mlx5_0", 1, state=1, phys_state=2),)),
                           baseline=Baseline("1", 0.0, ports=(PortBaseline("mlx5_0:1", state=4, phys_state=5),))),
                      Mode.EPILOG, Severity.FAIL, Action.DRAIN),
    "ib.rate": (dict(network=NetworkRead(ports=(IbPort("mlx5_0", 1, state=4, phys_state=5, rate_gbps=400.0),
                                                IbPort("mlx5_1", 1, state=4, phys_state=5, rate_gbps=100.0)))),
                Mode.NODE, Severity.WARN, Action.NONE),
    "ib.link_layer": (dict(network=NetworkRead(ports=(IbPort("mlx5_0", 1, link_layer="Ethernet", state=1, phys_state=3),)),
                           baseline=Baseline("1", 0.0, ports=(PortBaseline("mlx5_0:1", state=4, phys_state=5),))),
                      Mode.EPILOG, Severity.FAIL, Action.DRAIN),
    "ib.errors": (dict(network=NetworkRead(ports=(IbPort("mlx5_0", 1, state=4, phys_state=5, link_downed=3),)),
                       baseline=Baseline("1", 0.0, ports=(PortBaseline("mlx5_0:1", link_downed=0),))),
                  Mode.EPILOG, Severity.FAIL, Action.DRAIN),
    "gpudirect.rdma": (dict(network=NetworkRead(ports=(IbPort("mlx5_0", 1, state=4, phys_state=5, gpus=("0000:18:00.0",)),))),
                       Mode.NODE, Severity.WARN, Action.NONE),
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


def found(node: NodeSnapshot, mode: Mode = Mode.NODE, check: Optional[str] = None, config=None):
    findings, crashes = run_checks(node, CheckContext(config or Config(), mode, selected=(0,)))
    assert not crashes
    return [f for f in findings if check is None or f.check == check]


def gpu(**change):
    return NODE._replace(gpus=(HEALTHY._replace(**change),))


def epilog(before: dict, **now):
    return gpu(**now)._replace(baseline=Baseline("9", 0.0, (GpuBaseline("GPU-0", **before),)))


def healthy_snapshot_passes(check_id):
    mode = FAULTS[check_id][1]
    assert findings_of(NODE, mode, check_id) == []


def fault_is_found_with_severity_and_action(check_id):
    change, mode, severity, action = FAULTS[check_id]
    found = findings_of(faulty(change), mode, check_id)
    assert found, check_id
    assert (found[0].severity, found[0].action) == (severity, action)
    assert found[0].message


def catalogue_cases(module: str) -> Dict[str, Callable[[], None]]:
    """For each check of healthcheck/checks/<module>.py with a FAULTS case:
    test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action."""
    ids = [c for c in sorted(FAULTS) if c in CATALOGUE and CATALOGUE[c].fn.__module__ == "healthcheck.checks." + module]
    return {**per_check("healthy_snapshot_passes", ids, healthy_snapshot_passes),
            **per_check("fault_is_found_with_severity_and_action", ids, fault_is_found_with_severity_and_action)}
