"""The board's environment: temperature, clock slowdowns, the PCIe link, persistence mode."""

from __future__ import annotations

from typing import Iterator

from ..model import Action, Finding, GpuSnapshot, Mode, NodeSnapshot, Severity
from .registry import CheckContext, delta, finding as _f, gpu_check, in_boot_grace, label


@gpu_check("thermal.slowdown", severity=Severity.WARN, action=Action.NONE,
           threshold_key="thresholds.thermal_margin_c")
def check_thermal_slowdown(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Temperature at or above the GPU's own slowdown threshold (minus `thresholds.thermal_margin_c`).

    The GPU throttles its clocks there; a job runs, slowly.  Check the cooling.
    nvidia-smi equivalent: `nvidia-smi -q -d TEMPERATURE`, "GPU Slowdown Temp".
    """
    temp, slowdown = gpu.temperature_c, gpu.temperature_slowdown_c
    if temp is None or slowdown is None:
        return
    limit = slowdown - ctx.config.thresholds.thermal_margin_c
    if temp >= limit:
        yield _f("thermal.slowdown", Severity.WARN, gpu,
                 f"{label(gpu)}: {temp} C, slowdown at {slowdown} C; check the cooling",
                 value=temp, threshold=limit)


@gpu_check("memory.temperature", severity=Severity.WARN, action=Action.NONE)
def check_memory_temperature(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """HBM temperature at or above the GPU's memory slowdown limit.

    The limit is the board's own "Memory Max Operating Temp" (NVML_TEMPERATURE_THRESHOLD_MEM_MAX,
    95 C on H100): there the GPU slows its clocks to protect the HBM (NVML_FI_DEV_CLOCKS_EVENT_
    REASON_SW_THERM_SLOWDOWN keeps "Memory Temp < Memory Max Operating Temp").  Jobs run, slowly;
    the cooling needs a look.  Warn.
    nvidia-smi equivalent: `nvidia-smi -q -d TEMPERATURE`, "Memory Current Temp".
    """
    temp, limit = gpu.memory_temperature_c, gpu.memory_temperature_max_c
    if temp is None or not limit:
        return
    if temp >= limit:
        yield _f("memory.temperature", Severity.WARN, gpu,
                 f"{label(gpu)}: HBM at {temp} C, memory slowdown at {limit} C; check the cooling",
                 value=temp, threshold=limit)


@gpu_check("pcie.replay", severity=Severity.WARN, action=Action.NONE,
           threshold_key="thresholds.pcie_replay_per_job")
def check_pcie_replay(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """PCIe replays new during the job (epilog vs the prolog baseline), above
    `thresholds.pcie_replay_per_job` (100).

    A replay is a link-level retransmission after a bad TLP: corrected, but a rate means a
    marginal riser, slot or cable and slow host transfers.  DCGM's PCIe health watch reports a
    replay rate as a warning (DCGM_FR_PCI_REPLAY_RATE, "Error Threshold File"); a job has no
    fixed duration, so we count per job.  Warn.
    nvidia-smi equivalent: `nvidia-smi -q -d PCI`, "Replays Number".
    """
    if ctx.mode is not Mode.EPILOG:
        return
    base = node.baseline_of(gpu)
    new = delta(gpu.pcie_replay, base.pcie_replay if base else None)
    limit = ctx.config.thresholds.pcie_replay_per_job
    if new is not None and new > limit:
        yield _f("pcie.replay", Severity.WARN, gpu,
                 f"{label(gpu)}: {new} PCIe replays new during the job ({gpu.pcie_replay} since "
                 f"the driver loaded), limit {limit}; reseat or check the slot",
                 value=new, threshold=limit)


HW_SLOWDOWN_BITS = {0x8: "HW_SLOWDOWN", 0x20: "SW_THERMAL", 0x40: "HW_THERMAL",
                    0x80: "HW_POWER_BRAKE"}
HW_THERMAL = 0x40
HW_SLOWDOWN = 0x8
HW_POWER_BRAKE = 0x80


@gpu_check("clocks.hw_slowdown", severity=Severity.WARN, action=Action.NONE)
def check_clocks_hw_slowdown(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Clocks held down by the GPU's own hardware protection (not by idleness or power capping).

    Warns on HW_THERMAL (the board's hardware thermal protection), and on HW_SLOWDOWN whose
    cause is not the power brake alone: jobs run at half the clocks or less, and cooling, power
    delivery or the board needs a look.  Info, not warn, for the two bits healthy production
    nodes show in a snapshot: HW_POWER_BRAKE (with the HW_SLOWDOWN it implies), an "External
    Power Brake Assertion ... triggered (e.g. by the system power supply)", a chassis signal and
    not a GPU fault; and SW_THERMAL, which NVML defines as the GPU or memory temperature above
    its max operating temperature, judged already, with the board's own limits, by
    `thermal.slowdown` and `memory.temperature`.  Sources: NVML API reference, "Clocks Event
    Reasons" (nvmlClocksThrottleReasonHwSlowdown/HwThermalSlowdown/HwPowerBrakeSlowdown,
    nvmlClocksEventReasonSwThermalSlowdown; HW Slowdown "may be also reported during PState or
    clock change"), and two real 8xH100 `nvidia-smi -q` dumps of healthy nodes (gpud fixtures:
    power brake on all 8 GPUs at 29 C idle; power brake with SW thermal at 36 C).
    nvidia-smi equivalent: `nvidia-smi -q -d PERFORMANCE`, "Clocks Event Reasons".
    """
    reasons = gpu.clocks_event_reasons
    if not reasons:
        return
    active = [name for bit, name in HW_SLOWDOWN_BITS.items() if reasons & bit]
    if not active:
        return
    hardware = bool(reasons & HW_THERMAL) or bool(reasons & HW_SLOWDOWN and not reasons & HW_POWER_BRAKE)
    if hardware:
        yield _f("clocks.hw_slowdown", Severity.WARN, gpu,
                 f"{label(gpu)}: clocks slowed by {', '.join(active)}; check cooling and power",
                 value=",".join(active), threshold="HW_THERMAL or HW_SLOWDOWN")
    else:
        yield _f("clocks.hw_slowdown", Severity.INFO, gpu,
                 f"{label(gpu)}: clocks slowed by {', '.join(active)} (power brake asserted by the "
                 f"system, or SW thermal within the temperature checks' limits)",
                 value=",".join(active), threshold="HW_THERMAL or HW_SLOWDOWN")


