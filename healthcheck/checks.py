"""The check catalogue: small pure functions of a NodeSnapshot, each under its stable id.

    findings, crashes = run_checks(snapshot, CheckContext(config, Mode.NODE))

A GPU check is `fn(gpu, node, ctx) -> Iterable[Finding]` and runs for every GPU NVML reported
(lost GPUs only get `gpu.lost`); a node check is `fn(node, ctx)`.  The id is the JSON `check`
field and the name used in `[checks] disabled`.  Each docstring says what the check catches, why
its threshold, and the nvidia-smi command that shows the same thing.

One guard surrounds every check: an exception inside a check becomes an `unknown` finding for
that check (never a drain), and its traceback is returned for logging.
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

from .config import Config
from .model import (Action, Finding, GpuProcess, GpuSnapshot, Mode, NodeSnapshot, ProbeStatus,
                    Severity, XidEvent)

GpuCheck = Callable[[GpuSnapshot, NodeSnapshot, "CheckContext"], Iterable[Finding]]
NodeCheck = Callable[[NodeSnapshot, "CheckContext"], Iterable[Finding]]


class CheckContext(NamedTuple):
    config: Config
    mode: Mode
    level: str = "quick"
    # Set by the --gpus or the job's GPUs: the checks that belong to "the GPUs under test"
    # (leftover processes, leaked memory, the CUDA probe) consider only these.
    selected: Optional[Tuple[int, ...]] = None

    def is_selected(self, index: int) -> bool:
        return self.selected is None or index in self.selected


class CheckSpec(NamedTuple):
    check_id: str
    scope: str  # "gpu" | "node"
    fn: Callable[..., Iterable[Finding]]


CATALOGUE: Dict[str, CheckSpec] = {}


def _register(check_id: str, scope: str) -> Callable[[Callable[..., Iterable[Finding]]], Callable[..., Iterable[Finding]]]:
    def wrap(fn: Callable[..., Iterable[Finding]]) -> Callable[..., Iterable[Finding]]:
        assert check_id not in CATALOGUE, check_id
        CATALOGUE[check_id] = CheckSpec(check_id, scope, fn)
        return fn
    return wrap


def gpu_check(check_id: str) -> Callable[[GpuCheck], GpuCheck]:
    return _register(check_id, "gpu")  # type: ignore[return-value]


def node_check(check_id: str) -> Callable[[NodeCheck], NodeCheck]:
    return _register(check_id, "node")  # type: ignore[return-value]


def label(gpu: GpuSnapshot) -> str:
    """How a message names a GPU: "GPU 3 (00000000:41:00.0, SN 1650522003820)"."""
    parts = [gpu.pci_bus_id or "PCI unknown"]
    if gpu.serial:
        parts.append(f"SN {gpu.serial}")
    elif gpu.uuid:
        parts.append(gpu.uuid)
    return f"GPU {gpu.index} ({', '.join(parts)})"


def _f(check: str, severity: Severity, gpu: Optional[GpuSnapshot], message: str,
       value: object = None, threshold: object = None, action: Action = Action.NONE) -> Finding:
    return Finding(check=check, severity=severity, message=message,
                   gpu=None if gpu is None else gpu.index, value=value,  # type: ignore[arg-type]
                   threshold=threshold, action=action)  # type: ignore[arg-type]


# --- node-wide ---------------------------------------------------------------------------

@node_check("nvml.init")
def check_nvml_init(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """NVML could not initialise: the driver is not loaded, or library and kernel module differ.

    Either way no job can use the GPUs, so it is a node fault (drain), except where the library
    is absent and sysfs lists no NVIDIA device: a node without GPUs is healthy.
    nvidia-smi equivalent: `nvidia-smi` printing "couldn't communicate with the NVIDIA driver".
    """
    error = node.nvml_error
    if error is None:
        return
    if error == "LIBRARY_NOT_FOUND":
        if node.sysfs_gpus == ():
            yield _f("nvml.init", Severity.INFO, None,
                     "no GPUs: libnvidia-ml.so.1 is absent and sysfs lists no NVIDIA device",
                     value=error)
            return
        if node.sysfs_gpus is None:
            yield _f("nvml.init", Severity.UNKNOWN, None,
                     f"libnvidia-ml.so.1 is absent and sysfs could not be read "
                     f"({node.sysfs_error}): cannot tell whether this node has GPUs", value=error)
            return
        yield _f("nvml.init", Severity.FAIL, None,
                 f"libnvidia-ml.so.1 is absent but sysfs lists {len(node.sysfs_gpus)} NVIDIA "
                 f"GPU(s): install the driver", value=error, action=Action.DRAIN)
        return
    action = Action.REBOOT if error == "LIB_RM_VERSION_MISMATCH" else Action.DRAIN
    hint = ("the driver library and kernel module versions differ: reboot"
            if action is Action.REBOOT else "check the NVIDIA driver (dmesg, nvidia-smi)")
    yield _f("nvml.init", Severity.FAIL, None, f"NVML failed to initialise: {error}; {hint}",
             value=error, action=action)


@node_check("gpu.count")
def check_gpu_count(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Fewer GPUs than the node should have: one fell off the bus, or was never initialised.

    sysfs listing more NVIDIA GPUs than NVML reports means a GPU the driver lost (fail: reboot).
    NVML reporting more than sysfs is no fault (simulated GPUs have no PCI device).  With
    `expected_gpus` set, fewer GPUs in NVML fail; more only warn.
    nvidia-smi equivalent: `nvidia-smi -L | wc -l` against `lspci -d 10de: | wc -l`.
    """
    if node.nvml_error is not None:
        return
    count = len(node.gpus)
    if node.sysfs_gpus is not None and len(node.sysfs_gpus) > count:
        yield _f("gpu.count", Severity.FAIL, None,
                 f"sysfs lists {len(node.sysfs_gpus)} NVIDIA GPUs but NVML reports {count}: a GPU "
                 f"fell off the bus; reboot (power-cycle) the node", value=count,
                 threshold=len(node.sysfs_gpus), action=Action.REBOOT)
    expected = ctx.config.expected_gpus
    if expected is not None and count < expected:
        yield _f("gpu.count", Severity.FAIL, None,
                 f"NVML reports {count} GPUs, expected {expected}: a GPU is missing; reboot the "
                 f"node and check the GPUs", value=count, threshold=expected, action=Action.REBOOT)
    elif expected is not None and count > expected:
        yield _f("gpu.count", Severity.WARN, None,
                 f"NVML reports {count} GPUs, more than expected_gpus = {expected}: fix the "
                 f"config", value=count, threshold=expected)


