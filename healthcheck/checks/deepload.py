"""--level deep, judged: the sustained compute load (read/deepload.py) and what a GPU shared
with live co-tenants may conclude (pure: no reader, no CUDA).

- deep.compute_wrong: an output element of a compute launch differs from its closed form.
- deep.throttle: NVML named a hardware or thermal reason for holding the clocks down while the
  load ran, and when it first did.
- deep.clock: the SM clock the GPU sustained under load, against its maximum and its siblings.
- deep.tensor: the tensor-core GEMM's TFLOPS against the siblings' median (checks/deep.py's
  judge_figure, the same thresholds as every deep figure).
- deep.after: what NVML's error counters and the kernel log say the tests provoked.

On a GPU that live co-tenants share (gres/shard, gres/mps: model.co_tenant_mib), their work and
memory are in every figure: each deep finding there is unknown, never a fail (deepshared.py).
"""

from __future__ import annotations

from typing import Iterator, Optional

from ..model import Action, Finding, GpuSnapshot, NodeSnapshot, Severity
from .board import HW_SLOWDOWN_BITS
from .deep import deep_of, judge_figure
from .deepshared import shared
from .registry import CheckContext, finding as _f, gpu_at, gpu_check, label

SW_POWER_CAP = 0x4
THROTTLE_BITS = {**HW_SLOWDOWN_BITS, SW_POWER_CAP: "SW_POWER_CAP"}
# nvidia-smi -q's "HW Slowdown": "reducing the core clocks by a factor of 2 or more": a GPU held
# at half its maximum SM clock under load is slowed by its hardware, whatever NVML names.
CLOCK_FRACTION = 0.5
KERNEL_WORDS = {"hc_fma": "FP32 FMA", "hc_mma_bf16": "BF16 tensor-core GEMM",
                "hc_mma_f16": "FP16 tensor-core GEMM"}


def reasons_named(mask: int) -> list:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


