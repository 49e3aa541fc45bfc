"""--level deep, judged: what the on-device tests measured (read/deep.py), against the GPU's
same-model siblings on the node and against a per-model floor (pure: no reader, no CUDA).

Two judgements for every figure:
- siblings: a GPU below `deep.sibling_ratio_warn` (0.85) of the median of the other GPUs of its
  model on the node warns, below `deep.sibling_ratio_fail` (0.7) fails.  The siblings share the
  node's host, PCIe topology, power and cooling, so the comparison needs no model table and
  holds whatever the clocks, driver or load: 15 % is past the run-to-run noise of a bandwidth
  kernel; 30 % is the "a third slower" GPU of DCGM#122 that every rank of a job waits for.
- floors: below `deep.floor_fraction` (0.6) of the datasheet peak in checks/floors.py FLOORS
  (HBM: DCGM's own minimum for the SKU where it lists one) fails, so a node whose GPUs are all
  slow (where the median is slow too) is still caught; a model with no floor is named by
  `deep.floors` (info).  A simple kernel
  reaches 80-90 % of the peak on a healthy GPU; 60 % leaves room for clocks and concurrency.
  Host<->device copies are judged against the link's current generation and width:
  `deep.pcie_fraction` (0.4) of its per-direction rate (the copies run one GPU at a time, from
  pinned memory on the GPU's NUMA node: read/deeplinks.py; 0.4 leaves room for a host whose
  memory or root complex is shared with other traffic).  Sites override a peak with
  `deep.floors = ["MODEL:METRIC=VALUE"]`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, Iterator, Optional, Tuple

from ..model import Action, Finding, GpuSnapshot, NodeSnapshot, Severity
from .deepshared import shared
from .registry import CheckContext, finding as _f, gpu_check, label, node_check

if TYPE_CHECKING:  # imported where a deep run is judged, never on the prolog's path
    from ..deepmodel import DeepGpu

# PCIe per-lane rate per direction after encoding, GB/s (PCI-SIG: 2.5/5 GT/s 8b/10b, 8/16/32/64
# GT/s 128b/130b; Gen6 FLIT mode counted as Gen5 doubled).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}
FATAL_CUDA = {214: "ECC uncorrectable", 220: "NVLink uncorrectable", 226: "contained error"}


def deep_of(node: NodeSnapshot, index: int) -> Optional["DeepGpu"]:
    if node.deep is None:
        return None
    return next((d for d in node.deep.gpus if d.index == index), None)


def figure(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}"


def judge_figure(check: str, what: str, unit: str, gpu: GpuSnapshot, node: NodeSnapshot,
                 ctx: CheckContext, value_of: Callable[["DeepGpu"], Optional[float]],
                 floor: Optional[float], floor_words: str) -> Iterator[Finding]:
    """One figure of one GPU against its siblings' median and its floor: one finding at most."""
    mine = deep_of(node, gpu.index)
    value = value_of(mine) if mine is not None else None
    if value is None or node.deep is None:
        return
    models = {g.index: g.name for g in node.gpus}
    siblings = [v for d in node.deep.gpus if d.index != gpu.index and models.get(d.index) == gpu.name
                for v in (value_of(d),) if v is not None]
    cfg = ctx.config.deep
    severity: Optional[Severity] = None
    parts = []
    if siblings:
        import statistics

        median = statistics.median(siblings)
        ratio = value / median if median > 0 else 1.0
        if ratio < cfg.sibling_ratio_warn:
            severity = Severity.FAIL if ratio < cfg.sibling_ratio_fail else Severity.WARN
            limit = cfg.sibling_ratio_fail if severity is Severity.FAIL else cfg.sibling_ratio_warn
            parts.append(f"{ratio:.0%} of its {len(siblings)} siblings' median {figure(median, unit)} "
                         f"(limit {limit:.0%})".replace("%", " %"))
    if floor is not None and value < floor:
        severity = Severity.FAIL
        parts.append(f"below its floor {figure(floor, unit)} ({floor_words})")
    if severity is None:
        return
    action = Action.RESET if severity is Severity.FAIL else Action.NONE
    hint = "; reset the GPU and rerun --level deep, RMA if it stays slow" if action is Action.RESET else ""
    yield from shared([_f(check, severity, gpu, f"{label(gpu)}: {what} {figure(value, unit)}, {'; '.join(parts)}{hint}",
                          value=round(value, 1), threshold=round(floor, 1) if floor is not None and not siblings else (
                              cfg.sibling_ratio_fail if severity is Severity.FAIL else cfg.sibling_ratio_warn),
                          action=action)], gpu, node)