# NVIDIA's Xid catalogue, immediate actions: (severity, action, what it means)
XID_CATALOGUE: Dict[int, Tuple[Severity, Action, str]] = {
    13: (Severity.INFO, Action.NONE, "graphics engine exception, usually the application"),
    31: (Severity.INFO, Action.NONE, "GPU memory page fault, usually the application"),
    43: (Severity.INFO, Action.NONE, "GPU stopped processing, usually the application"),
    45: (Severity.INFO, Action.NONE, "preemptive cleanup after an earlier error"),
    68: (Severity.INFO, Action.NONE, "video processor exception, usually the application"),
    48: (Severity.FAIL, Action.RESET, "double-bit ECC error: reset the GPU"),
    62: (Severity.FAIL, Action.RESET, "internal micro-controller halt: reset the GPU"),
    63: (Severity.WARN, Action.NONE, "ECC page retirement or row remap recorded: watch"),
    64: (Severity.FAIL, Action.RMA, "ECC page retirement or row remap failed: RMA the GPU"),
    74: (Severity.FAIL, Action.RESET, "NVLink error: reset the GPU, or reboot"),
    79: (Severity.FAIL, Action.REBOOT, "GPU has fallen off the bus: power-cycle the node"),
    92: (Severity.WARN, Action.NONE, "high single-bit ECC error rate: watch"),
    94: (Severity.WARN, Action.NONE, "contained ECC error: the GPU stays usable"),
    95: (Severity.FAIL, Action.RESET, "uncontained ECC error: reset the GPU"),
    109: (Severity.FAIL, Action.RESET, "context switch timeout: reset the GPU"),
    119: (Severity.FAIL, Action.RESET, "GSP RPC timeout: reset the GPU"),
    120: (Severity.FAIL, Action.RESET, "GSP error: reset the GPU"),
    136: (Severity.FAIL, Action.RESET, "link training failed: reset the GPU"),
    140: (Severity.FAIL, Action.RESET, "unrecovered ECC error: reset the GPU"),
    143: (Severity.FAIL, Action.RESET, "GPU initialisation failure: reset the GPU"),
}
FALLEN_OFF_BUS = (Severity.FAIL, Action.REBOOT, "GPU has fallen off the bus: power-cycle the node")


