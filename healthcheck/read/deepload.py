"""The deep level's sustained compute load, with every answer checked, in a GPU's child
(read/deep.py calls it after the memory and bandwidth tests).

    sustained(device, plan, uuid, out)    # fills out: GFLOP/s, wrong elements, the NVML trace

For `[deep] duration_s` (30 s) of device time the GPU runs compute launches back to back, a few
queued ahead so it never idles: the FP32 FMA kernel (deep_kernels.ptx: hc_fma) on every GPU,
and on sm_80 and newer, in turn with it, the tensor-core GEMM in BF16 and FP16 (deep_tensor.ptx:
hc_mma_bf16, hc_mma_f16).  Each launch is sized to about LAUNCH_S of device time from a short
calibration.  Every launch's output is compared on the device with its closed form (hc_check,
into that launch's own counter: the load never stops for a copy), so one wrong element in one
launch is counted.  Every SAMPLE_S (100 ms) NVML gives the SM clock, power, temperature and
the clocks event reasons: power and thermal throttling take seconds to show, and the trace
says when each reason appeared.  The trace keeps only readings taken while the GPU had work
queued: one taken after a host stall let the queue run dry reads an idle GPU.
"""

from __future__ import annotations

import ctypes
import statistics
import struct
import time
from collections import deque
from typing import Any, Deque, Dict, List, NamedTuple, Optional, Tuple

from ..model import ProbeStatus
from .deepcuda import THREADS, Device, GpuClocks

SAMPLE_S = 0.1  # between NVML readings under load
LAUNCH_S = 0.1  # device time of one compute launch: long enough that launching costs nothing
CALIBRATE_S = 0.01  # a calibration launch this long says how fast the kernel runs
CAL_ITERS = 256
MAX_ITERS = (1 << 31) - 1
DEPTH = 3  # launches queued ahead of the one running
POLL_S = 0.005
# The tensor-core kernels' operands (deep_tensor.cu): a = 1.5, b = -0.75, c = 3, as packed pairs.
BF16_A, BF16_B = 0x3FC0, 0xBF40
F16_A, F16_B = 0x3E00, 0xBA00
MMA_A, MMA_B, MMA_C = 1.5, -0.75, 3.0


def fma_expected() -> bytes:
    """hc_fma's output for lanes 0..255, the closed form of deep_kernels.cu: every value has at
    most 18 significant bits, so Python's doubles compute FP32's exact results."""
    row = []
    for lane in range(THREADS):
        x = 1.0 + lane / 256.0
        a = [(j + 0.5) + x * (1.0 + (j + 1) / 8.0) for j in range(8)]
        row.append(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])))
    return struct.pack(f"<{THREADS}f", *row)


def mma_expected() -> bytes:
    """hc_mma_*'s output: 16 accumulator elements of c + 16 a b each, in every lane."""
    return struct.pack(f"<{THREADS}f", *([16.0 * (MMA_C + 16.0 * MMA_A * MMA_B)] * THREADS))


class _Kernel(NamedTuple):
    name: str
    args: Tuple[Any, ...]  # after (out, iters)
    flops_per_iter: float  # the whole grid's
    expected: int  # device pointer of its expected row
    out: int  # device pointer of its output


class _Launch(NamedTuple):
    kernel: _Kernel
    iters: int
    start: Any
    end: Any


def _kernels(d: Device, out_bytes: int) -> List[_Kernel]:
    kernels = []
    names = ["hc_fma"] + (["hc_mma_bf16", "hc_mma_f16"] if d.tensor else [])
    for name in names:
        expected = fma_expected() if name == "hc_fma" else mma_expected()
        row = d.alloc(len(expected))
        d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemcpyHtoD_v2", ctypes.c_uint64(row), expected,
                    ctypes.c_size_t(len(expected)))
        threads = d.grid(name) * THREADS
        if name == "hc_fma":
            args: Tuple[Any, ...] = ()
            flops = 32.0 * threads  # 16 FMAs per iteration per thread
        else:
            a, b = (BF16_A, BF16_B) if name == "hc_mma_bf16" else (F16_A, F16_B)
            args = (ctypes.c_uint(a << 16 | a), ctypes.c_uint(b << 16 | b), ctypes.c_float(MMA_C))
            flops = 8.0 * 4096.0 * threads / 32  # 8 m16n8k16 per iteration per warp
        kernels.append(_Kernel(name, args, flops, row, d.alloc(max(out_bytes, threads * 4))))
    return kernels


