"""NVLink and the NVSwitch fabric: fabric registration, links that are down, link errors.

On an HGX / DGX H100-H200 or a GB200 NVL72 every GPU registers with the NVSwitch fabric through
nvidia-fabricmanager after the driver loads; until it has, CUDA answers 802 (system not yet
initialized).  A PCIe board has no fabric and no NVLink: these checks say nothing about it.
"""

from __future__ import annotations

from typing import Iterator, List, Optional

from ..model import Action, Finding, GpuSnapshot, Mode, NodeSnapshot, Severity
from ..nvmlcodes import NVML_ERROR_NAMES as ERROR_NAMES
from .registry import CheckContext, delta, finding as _f, gpu_check, in_boot_grace, label

# NVML_GPU_FABRIC_STATE_*
FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 0, 1, 2, 3
FABRIC_STATE_NAMES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
# NVML_GPU_FABRIC_HEALTH_MASK_*: 2-bit fields; the value 1 (..._TRUE) means the condition holds
RECOVERY_BURST = 5  # NVLink recovery errors in one job that fail the GPU (see nvlink.errors)
HEALTH_BITS = {0: "bandwidth degraded", 4: "route unhealthy"}
# NVML_GPU_FABRIC_HEALTH_SUMMARY_* worth a warning (v3 drivers): 2 unhealthy, 3 limited capacity
HEALTH_SUMMARY = {2: "unhealthy", 3: "limited capacity"}


def fabric_training(gpu: GpuSnapshot) -> bool:
    """The GPU's fabric registration has not finished (NOT_STARTED or IN_PROGRESS)."""
    return gpu.fabric_state in (FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS)


def health_problems(mask: Optional[int]) -> List[str]:
    """The warning conditions a fabric health mask sets (nvml.h NVML_GPU_FABRIC_HEALTH_GET)."""
    if not mask:
        return []
    return [name for shift, name in HEALTH_BITS.items() if (mask >> shift) & 0x3 == 1]