def xid_severity(event: XidEvent) -> Tuple[Severity, Action, str]:
    if event.xid is None:
        return FALLEN_OFF_BUS
    return XID_CATALOGUE.get(event.xid, (Severity.WARN, Action.NONE,
                                         "not in our catalogue: look it up in NVIDIA's Xid list"))


@node_check("xid")
def check_xid(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Every Xid the kernel logged in the window, with its severity from NVIDIA's catalogue.

    Application Xids (13, 31, 43, 45, 68) are info: the job's fault, not the GPU's.  Hardware
    Xids (48, 62, 64, 74, 79, 95, 109, 119, 120, 136, 140, 143) fail with NVIDIA's immediate
    action; 63, 92, 94 and unknown codes warn.  The window is the job's (epilog) or since boot
    (by hand), so an old Xid does not keep a node drained until the log rotates.
    nvidia-smi equivalent: `dmesg | grep 'NVRM: Xid'`.
    """
    if ctx.mode is Mode.PROLOG:
        return  # Xids belong to the job that ran when they happened: the epilog judges them
    log = node.kernel_log
    if log.error:
        yield _f("xid", Severity.UNKNOWN, None, f"Xid events not checked: {log.error}")
        return
    for event in log.events:
        severity, action, meaning = xid_severity(event)
        gpu = _gpu_at(node, event.pci)
        who = label(gpu) if gpu else f"GPU at PCI {event.pci} (not known to NVML)"
        code = "fallen off the bus" if event.xid is None else f"Xid {event.xid}"
        yield _f("xid", severity, gpu, f"{who}: {code}: {meaning}. Log: {event.message[:160]}",
                 value=event.xid if event.xid is not None else "fallen_off_bus", action=action)


def _gpu_at(node: NodeSnapshot, pci: str) -> Optional[GpuSnapshot]:
    from .nvml import gpu_by_pci

    try:
        return gpu_by_pci(node.gpus, pci)
    except ValueError:
        return None


@node_check("slurm.job_gpus")
def check_slurm_job_gpus(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The job's GPU list from Slurm could not be read, so we cannot tell which GPUs to probe.

    Unknown, never fail: a malformed environment is not a GPU fault, and must not drain.
    The GPUs then get the NVML checks only, and no CUDA probe.
    """
    job = node.job
    if job is not None and job.gpu_ids_error:
        yield _f("slurm.job_gpus", Severity.UNKNOWN, None,
                 f"cannot tell the job's GPUs: {job.gpu_ids_error}; probed none, checked all "
                 f"with NVML only", value="malformed")


@node_check("state.baseline")
def check_state_baseline(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The epilog found no usable prolog baseline, so it judges absolute counters.

    Info: errors cannot be attributed to this job, but absolute volatile counters still fail.
    """
    if ctx.mode is Mode.EPILOG and node.baseline_error:
        yield _f("state.baseline", Severity.INFO, None,
                 f"{node.baseline_error}; judging absolute counters")


# --- per GPU -------------------------------------------------------------------------------

@gpu_check("gpu.lost")
def check_gpu_lost(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """NVML answers GPU_IS_LOST, RESET_REQUIRED or UNKNOWN for this GPU, or its calls hang.

    The GPU cannot run a job until it is reset (often only a reboot brings it back).
    nvidia-smi equivalent: "Unable to determine the device handle for GPU ...: GPU is lost".
    """
    if gpu.lost is None:
        return
    if gpu.lost == "TIMEOUT":
        message = (f"{label(gpu)}: NVML calls did not return within "
                   f"{ctx.config.nvml_timeout_s:g} s; reset the GPU or reboot")
    else:
        message = f"{label(gpu)}: NVML reports {gpu.lost}; reset the GPU or reboot the node"
    yield _f("gpu.lost", Severity.FAIL, gpu, message, value=gpu.lost,
             action=Action.REBOOT if gpu.lost == "GPU_IS_LOST" else Action.RESET)


@gpu_check("ecc.mode")
def check_ecc_mode(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """ECC is disabled, or a mode change is pending until the next GPU reset.

    Without ECC, memory errors silently corrupt results; a pending change means the running mode
    is not the configured one.  Boards without ECC (consumer) are not reported.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC` ("Current" / "Pending").
    """
    if gpu.ecc_mode_current is None:
        return
    if not gpu.ecc_mode_current:
        yield _f("ecc.mode", Severity.WARN, gpu, f"{label(gpu)}: ECC is disabled; enable it "
                 f"(nvidia-smi -e 1) and reset the GPU", value="disabled", threshold="enabled")
    if gpu.ecc_mode_pending is not None and gpu.ecc_mode_pending != gpu.ecc_mode_current:
        pending = "enabled" if gpu.ecc_mode_pending else "disabled"
        yield _f("ecc.mode", Severity.WARN, gpu, f"{label(gpu)}: ECC change to {pending} is "
                 f"pending until the GPU is reset", value=f"pending_{pending}",
                 action=Action.RESET)


def _delta(now: Optional[int], before: Optional[int]) -> Optional[int]:
    if now is None or before is None:
        return None
    return now - before


@gpu_check("ecc.volatile_uncorrected")
def check_ecc_volatile_uncorrected(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Uncorrectable (double-bit) ECC errors since the driver loaded: fail when > 0.

    One is enough: the data of whatever ran is suspect and CUDA raises
    cudaErrorECCUncorrectable until the GPU is reset.  This is the incident's fault.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC`, Volatile, DRAM Uncorrectable.
    """
    count = gpu.ecc_volatile_uncorrected
    if not count:
        return
    base = node.baseline.for_uuid(gpu.uuid) if node.baseline else None
    new = _delta(count, base.ecc_volatile_uncorrected if base else None)
    during = f" ({new} new during job)" if new else ""
    yield _f("ecc.volatile_uncorrected", Severity.FAIL, gpu,
             f"{label(gpu)}: {count} volatile uncorrected ECC errors{during}, limit 0. "
             f"Drain; reset the GPU.", value=count, threshold=0, action=Action.RESET)


@gpu_check("ecc.volatile_corrected")
def check_ecc_volatile_corrected(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Corrected (single-bit) ECC errors since the driver loaded, above `thresholds.ecc_volatile_corrected`.

    Each is harmless, but a high rate predicts row remapping or page retirement; warn only.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC`, Volatile, DRAM Correctable.
    """
    limit = ctx.config.thresholds.ecc_volatile_corrected
    count = gpu.ecc_volatile_corrected
    if count is not None and count > limit:
        yield _f("ecc.volatile_corrected", Severity.WARN, gpu,
                 f"{label(gpu)}: {count} volatile corrected ECC errors, limit {limit}; watch for "
                 f"row remaps", value=count, threshold=limit)


@gpu_check("ecc.aggregate_uncorrected")
def check_ecc_aggregate_uncorrected(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Uncorrectable ECC errors over the board's life: history (info), not a present fault.

    In the epilog, growth since the prolog's baseline means the job hit a DBE even where the
    volatile counter was reset by a driver reload: that fails.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC`, Aggregate, DRAM Uncorrectable.
    """
    count = gpu.ecc_aggregate_uncorrected
    if not count:
        return
    base = node.baseline.for_uuid(gpu.uuid) if node.baseline else None
    new = _delta(count, base.ecc_aggregate_uncorrected if base else None)
    if ctx.mode is Mode.EPILOG and new and new > 0:
        yield _f("ecc.aggregate_uncorrected", Severity.FAIL, gpu,
                 f"{label(gpu)}: {new} uncorrected ECC errors during the job ({count} in the "
                 f"board's life). Drain; reset the GPU.", value=new, threshold=0,
                 action=Action.RESET)
        return
    yield _f("ecc.aggregate_uncorrected", Severity.INFO, gpu,
             f"{label(gpu)}: {count} uncorrected ECC errors in the board's life (history)",
             value=count)


@gpu_check("retired_pages.pending")
def check_retired_pages_pending(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A page retirement waits for the next GPU reset (pre-Ampere boards).

    Until then the bad page stays in use; warn and ask for a reset.
    nvidia-smi equivalent: `nvidia-smi -q -d PAGE_RETIREMENT`, Pending Page Blacklist.
    """
    if gpu.retired_pending:
        yield _f("retired_pages.pending", Severity.WARN, gpu,
                 f"{label(gpu)}: page retirement pending; reset the GPU to apply it",
                 value=True, threshold=False, action=Action.RESET)


@gpu_check("retired_pages.count")
def check_retired_pages_count(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Retired pages in total at or above `thresholds.retired_pages` (NVIDIA's RMA limit, 60).

    Below the limit retirement is the GPU healing itself (info when any DBE page is retired).
    nvidia-smi equivalent: `nvidia-smi -q -d PAGE_RETIREMENT`.
    """
    if gpu.retired_sbe is None and gpu.retired_dbe is None:
        return
    total = (gpu.retired_sbe or 0) + (gpu.retired_dbe or 0)
    limit = ctx.config.thresholds.retired_pages
    if total >= limit:
        yield _f("retired_pages.count", Severity.FAIL, gpu,
                 f"{label(gpu)}: {total} retired pages, limit {limit}: RMA the GPU",
                 value=total, threshold=limit, action=Action.RMA)
    elif gpu.retired_dbe:
        yield _f("retired_pages.count", Severity.INFO, gpu,
                 f"{label(gpu)}: {total} retired pages ({gpu.retired_dbe} for DBEs), limit {limit}",
                 value=total, threshold=limit)


@gpu_check("remap.pending")
def check_remap_pending(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A row remap waits for the next GPU reset (Ampere and later).

    The GPU works, but the bad row stays in use until reset; warn and ask for a reset.
    nvidia-smi equivalent: `nvidia-smi -q -d ROW_REMAPPER`, Pending.
    """
    if gpu.remap_pending:
        yield _f("remap.pending", Severity.WARN, gpu,
                 f"{label(gpu)}: row remap pending; reset the GPU to apply it",
                 value=True, threshold=False, action=Action.RESET)


@gpu_check("remap.failure")
def check_remap_failure(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A row remap failed: the bank has no spare rows left.  NVIDIA's RMA criterion.

    nvidia-smi equivalent: `nvidia-smi -q -d ROW_REMAPPER`, Remapping Failure Occurred.
    """
    if gpu.remap_failure:
        yield _f("remap.failure", Severity.FAIL, gpu,
                 f"{label(gpu)}: row remapping failed; RMA the GPU", value=True, threshold=False,
                 action=Action.RMA)


RECOVERY_ACTIONS = {1: ("GPU_RESET", Action.RESET), 2: ("NODE_REBOOT", Action.REBOOT),
                    3: ("DRAIN_P2P", Action.DRAIN), 4: ("DRAIN_AND_RESET", Action.RESET)}


@gpu_check("recovery_action")
def check_recovery_action(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The driver itself says the GPU needs recovery (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).

    Anything but NONE fails, naming the driver's action.  Older drivers lack the field.
    nvidia-smi equivalent: `nvidia-smi -q`, "GPU Recovery Action".
    """
    value = gpu.recovery_action
    if not value:
        return
    name, action = RECOVERY_ACTIONS.get(value, (f"ACTION_{value}", Action.DRAIN))
    yield _f("recovery_action", Severity.FAIL, gpu,
             f"{label(gpu)}: the driver asks for recovery action {name}", value=name,
             threshold="NONE", action=action)


@gpu_check("memory.leaked")
def check_memory_leaked(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Memory in use with no process on the GPU, above `thresholds.memory_leaked_mib`.

    A context that outlived its process (the incident's "CUDA out of memory" at the next job's
    start).  Fails on the GPUs under test in the prolog, warns otherwise.
    nvidia-smi equivalent: `nvidia-smi --query-gpu=memory.used --format=csv` with no process.
    """
    if not ctx.is_selected(gpu.index) or gpu.memory_used_mib is None or gpu.processes is None:
        return
    limit = ctx.config.thresholds.memory_leaked_mib
    if gpu.processes or gpu.memory_used_mib <= limit:
        return
    severity = Severity.FAIL if ctx.mode is Mode.PROLOG else Severity.WARN
    yield _f("memory.leaked", severity, gpu,
             f"{label(gpu)}: {gpu.memory_used_mib} MiB in use with no process, limit {limit} MiB; "
             f"reset the GPU", value=gpu.memory_used_mib, threshold=limit,
             action=Action.RESET if severity is Severity.FAIL else Action.NONE)


@gpu_check("processes.leftover")
def check_processes_leftover(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Compute processes on a GPU that the job is about to get (prolog) or just released (epilog).

    Only the job's GPUs count: on a shared node other jobs legitimately use the rest.  Fail in
    the prolog (the job would start out of memory); warn in the epilog (Slurm could not kill
    them); info by hand (the GPU is busy).
    nvidia-smi equivalent: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`.
    """
    if not gpu.processes or not ctx.is_selected(gpu.index):
        return
    who = ", ".join(_describe(p) for p in gpu.processes[:4])
    more = f" and {len(gpu.processes) - 4} more" if len(gpu.processes) > 4 else ""
    if ctx.mode is Mode.PROLOG:
        yield _f("processes.leftover", Severity.FAIL, gpu,
                 f"{label(gpu)}: {len(gpu.processes)} process(es) left on the GPU: {who}{more}; "
                 f"kill them or reset the GPU", value=len(gpu.processes), threshold=0,
                 action=Action.DRAIN)
    elif ctx.mode is Mode.EPILOG:
        yield _f("processes.leftover", Severity.WARN, gpu,
                 f"{label(gpu)}: {len(gpu.processes)} process(es) outlived the job: {who}{more}",
                 value=len(gpu.processes), threshold=0)
    else:
        yield _f("processes.leftover", Severity.INFO, gpu,
                 f"{label(gpu)}: in use by {who}{more}", value=len(gpu.processes))


def _describe(proc: GpuProcess) -> str:
    mem = f" {proc.used_mib} MiB" if proc.used_mib is not None else ""
    return f"pid {proc.pid} ({proc.user or '?'}: {(proc.command or '?')[:40]}){mem}"


@gpu_check("thermal.slowdown")
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


HW_SLOWDOWN_BITS = {0x8: "HW_SLOWDOWN", 0x20: "SW_THERMAL", 0x40: "HW_THERMAL",
                    0x80: "HW_POWER_BRAKE"}


@gpu_check("clocks.hw_slowdown")
def check_clocks_hw_slowdown(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Clocks held down by hardware or thermal protection (not by idleness or power capping).

    HW slowdown, HW/SW thermal slowdown and power brake point at cooling, power supply or a
    failing board; jobs run slowly.  Warn.
    nvidia-smi equivalent: `nvidia-smi -q -d PERFORMANCE`, "Clocks Event Reasons".
    """
    reasons = gpu.clocks_event_reasons
    if not reasons:
        return
    active = [name for bit, name in HW_SLOWDOWN_BITS.items() if reasons & bit]
    if active:
        yield _f("clocks.hw_slowdown", Severity.WARN, gpu,
                 f"{label(gpu)}: clocks slowed by {', '.join(active)}; check cooling and power",
                 value=",".join(active), threshold="none")


@gpu_check("pcie.width_degraded")
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


@gpu_check("persistence_mode")
def check_persistence_mode(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Persistence mode is off.

    Without it the driver may unload between jobs: each job pays the initialisation and the
    volatile ECC counters reset (the epilog then relies on aggregate counters, which it diffs).
    A configuration choice, not a fault: info.
    nvidia-smi equivalent: `nvidia-smi -q`, "Persistence Mode".
    """
    if gpu.persistence_mode is False:
        yield _f("persistence_mode", Severity.INFO, gpu,
                 f"{label(gpu)}: persistence mode is off; consider nvidia-persistenced",
                 value="disabled", threshold="enabled")


@gpu_check("cuda.probe")
def check_cuda_probe(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A real CUDA context could not allocate, write and read back memory on the GPU.

    Catches what NVML does not show: a GPU that initialises but cannot allocate
    (ECC_UNCORRECTABLE, OUT_OF_MEMORY from a leaked context), corrupts data, or hangs.
    Fails the GPU; the probe has a deadline and its child is killed past it.
    nvidia-smi equivalent: none (dcgmi diag -r 1 comes closest).
    """
    for probe in node.probes:
        if probe.index != gpu.index:
            continue
        if probe.status is ProbeStatus.OK:
            return
        if probe.status is ProbeStatus.NOT_RUN:
            yield _f("cuda.probe", Severity.UNKNOWN, gpu, f"{label(gpu)}: CUDA probe not run: "
                     f"{probe.detail}", value=probe.status.value)
            return
        value = probe.cu_name or probe.status.value
        action = Action.REBOOT if probe.cu_result == 802 else (
            Action.RMA if probe.status is ProbeStatus.MISMATCH else Action.RESET)
        if probe.cu_result == 802:
            hint = "start nvidia-fabricmanager or reboot"
        elif probe.status is ProbeStatus.MISMATCH:
            hint = "GPU memory returned wrong data: drain; RMA if it recurs after a reset"
        else:
            hint = "reset the GPU"
        yield _f("cuda.probe", Severity.FAIL, gpu,
                 f"{label(gpu)}: CUDA probe {probe.status.value}: {probe.detail}; {hint}",
                 value=value, threshold="ok", action=action)


# --- running the catalogue ---------------------------------------------------------------

class CheckCrash(NamedTuple):
    check: str
    gpu: Optional[int]
    traceback: str


def run_checks(node: NodeSnapshot, ctx: CheckContext) -> Tuple[List[Finding], List[CheckCrash]]:
    """All enabled checks over the snapshot; a check that raises becomes an unknown finding."""
    findings: List[Finding] = []
    crashes: List[CheckCrash] = []
    for spec in CATALOGUE.values():
        if not ctx.config.enabled(spec.check_id):
            continue
        if spec.scope == "node":
            _guard(spec, None, lambda: spec.fn(node, ctx), findings, crashes)
            continue
        for gpu in node.gpus:
            if gpu.lost is not None and spec.check_id != "gpu.lost":
                continue
            _guard(spec, gpu.index, functools.partial(spec.fn, gpu, node, ctx), findings, crashes)
    return findings, crashes


def _guard(spec: CheckSpec, gpu: Optional[int], call: Callable[[], Iterable[Finding]],
           findings: List[Finding], crashes: List[CheckCrash]) -> None:
    try:
        findings.extend(list(call()))
    except Exception as exc:  # noqa: BLE001 - a bug in one check must never drain or crash
        import traceback

        crashes.append(CheckCrash(spec.check_id, gpu, traceback.format_exc()))
        where = f" on GPU {gpu}" if gpu is not None else ""
        findings.append(Finding(check=spec.check_id, severity=Severity.UNKNOWN, gpu=gpu,
                                message=f"check {spec.check_id}{where} failed in gpu-healthcheck "
                                        f"itself ({type(exc).__name__}: {exc}); see the log",
                                value="internal_error"))