@gpu_check("pcie.width_degraded", severity=Severity.WARN, action=Action.NONE,
           threshold_key="thresholds.pcie_width_min")
def check_pcie_width_degraded(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The PCIe link runs narrower than the GPU's maximum width.

    On an SXM board a narrower link means a bad riser, slot or cable and slow host transfers;
    but a PCIe card in an x8 slot is healthy (real T4 and Quadro boards report x8 of x16).  So
    it is info by default, and warns below `thresholds.pcie_width_min` where a site sets it.
    nvidia-smi equivalent: `nvidia-smi -q -d PCI`, Link Width Current vs Max.
    """
    current, maximum = gpu.pcie_width_current, gpu.pcie_width_max
    if current is None or maximum is None or not 0 < current < maximum:
        return
    minimum = ctx.config.thresholds.pcie_width_min
    if current < minimum:
        yield _f("pcie.width_degraded", Severity.WARN, gpu,
                 f"{label(gpu)}: PCIe link x{current}, below pcie_width_min x{minimum} (the GPU "
                 f"supports x{maximum}); reseat or check the slot", value=current, threshold=minimum)
    else:
        yield _f("pcie.width_degraded", Severity.INFO, gpu,
                 f"{label(gpu)}: PCIe link x{current} of x{maximum}", value=current,
                 threshold=maximum)


@gpu_check("persistence_mode", severity=Severity.INFO, action=Action.NONE)
def check_persistence_mode(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Persistence mode is off.

    Without it the driver may unload between jobs: each job pays the initialisation and the
    volatile ECC counters reset (the epilog then relies on aggregate counters, which it diffs).
    A configuration choice, not a fault: info, and not reported within `boot_grace_s` of the
    driver loading (nvidia-persistenced may not have started yet).
    nvidia-smi equivalent: `nvidia-smi -q`, "Persistence Mode".
    """
    if gpu.persistence_mode is False and not in_boot_grace(node, ctx):
        # nvidia-persistenced may not have started yet in the first minutes after boot
        yield _f("persistence_mode", Severity.INFO, gpu,
                 f"{label(gpu)}: persistence mode is off; consider nvidia-persistenced",
                 value="disabled", threshold="enabled")

