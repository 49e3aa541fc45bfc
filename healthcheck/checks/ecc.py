"""Memory health: ECC mode and counters, retired pages, row remapping, the driver's recovery action."""

from __future__ import annotations

import functools
from typing import Dict, Iterator, Optional, Tuple

from ..model import Action, Finding, GpuSnapshot, Mode, NodeSnapshot, Severity
from .registry import CheckContext, delta, finding as _f, gpu_check, label


@gpu_check("ecc.mode", severity=Severity.WARN, action=Action.RESET)
def check_ecc_mode(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """ECC is disabled, or a mode change is pending until the next GPU reset.

    Without ECC, memory errors silently corrupt results; a pending change means the running mode
    is not the configured one.  Boards without ECC (consumer) are not reported.  ECC off is
    info, not a warning, where it is the site's choice: `expect_ecc = false`, or (the default,
    `expect_ecc` unset) a workstation board, which ships with ECC off (`ecc_off_by_default`);
    data-centre GPUs ship with it on, so off there still warns.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC` ("Current" / "Pending").
    """
    if gpu.ecc_mode_current is None:
        return
    if not gpu.ecc_mode_current:
        expected = ctx.config.expect_ecc
        if expected is False or (expected is None and ecc_off_by_default(gpu.name)):
            why = "expect_ecc = false" if expected is False else "the board ships with ECC off"
            yield _f("ecc.mode", Severity.INFO, gpu, f"{label(gpu)}: ECC is disabled ({why})",
                     value="disabled", action=Action.NONE)
        else:
            yield _f("ecc.mode", Severity.WARN, gpu, f"{label(gpu)}: ECC is disabled; enable it "
                     f"(nvidia-smi -e 1) and reset the GPU", value="disabled", threshold="enabled")
    if gpu.ecc_mode_pending is not None and gpu.ecc_mode_pending != gpu.ecc_mode_current:
        pending = "enabled" if gpu.ecc_mode_pending else "disabled"
        yield _f("ecc.mode", Severity.WARN, gpu, f"{label(gpu)}: ECC change to {pending} is "
                 f"pending until the GPU is reset", value=f"pending_{pending}",
                 action=Action.RESET)


# Product lines that ship with ECC off (NVIDIA's workstation and consumer boards: RTX A5000,
# RTX 4000 SFF Ada and RTX PRO 6000 Workstation Edition replays show "Current: Disabled" as
# shipped); a "Server Edition" of such a board is a data-centre part and ships with ECC on.
_ECC_OFF_LINES = ("rtx", "quadro", "geforce", "titan")


def ecc_off_by_default(name: Optional[str]) -> bool:
    """Whether a board of this NVML name ships with ECC off (pure)."""
    words = (name or "").lower().replace("-", " ").split()
    return any(w in _ECC_OFF_LINES for w in words) and "server" not in words


@gpu_check("ecc.volatile_uncorrected", severity=Severity.FAIL, action=Action.RESET)
def check_ecc_volatile_uncorrected(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Uncorrectable (double-bit) ECC errors since the driver loaded: fail when > 0.

    One is enough: the data of whatever ran is suspect and CUDA raises
    cudaErrorECCUncorrectable until the GPU is reset.  This is the incident's fault.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC`, Volatile, DRAM Uncorrectable.
    """
    count = gpu.ecc_volatile_uncorrected
    if not count:
        return
    base = node.baseline_of(gpu)
    new = delta(count, base.ecc_volatile_uncorrected if base else None)
    during = f" ({new} new during job)" if new else ""
    yield _f("ecc.volatile_uncorrected", Severity.FAIL, gpu,
             f"{label(gpu)}: {count} volatile uncorrected ECC errors{during}, limit 0. "
             f"Drain; reset the GPU.", value=count, threshold=0, action=Action.RESET)


@gpu_check("ecc.volatile_corrected", severity=Severity.WARN, action=Action.NONE,
           threshold_key="thresholds.ecc_volatile_corrected")
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


@gpu_check("ecc.aggregate_uncorrected", severity=Severity.FAIL, action=Action.RESET)
def check_ecc_aggregate_uncorrected(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Uncorrectable ECC errors over the board's life: history (info), not a present fault.

    In the epilog, growth since the prolog's baseline means the job hit a DBE even where the
    volatile counter was reset by a driver reload: that fails.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC`, Aggregate, DRAM Uncorrectable.
    """
    count = gpu.ecc_aggregate_uncorrected
    if not count:
        return
    base = node.baseline_of(gpu)
    new = delta(count, base.ecc_aggregate_uncorrected if base else None)
    if ctx.mode is Mode.EPILOG and new and new > 0:
        yield _f("ecc.aggregate_uncorrected", Severity.FAIL, gpu,
                 f"{label(gpu)}: {new} uncorrected ECC errors during the job ({count} in the "
                 f"board's life). Drain; reset the GPU.", value=new, threshold=0,
                 action=Action.RESET)
        return
    yield _f("ecc.aggregate_uncorrected", Severity.INFO, gpu,
             f"{label(gpu)}: {count} uncorrected ECC errors in the board's life (history)",
             value=count)


@gpu_check("retired_pages.pending", severity=Severity.WARN, action=Action.RESET)
def check_retired_pages_pending(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A page retirement waits for the next GPU reset (pre-Ampere boards).

    Until then the bad page stays in use; warn and ask for a reset.
    nvidia-smi equivalent: `nvidia-smi -q -d PAGE_RETIREMENT`, Pending Page Blacklist.
    """
    if gpu.retired_pending:
        yield _f("retired_pages.pending", Severity.WARN, gpu,
                 f"{label(gpu)}: page retirement pending; reset the GPU to apply it",
                 value=True, threshold=False, action=Action.RESET)


@gpu_check("retired_pages.count", severity=Severity.FAIL, action=Action.RMA,
           threshold_key="thresholds.retired_pages")
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


@gpu_check("remap.pending", severity=Severity.WARN, action=Action.RESET)
def check_remap_pending(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A row remap waits for the next GPU reset (Ampere and later).

    The GPU works, but the bad row stays in use until reset; warn and ask for a reset.
    nvidia-smi equivalent: `nvidia-smi -q -d ROW_REMAPPER`, Pending.
    """
    if gpu.remap_pending:
        yield _f("remap.pending", Severity.WARN, gpu,
                 f"{label(gpu)}: row remap pending; reset the GPU to apply it",
                 value=True, threshold=False, action=Action.RESET)


@gpu_check("remap.failure", severity=Severity.FAIL, action=Action.RMA)
def check_remap_failure(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A row remap failed: the bank has no spare rows left.  NVIDIA's RMA criterion.

    nvidia-smi equivalent: `nvidia-smi -q -d ROW_REMAPPER`, Remapping Failure Occurred.
    """
    if gpu.remap_failure:
        yield _f("remap.failure", Severity.FAIL, gpu,
                 f"{label(gpu)}: row remapping failed; RMA the GPU", value=True, threshold=False,
                 action=Action.RMA)


# NVIDIA's "GPU Memory Error Management", RMA Policy Thresholds for SRAM Failure Modes: more than
# 4 uncorrectable unique events within one address bank of a parity-protected SRAM (more than 2
# for SEC-DED) set the SRAM Threshold Exceeded flag, the RMA criterion.
SRAM_RMA_UNCORRECTED = 4


@gpu_check("ecc.sram_threshold", severity=Severity.FAIL, action=Action.RMA)
def check_ecc_sram_threshold(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The GPU's uncorrectable SRAM errors passed the threshold for field diagnostics.

    NVML's SRAM ECC error status (Ampere and later) sets `bThresholdExceeded` when "the error
    threshold of field diag is exceeded" (nvml.h).  NVIDIA's Xid catalogue (Xid 48's workflow:
    "check SRAM Error Threshold flag ... If set RUN_FIELDDIAG") sends such a GPU to field
    diagnostics instead of a reset: a reset clears the volatile counters but not the SRAM that
    keeps failing.  Fail, action rma: a person runs NVIDIA's field diagnostics and returns the
    GPU if they fail; the repair loop never resets it.
    Without the flag, more than 4 uncorrectable SRAM errors since manufacture (NVML's aggregate
    parity + SEC-DED counts, all banks together) warn, suggesting RMA: NVIDIA's "RMA Policy
    Thresholds for SRAM Failure Modes" set the flag at more than 4 unique uncorrectable events
    within one address bank, and the aggregate is what a node shows of that (it does not say
    which bank, so it never drains alone).
    nvidia-smi equivalent: `nvidia-smi -q -d ECC`, Aggregate, "SRAM Threshold Exceeded".
    """
    count = gpu.sram_aggregate_uncorrected
    if not gpu.sram_threshold_exceeded and count is not None and count > SRAM_RMA_UNCORRECTED:
        yield _f("ecc.sram_threshold", Severity.WARN, gpu,
                 f"{label(gpu)}: {count} uncorrectable SRAM errors since manufacture, more than "
                 f"{SRAM_RMA_UNCORRECTED} (NVIDIA's RMA policy for SRAM: more than 4 within one "
                 f"address bank); run NVIDIA's field diagnostics and RMA the GPU if they fail",
                 value=count, threshold=SRAM_RMA_UNCORRECTED, action=Action.NONE)
    if gpu.sram_threshold_exceeded:
        count = gpu.sram_aggregate_uncorrected
        errors = f" ({count} uncorrectable SRAM errors since manufacture)" if count else ""
        yield _f("ecc.sram_threshold", Severity.FAIL, gpu,
                 f"{label(gpu)}: the SRAM error threshold for field diagnostics is exceeded"
                 f"{errors}; run NVIDIA's field diagnostics and RMA the GPU if they fail",
                 value=True, threshold=False, action=Action.RMA)


@gpu_check("remap.histogram", severity=Severity.WARN, action=Action.NONE)
def check_remap_histogram(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A memory bank has no row-remap availability left (the histogram's "None" bucket).

    Each bank keeps spare rows for remapping; one with none left cannot absorb the next
    uncorrectable error, which then becomes a remap failure: NVIDIA's RMA criterion (Xid 64,
    "GPU Memory Error Management", row remapping).  Warn now, while the GPU still works; "Low"
    banks are shown as info.
    nvidia-smi equivalent: `nvidia-smi -q -d ROW_REMAPPER`, "Remapping Histogram".
    """
    hist = gpu.remap_histogram
    if hist is None:
        return
    low, none = hist[3], hist[4]
    if none:
        yield _f("remap.histogram", Severity.WARN, gpu,
                 f"{label(gpu)}: {none} memory bank(s) with no remap availability left ({low} "
                 f"low): the next uncorrectable error there means RMA; plan the replacement",
                 value=none, threshold=0)
    elif low:
        yield _f("remap.histogram", Severity.INFO, gpu,
                 f"{label(gpu)}: {low} memory bank(s) with low remap availability", value=low)


# NVML_GPU_RECOVERY_ACTION_*: nvml.h names 0-4 everywhere; NVML 615+ adds 5-7.  A value is named
# only from what the installed pynvml defines, never by guessing the numbering past 4.
RECOVERY_ACTIONS = {1: ("GPU_RESET", Action.RESET), 2: ("NODE_REBOOT", Action.REBOOT),
                    3: ("DRAIN_P2P", Action.DRAIN), 4: ("DRAIN_AND_RESET", Action.RESET)}
_RECOVERY_BY_NAME = {"GPU_RESET": Action.RESET, "NODE_REBOOT": Action.REBOOT,
                     "DRAIN_P2P": Action.DRAIN, "DRAIN_AND_RESET": Action.RESET,
                     "RECOVER_IMEX_DOMAIN": Action.DRAIN, "BUS_RESET": Action.RESET,
                     "SYSTEM_REBOOT": Action.REBOOT}


def recovery_action_name(value: int, known: Optional[Dict[int, str]] = None) -> Tuple[str, Action]:
    """(name, action) of a recovery action value: named from nvml.h 0-4, else from `known`
    (pynvml's NVML_GPU_RECOVERY_ACTION_* constants); any other value is "recovery action N"."""
    if value in RECOVERY_ACTIONS:
        return RECOVERY_ACTIONS[value]
    name = (known if known is not None else _pynvml_recovery_names()).get(value)
    if name is not None:
        return name, _RECOVERY_BY_NAME.get(name, Action.DRAIN)
    return f"recovery action {value}", Action.DRAIN


@functools.lru_cache(maxsize=1)
def _pynvml_recovery_names() -> Dict[int, str]:
    try:
        import pynvml
    except ImportError:
        return {}
    prefix = "NVML_GPU_RECOVERY_ACTION_"
    return {int(v): k[len(prefix):] for k, v in vars(pynvml).items()
            if k.startswith(prefix) and isinstance(v, int)}


@gpu_check("recovery_action", severity=Severity.FAIL, action=Action.REBOOT)
def check_recovery_action(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The driver itself says the GPU needs recovery (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).

    Anything but NONE fails with the driver's action: GPU_RESET, NODE_REBOOT, DRAIN_P2P,
    DRAIN_AND_RESET (nvml.h), and past 4 the names the installed pynvml knows (RECOVER_IMEX_DOMAIN,
    BUS_RESET, SYSTEM_REBOOT in NVML 615+); any other non-zero value fails as "recovery action N"
    and drains, never assuming what the number means.  Older drivers lack the field.
    nvidia-smi equivalent: `nvidia-smi -q`, "GPU Recovery Action".
    """
    value = gpu.recovery_action
    if not value:
        return
    name, action = recovery_action_name(value)
    yield _f("recovery_action", Severity.FAIL, gpu,
             f"{label(gpu)}: the driver asks for {name if name.startswith('recovery') else 'recovery action ' + name}",
             value=name.replace(" ", "_"), threshold="NONE", action=action)