@gpu_check("fabric.state", severity=Severity.FAIL, action=Action.REBOOT, threshold_key="boot_grace_s")
def check_fabric_state(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The GPU's registration with the NVSwitch fabric (nvmlDeviceGetGpuFabricInfoV).

    COMPLETED with status SUCCESS passes.  COMPLETED with an error status (nvidia-smi's
    "Fabric ... Status: Insufficient Resources") fails: the GPU cannot reach its peers and CUDA
    returns 802; restart nvidia-fabricmanager, or reboot (NVIDIA Fabric Manager User Guide,
    "GPU fabric registration").  NOT_STARTED / IN_PROGRESS within `boot_grace_s` of the driver
    loading is the fabric still training: unknown, never a drain; past the grace it fails, the
    usual cause being a fabric manager that is not running.  The health mask's degraded-bandwidth
    and route-unhealthy fields (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*), or a health summary of
    UNHEALTHY / LIMITED_CAPACITY, warn: jobs run, slower.
    nvidia-smi equivalent: `nvidia-smi -q`, section "Fabric" (State, Status, CliqueId).
    """
    state = gpu.fabric_state
    if state is None or state == FABRIC_NOT_SUPPORTED:
        return
    name = FABRIC_STATE_NAMES.get(state, f"STATE_{state}")
    if state == FABRIC_COMPLETED:
        status = gpu.fabric_status or 0
        if status != 0:
            error = ERROR_NAMES.get(status, f"NVML_ERROR_{status}")
            yield _f("fabric.state", Severity.FAIL, gpu,
                     f"{label(gpu)}: fabric registration completed with error {error}; restart "
                     f"nvidia-fabricmanager, or reboot the node", value=error, threshold="SUCCESS",
                     action=Action.REBOOT)
            return
        problems = health_problems(gpu.fabric_health_mask)
        summary = HEALTH_SUMMARY.get(gpu.fabric_health_summary or 0)
        if summary and not problems:
            problems = [summary]
        if problems:
            yield _f("fabric.state", Severity.WARN, gpu,
                     f"{label(gpu)}: fabric health: {', '.join(problems)}; NVLink traffic is "
                     f"rerouted or slower. Check nvidia-fabricmanager and the NVSwitch SXids",
                     value=",".join(p.replace(" ", "_") for p in problems), threshold="healthy")
        return
    if state in (FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS):
        if in_boot_grace(node, ctx):
            yield _f("fabric.state", Severity.UNKNOWN, gpu,
                     f"{label(gpu)}: fabric {name} {node.driver_age_s:.0f} s after the driver "
                     f"loaded (boot_grace_s {ctx.config.boot_grace_s:.0f}): still training",
                     value=name, threshold="COMPLETED")
            return
        yield _f("fabric.state", Severity.FAIL, gpu,
                 f"{label(gpu)}: fabric {name} past boot_grace_s ({ctx.config.boot_grace_s:.0f} s "
                 f"after the driver loaded): is nvidia-fabricmanager running? Restart it, or "
                 f"reboot the node", value=name, threshold="COMPLETED", action=Action.REBOOT)
        return
    yield _f("fabric.state", Severity.WARN, gpu, f"{label(gpu)}: fabric state {state} is not one "
             f"NVML documents", value=name)


@gpu_check("nvlink.down", severity=Severity.FAIL, action=Action.RESET, threshold_key="expected_nvlinks")
def check_nvlink_down(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Fewer NVLink links active than the GPU has (or than `expected_nvlinks`).

    Any inactive link fails and drains, naming the links: NVIDIA's health validation treats a
    GPU with more than 0 inactive NVLinks as failing (docs.nvidia.com/health-validation,
    NVLink checks, `nvlink_active`: drain, then reset the GPU, then reboot, then service).
    Silent while the fabric is still training or within `boot_grace_s`, where links come up one
    by one.  `expected_nvlinks` covers SKUs with links off by design.
    nvidia-smi equivalent: `nvidia-smi nvlink --status` ("<inactive>").
    """
    links, down = gpu.nvlink_links, gpu.nvlink_down
    if not links or down is None:
        return  # a PCIe board, or NVML cannot tell: not a finding
    if fabric_training(gpu) or (down and in_boot_grace(node, ctx)):
        return
    expected = ctx.config.expected_nvlinks if ctx.config.expected_nvlinks is not None else links
    active = links - len(down)
    if active >= expected:
        return
    names = ",".join(str(link) for link in down)
    yield _f("nvlink.down", Severity.FAIL, gpu,
             f"{label(gpu)}: NVLink link{'s' if len(down) > 1 else ''} {names} inactive: {active} "
             f"of {links} links active, expected {expected}. Drain; reset the GPU, reboot if it "
             f"stays down", value=f"link{names}", threshold=expected, action=Action.RESET)


@gpu_check("nvlink.errors", severity=Severity.FAIL, action=Action.RESET,
           threshold_key="thresholds.nvlink_errors_per_job")
def check_nvlink_errors(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """NVLink CRC, replay and recovery errors new during the job (epilog vs the prolog baseline).

    CRC and replay errors are retried in hardware; above `thresholds.nvlink_errors_per_job`
    (100, each) in one job they mean a marginal link: warn.  A recovery error means the link
    went down and retrained: DCGM's NVLink health watch reports any as an error
    (DCGM_FR_NVLINK_ERROR_CRITICAL, docs.nvidia.com/datacenter/dcgm, "Error Threshold File");
    we warn on any and fail at RECOVERY_BURST (5) in one job: the link is flapping, and NVIDIA's
    health validation drains a GPU whose links go inactive (NVLink checks, `nvlink_active`).
    Counters are per driver load; by hand (no baseline) we report nothing.
    nvidia-smi equivalent: `nvidia-smi nvlink -e`.
    """
    if ctx.mode is not Mode.EPILOG or not gpu.nvlink_links:
        return
    base = node.baseline_of(gpu)
    if base is None:
        return
    t = ctx.config.thresholds
    crc = delta(gpu.nvlink_crc_errors, base.nvlink_crc_errors)
    replay = delta(gpu.nvlink_replay_errors, base.nvlink_replay_errors)
    recovery = delta(gpu.nvlink_recovery_errors, base.nvlink_recovery_errors)
    links = _links_with_errors(gpu)
    where = f" (links {links})" if links else ""
    if recovery is not None and recovery >= RECOVERY_BURST:
        yield _f("nvlink.errors", Severity.FAIL, gpu,
                 f"{label(gpu)}: {recovery} NVLink recovery errors new during the job{where}, "
                 f"burst limit {RECOVERY_BURST}: the link is flapping. Drain; reset the "
                 f"GPU", value=recovery, threshold=RECOVERY_BURST, action=Action.RESET)
        return
    parts = []
    if recovery:
        parts.append(f"{recovery} recovery")
    if crc is not None and crc > t.nvlink_errors_per_job:
        parts.append(f"{crc} CRC (limit {t.nvlink_errors_per_job})")
    if replay is not None and replay > t.nvlink_errors_per_job:
        parts.append(f"{replay} replay (limit {t.nvlink_errors_per_job})")
    if parts:
        yield _f("nvlink.errors", Severity.WARN, gpu,
                 f"{label(gpu)}: NVLink errors new during the job: {', '.join(parts)}{where}; "
                 f"watch the link", value=(crc or 0) + (replay or 0) + (recovery or 0),
                 threshold=t.nvlink_errors_per_job)


def _links_with_errors(gpu: GpuSnapshot) -> str:
    return ",".join(str(c[0]) for c in gpu.nvlink_counters or () if c[1] or c[2] or c[3])