@gpu_check("deep.compute_wrong", severity=Severity.FAIL, action=Action.RMA)
def check_deep_compute_wrong(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A compute launch under load returned a wrong answer: silent data corruption.

    Every launch of the sustained load (FP32 FMA; BF16 and FP16 tensor-core GEMM on sm_80 and
    newer) is compared element by element with its closed form on the device.  The kernels
    compute exactly in IEEE arithmetic (every value has at most 18 significant bits), so a
    healthy GPU is never off by one bit: one wrong element fails the GPU with action rma.  Such
    GPUs exist: Meta's Llama 3 report counts 6 silent-data-corruption interruptions in 54 days
    of training on 16,384 H100s.
    nvidia-smi equivalent: none (dcgmi diag -r 3 "Diagnostic" compares GEMM results too).
    """
    mine = deep_of(node, gpu.index)
    if mine is None or not mine.wrong_elements:
        return
    kernels = ", ".join(KERNEL_WORDS.get(k, k) for k in mine.wrong_kernels) or "compute"
    yield from shared([_f(
        "deep.compute_wrong", Severity.FAIL, gpu,
        f"{label(gpu)}: wrong answers under load: {mine.wrong_most:,} wrong element(s) in one "
        f"launch, in {mine.wrong_launches} of {mine.launches} launches ({mine.wrong_elements:,} in "
        f"all; {kernels}), against the closed form; RMA the GPU",
        value=mine.wrong_most, threshold=0, action=Action.RMA)], gpu, node)


@gpu_check("deep.throttle", severity=Severity.WARN)
def check_deep_throttle(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The GPU held its clocks down while the sustained load ran: named with NVML's reason.

    NVML's clocks event reasons are read every 100 ms through `[deep] duration_s` of load.
    Warns on the hardware and thermal reasons (HW_SLOWDOWN, SW_THERMAL, HW_THERMAL,
    HW_POWER_BRAKE: NVML API reference, "Clocks Event Reasons"), with the time into the load
    each first appeared (power and thermal limits take seconds to bite), the sustained SM clock
    and the maximum.  SW_POWER_CAP alone is info: a GPU at its power limit under a full load
    works as designed.  Not a drain: cooling and power are the site's.
    nvidia-smi equivalent: `nvidia-smi -q -d PERFORMANCE` while a job runs.
    """
    mine = deep_of(node, gpu.index)
    if mine is None or not mine.load_reasons:
        return
    active = reasons_named(mine.load_reasons)
    if not active:
        return
    first = dict(mine.reasons_first_s)
    named = ", ".join(f"{n} (from {first[b]:.1f} s)" if b in first else n
                      for b, n in THROTTLE_BITS.items() if mine.load_reasons & b)
    clocks = ""
    clock = mine.sm_clock_sustained_mhz if mine.sm_clock_sustained_mhz is not None else mine.sm_clock_mhz
    if clock is not None:
        clocks = f", SM clock {clock} MHz" + (f" of {mine.sm_clock_max_mhz} MHz" if mine.sm_clock_max_mhz else "")
    load = f" in {mine.load_s:.0f} s of load" if mine.load_s else ""
    severity = Severity.WARN if any(n != "SW_POWER_CAP" for n in active) else Severity.INFO
    yield from shared([_f("deep.throttle", severity, gpu,
                          f"{label(gpu)}: under load clocks held down by {named}{load}{clocks}; "
                          f"check cooling and power", value=",".join(active),
                          threshold="HW_SLOWDOWN, SW_THERMAL, HW_THERMAL or HW_POWER_BRAKE")], gpu, node)


@gpu_check("deep.clock", severity=Severity.WARN, threshold_key="deep.sibling_ratio_warn")
def check_deep_clock(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The SM clock the GPU sustained under load (the median over the load's second half) is
    below half its maximum, or below `deep.sibling_ratio_warn` (0.85) of its same-model siblings'
    median, named with the reasons NVML gave (or that it gave none).

    Half: nvidia-smi's account of HW Slowdown ("reducing the core clocks by a factor of 2 or
    more").  The siblings share the node's power and cooling design, so one GPU that clocks
    lower under the same load is that GPU's (its cooling, its power delivery).  Warn, not a
    drain: a slow GPU is also caught by deep.compute's figure.
    nvidia-smi equivalent: `nvidia-smi -q -d CLOCK` while a job runs.
    """
    mine = deep_of(node, gpu.index)
    if mine is None or mine.sm_clock_sustained_mhz is None or node.deep is None:
        return
    clock, top = mine.sm_clock_sustained_mhz, mine.sm_clock_max_mhz
    models = {g.index: g.name for g in node.gpus}
    siblings = sorted(d.sm_clock_sustained_mhz for d in node.deep.gpus
                      if d.index != gpu.index and models.get(d.index) == gpu.name
                      and d.sm_clock_sustained_mhz is not None)
    parts = []
    if top and clock < CLOCK_FRACTION * top:
        parts.append(f"under half its maximum {top} MHz")
    median: Optional[float] = None
    if siblings:
        import statistics

        median = statistics.median(siblings)
        if median > 0 and clock < ctx.config.deep.sibling_ratio_warn * median:
            parts.append(f"{clock / median:.0%} of its {len(siblings)} siblings' median {median:,.0f} MHz "
                         f"(limit {ctx.config.deep.sibling_ratio_warn:.0%})".replace("%", " %"))
    if not parts:
        return
    why = ", ".join(reasons_named(mine.load_reasons or 0)) or "no reason NVML names"
    yield from shared([_f("deep.clock", Severity.WARN, gpu,
                          f"{label(gpu)}: sustained SM clock {clock} MHz under load, {'; '.join(parts)}; "
                          f"held down by {why}", value=clock,
                          threshold=round(ctx.config.deep.sibling_ratio_warn * median) if median
                          else (round(CLOCK_FRACTION * top) if top else None))], gpu, node)


@gpu_check("deep.tensor", severity=Severity.FAIL, action=Action.RESET, threshold_key="deep.sibling_ratio_fail")
def check_deep_tensor(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Tensor-core GEMM throughput (BF16 and FP16 mma.sync, sm_80 and newer) below the GPU's
    siblings' median: deep.sibling_ratio_warn (0.85) warns, deep.sibling_ratio_fail (0.7) fails
    with action reset (checks/deep.py, the thresholds of every deep figure).  The mma.sync
    kernels reach well below the datasheet's dense peak (which needs wgmma on Hopper), so there
    is no per-model floor.
    nvidia-smi equivalent: none (dcgmi diag -r 3, "Targeted Stress", comes closest).
    """
    yield from shared(judge_figure("deep.tensor", "tensor-core GEMM", "GFLOP/s", gpu, node, ctx,
                                   lambda d: d.tensor_gflops, None, ""), gpu, node)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "unknown" if value is None else str(value)


def _grew(before: object, after: object) -> bool:
    """Whether a counter or flag got worse: a flag set, a count up, a GPU now lost."""
    if isinstance(after, bool) or isinstance(before, bool):
        return bool(after) and not before
    if isinstance(after, int) and isinstance(before, int):
        return after > before
    return isinstance(after, str) and after != before


@gpu_check("deep.after", severity=Severity.FAIL, action=Action.RESET)
def check_deep_after(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """What the deep tests provoked: NVML's error counters and the kernel log read again after
    them, against before.

    Fails (reset) when uncorrectable ECC errors, DBE page retirements, uncorrectable row remaps
    or SRAM errors grew, or a remap or retirement became pending, while the tests ran: a weak
    cell the memory test's patterns tripped (the pending remap applies at the next reset:
    NVIDIA's memory error management guide); rma on a remap failure.  Corrected errors that
    grew are info (ecc.volatile_corrected judges their count).  Xids the kernel logged during the
    tests are named (the Xid checks judge each by NVIDIA's catalogue); with nothing else
    changed that is a warn.  The ECC, remap and retired-pages checks judge the counters after
    the tests too.  A re-read that failed is unknown.
    nvidia-smi equivalent: `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER` before and after.
    """
    from ..deepmodel import AFTER_FIELDS

    deep = node.deep
    if deep is None or not deep.after_ran:
        return
    mine = next((b for b in deep.before if b.index == gpu.index), None)
    if mine is None:
        return
    if deep.after_error:
        yield _f("deep.after", Severity.UNKNOWN, gpu, f"{label(gpu)}: not judged after the deep "
                 f"tests: {deep.after_error}")
        return
    changed = [(name, words, old, getattr(gpu, name)) for (name, words), old in zip(AFTER_FIELDS, mine.values)
               if _grew(old, getattr(gpu, name))]
    xids = [e for e in deep.during_xids if (at := gpu_at(node, e.pci)) is not None and at.index == gpu.index]
    if not changed and not xids:
        return
    parts = [f"{words} {_shown(old)} -> {_shown(new)}" for _, words, old, new in changed]
    parts += [f"Xid {e.xid if e.xid is not None else '(fallen off the bus)'} logged"
              + (f" {e.occurrences}x" if e.occurrences > 1 else "") for e in xids]
    serious = {n for n, _, _, _ in changed} - {"ecc_volatile_corrected", "remap_correctable", "retired_sbe"}
    if "remap_failure" in serious:
        severity, action, hint = Severity.FAIL, Action.RMA, "; RMA the GPU (a row remap failed)"
    elif serious:
        severity, action, hint = Severity.FAIL, Action.RESET, "; reset the GPU (a pending remap applies at reset) and rerun --level deep"
    elif xids:
        severity, action, hint = Severity.WARN, Action.NONE, ""
    else:
        severity, action, hint = Severity.INFO, Action.NONE, ""
    yield from shared([_f("deep.after", severity, gpu,
                          f"{label(gpu)}: during the deep tests: {'; '.join(parts)}{hint}",
                          value=", ".join(n for n, _, _, _ in changed) or "xid", threshold="no change",
                          action=action)], gpu, node)