def sustained(d: Device, plan: Any, uuid: str, out: Dict[str, Any]) -> None:
    """`plan.duration_s` of compute launches on the device, each output checked; fills out."""
    kernels = _kernels(d, d.grid("hc_fma") * THREADS * 4)
    slots = int(plan.duration_s / LAUNCH_S * 2) + 64  # launches it may take, calibration included
    counts = d.alloc(slots * 8)
    d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemsetD32_v2", ctypes.c_uint64(counts), ctypes.c_uint(0),
                ctypes.c_size_t(slots * 2))
    events = [(d.event(), d.event()) for _ in range(DEPTH + 1)]
    nvml = GpuClocks(uuid)
    trace: List[List[Any]] = []
    ran: List[Tuple[_Kernel, int, float]] = []  # (kernel, iters, seconds) per launch, in order
    inflight: Deque[_Launch] = deque()
    t0 = time.monotonic()
    next_sample = t0

    def issue(k: _Kernel, iters: int) -> None:
        slot = len(ran) + len(inflight)
        start, end = events[slot % len(events)]
        d.record(start)
        d.launch(k.name, d.grid(k.name), ctypes.c_uint64(k.out), ctypes.c_uint(iters), *k.args)
        d.record(end)
        grid = d.grid(k.name)
        d.launch("hc_check", d.grid("hc_check"), ctypes.c_uint64(k.out),
                 ctypes.c_uint64(grid * THREADS), ctypes.c_uint64(k.expected), ctypes.c_uint(THREADS),
                 ctypes.c_uint64(counts + 8 * slot))
        inflight.append(_Launch(k, iters, start, end))

    def wait_one() -> float:
        """Wait for the oldest launch, reading NVML every SAMPLE_S meanwhile: its seconds."""
        nonlocal next_sample
        launch = inflight[0]
        while True:
            now = time.monotonic()
            if now >= next_sample:
                reasons, clock, power, temp = nvml.sample_all()
                # A reading counts only if the GPU was under load when it was taken: the newest
                # launch queued before it has not ended since.  A host stall longer than the
                # queue (DEPTH launches) lets the GPU idle, and an idle GPU's clocks (a few
                # hundred MHz) and reasons say nothing of how it holds up under load.
                if not d.ready(inflight[-1].end):
                    trace.append([round(now - t0, 3), clock, power, temp, reasons])
                next_sample = max(next_sample + SAMPLE_S, now)
            if d.ready(launch.end):
                break
            time.sleep(max(0.0, min(next_sample - time.monotonic(), POLL_S)))
        inflight.popleft()
        seconds = d.seconds(launch.start, launch.end)
        ran.append((launch.kernel, launch.iters, seconds))
        return seconds

    try:
        iters: Dict[str, int] = {}
        per_iter: Dict[str, float] = {}
        for k in kernels:  # calibration: grow the launch until it takes CALIBRATE_S
            n = CAL_ITERS
            while True:
                issue(k, n)
                seconds = wait_one()
                if seconds >= CALIBRATE_S or n >= MAX_ITERS // 8:
                    break
                n *= 8
            per_iter[k.name] = seconds / n
            iters[k.name] = max(2, min(MAX_ITERS, int(LAUNCH_S / per_iter[k.name])))
        done = sum(s for _, _, s in ran)
        turn = 0
        while True:
            queued = sum(per_iter[x.kernel.name] * x.iters for x in inflight)
            while (len(inflight) < DEPTH and done + queued < plan.duration_s
                   and len(ran) + len(inflight) < slots):
                k = kernels[turn % len(kernels)]
                turn += 1
                issue(k, iters[k.name])
                queued += per_iter[k.name] * iters[k.name]
            if not inflight:
                break
            done += wait_one()
        wrong = (ctypes.c_uint64 * slots)()
        d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemcpyDtoH_v2", wrong, ctypes.c_uint64(counts),
                    ctypes.c_size_t(slots * 8))
        _results(d, nvml, ran, [int(w) for w in wrong[:len(ran)]], trace, out)
    finally:
        nvml.close()
    for k in kernels:
        d.free(k.expected)
        d.free(k.out)
    d.free(counts)


def _results(d: Device, nvml: GpuClocks, ran: List[Tuple[_Kernel, int, float]], wrong: List[int],
             trace: List[List[Any]], out: Dict[str, Any]) -> None:
    def rate(tensor: bool) -> Optional[float]:
        mine = [(k.flops_per_iter * n, s) for k, n, s in ran if (k.name != "hc_fma") == tensor]
        seconds = sum(s for _, s in mine)
        return sum(f for f, _ in mine) / seconds / 1e9 if mine and seconds > 0 else None

    out["gflops"] = rate(False)
    out["tensor_gflops"] = rate(True) if d.tensor else None
    out["load_s"] = sum(s for _, _, s in ran)
    out["times"]["compute"] = out["load_s"]
    out["launches"] = len(ran)
    out["wrong_elements"] = sum(wrong)
    out["wrong_launches"] = sum(1 for w in wrong if w)
    out["wrong_most"] = max(wrong, default=0)
    out["wrong_kernels"] = sorted({k.name for (k, _, _), w in zip(ran, wrong) if w})
    clocks = [row[1] for row in trace if row[1] is not None]
    late = [row[1] for row in trace if row[1] is not None and row[0] >= trace[-1][0] / 2] if trace else []
    reasons = 0
    first: Dict[int, float] = {}
    for t, _, _, _, r in trace:
        for bit in range(64):
            if r and r >> bit & 1 and (1 << bit) not in first:
                first[1 << bit] = t
        reasons |= r or 0
    out["load_reasons"] = reasons if nvml.lib is not None else None
    out["sm_clock_mhz"] = min(clocks) if clocks else None
    out["sm_clock_sustained_mhz"] = int(statistics.median(late or clocks)) if clocks else None
    out["sm_clock_max_mhz"] = nvml.max_clock()
    powers = [row[2] for row in trace if row[2] is not None]
    temps = [row[3] for row in trace if row[3] is not None]
    out["power_max_mw"] = max(powers) if powers else None
    out["temperature_max_c"] = max(temps) if temps else None
    out["reasons_first_s"] = sorted(first.items())
    out["trace"] = trace