def datasheet_floor(gpu: GpuSnapshot, metric: str, ctx: CheckContext) -> Tuple[Optional[float], str]:
    from .floors import peak

    value, source = peak(gpu.name, metric, ctx.config.deep.floors)
    if value is None:
        return None, ""
    share = ctx.config.deep.floor_fraction
    return share * value, f"{share:.0%} of the peak {value:,.0f}, {source}".replace("%", " %")


@gpu_check("deep.run", severity=Severity.FAIL, action=Action.RESET, threshold_key="deep.timeout_s")
def check_deep_run(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The deep tests could not run to their end on the GPU.

    Unknown (never a drain) when the child timed out, crashed or a CUDA call failed: that may be
    our kernels, a deadline too short for the board, or the driver.  Fails (reset) only on the
    CUDA errors that name the hardware: 214 ECC uncorrectable, 220 NVLink uncorrectable, 226
    contained (CUDA driver API reference, CUresult).
    nvidia-smi equivalent: none (dcgmi diag -r 3 comes closest).
    """
    mine = deep_of(node, gpu.index)
    if mine is None or mine.status == "ok":
        return
    if mine.cu_result in FATAL_CUDA:
        yield from shared([_f("deep.run", Severity.FAIL, gpu,
                              f"{label(gpu)}: deep test failed: {mine.detail} ({FATAL_CUDA[mine.cu_result]}); "
                              f"reset the GPU", value=mine.cu_name, threshold="ok", action=Action.RESET)],
                          gpu, node)
        return
    yield _f("deep.run", Severity.UNKNOWN, gpu, f"{label(gpu)}: deep test did not finish ({mine.status}): "
             f"{mine.detail}", value=mine.cu_name or mine.status, threshold="ok")


@gpu_check("deep.memory", severity=Severity.FAIL, action=Action.RMA)
def check_deep_memory(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """GPU memory returned a word other than the one written, in a test compared on the device.

    Address in address (each word holds its address, then its complement: catches addressing
    faults) and moving inversions with a pattern and its complement (catches stuck and coupled
    bits) over `probe.full_fraction` of free memory.  Any failing word fails the GPU with action
    rma: ECC did not correct it, so a job would have read it.  The message names the first
    failing word's offset and device address and the bits that differ.
    nvidia-smi equivalent: none (dcgmi diag -r 3, "Memory" / "Memtest", comes closest).
    """
    mine = deep_of(node, gpu.index)
    if mine is None or not mine.mem_errors:
        return
    first = mine.mem_records[0] if mine.mem_records else None
    where = ""
    if first is not None:
        diff = first.expected ^ first.actual
        bits = [b for b in range(64) if diff >> b & 1]
        named = ", ".join(f"byte offset {first.offset + b // 8:#x} bit {b % 8}" for b in bits[:4])
        where = (f"; first at offset {first.offset:#x} (device address {first.address:#x}): expected "
                 f"{first.expected:#018x}, read {first.actual:#018x} ({named})")
    yield from shared([_f("deep.memory", Severity.FAIL, gpu,
                          f"{label(gpu)}: memory test {mine.mem_pass}: {mine.mem_errors} word(s) wrong of "
                          f"{mine.mem_bytes // (1 << 20):,} MiB{where}; RMA the GPU",
                          value=mine.mem_errors, threshold=0, action=Action.RMA)], gpu, node)


@gpu_check("deep.hbm", severity=Severity.FAIL, action=Action.RESET,
           threshold_key="deep.sibling_ratio_fail")
def check_deep_hbm(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """HBM read or copy bandwidth below the GPU's siblings' median or its model's floor.

    Thresholds and sources: the module docstring (siblings 0.85 / 0.7); the floor is DCGM's own
    memory_bandwidth minimum for the SKU where DCGM 4.6.0 lists one, else 0.6 of the datasheet
    peak (checks/floors.py).  Copy counts the bytes read and written.
    nvidia-smi equivalent: none (dcgmi diag -r 3, "Memory Bandwidth", comes closest).
    """
    from .floors import hbm_floor  # the table: imported where a deep run is judged only

    floor, words = hbm_floor(gpu.name, ctx.config.deep.floor_fraction, ctx.config.deep.floors)
    yield from judge_figure("deep.hbm", "HBM read", "GB/s", gpu, node, ctx,
                            lambda d: d.hbm_read_gbps, floor, words)
    yield from judge_figure("deep.hbm", "HBM copy", "GB/s", gpu, node, ctx,
                            lambda d: d.hbm_copy_gbps, floor, words)


@gpu_check("deep.pcie", severity=Severity.FAIL, action=Action.RESET, threshold_key="deep.pcie_fraction")
def check_deep_pcie(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Host<->device bandwidth (pinned memory) below the siblings' median or the link's rate.

    The floor is `deep.pcie_fraction` (0.4) of what the link's current generation and width
    carry per direction (PCI-SIG rates after encoding): a link trained down is judged by
    pcie.width_degraded / the PCIe checks, this one catches a link that trained fine but
    carries less.
    nvidia-smi equivalent: none (dcgmi diag -r 2, "PCIe", comes closest).
    """
    floor, words = None, ""
    lane = PCIE_LANE_GBPS.get(gpu.pcie_gen_current or 0)
    if lane and gpu.pcie_width_current:
        share = ctx.config.deep.pcie_fraction
        rate = lane * gpu.pcie_width_current
        floor = share * rate
        words = (f"{share:.0%} of the link's {rate:,.0f} GB/s at Gen{gpu.pcie_gen_current} "
                 f"x{gpu.pcie_width_current}").replace("%", " %")
    yield from judge_figure("deep.pcie", "host-to-device", "GB/s", gpu, node, ctx,
                            lambda d: d.h2d_gbps, floor, words)
    yield from judge_figure("deep.pcie", "device-to-host", "GB/s", gpu, node, ctx,
                            lambda d: d.d2h_gbps, floor, words)


@gpu_check("deep.compute", severity=Severity.FAIL, action=Action.RESET,
           threshold_key="deep.sibling_ratio_fail")
def check_deep_compute(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """FP32 FMA throughput below the GPU's siblings' median or its model's floor.

    Thresholds and sources: the module docstring (FP32 peaks from the datasheets in checks/floors.py).
    nvidia-smi equivalent: none (dcgmi diag -r 3, "Targeted Stress", comes closest).
    """
    floor, words = datasheet_floor(gpu, "gflops", ctx)
    yield from judge_figure("deep.compute", "FP32 FMA", "GFLOP/s", gpu, node, ctx,
                            lambda d: d.gflops, floor, words)




@node_check("deep.peers", severity=Severity.UNKNOWN)
def check_deep_peers(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """The peer test could not run although two or more GPUs with NVLink were under test.

    Unknown, never a drain: the per-GPU deep tests have judged the GPUs already.
    nvidia-smi equivalent: none.
    """
    deep = node.deep
    if deep is None or not deep.peer_detail or deep.peer_detail.startswith("fewer than"):
        return
    yield _f("deep.peers", Severity.UNKNOWN, None, f"NVLink peer test did not finish: {deep.peer_detail}")

