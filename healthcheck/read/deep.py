"""--level deep: on-device tests from the PTX the package ships, in killable probe children.

    run = run_deep(targets, DeepPlan(...), timeout_s=300.0)   # -> deepmodel.DeepRun

Each GPU under test gets one forked child (cudaprobe.run_children: CUDA_VISIBLE_DEVICES names
it, a deadline kills it; the parent never touches CUDA).  The child loads ptx/deep_kernels.ptx
with cuModuleLoadData (the driver JIT-compiles it: no toolkit on the node) and runs, in order:

1. the memory test over `fraction` of free memory, compared on the device: address in address
   (each 64-bit word holds its own address, then its complement) and moving inversions with a
   pattern and its complement; only the count and the first failing words come back;
2. HBM read and copy bandwidth;
3. host<->device bandwidth from pinned memory (cuMemHostAlloc), both directions;
4. an FP32 FMA loop in GFLOP/s, reading the SM clock and the clocks event reasons from NVML
   while it runs.

Then one child that sees them all copies between the GPU pairs read/deeptopo.py plans from
NVML's topology (cuCtxEnablePeerAccess, cuMemcpyPeer): pairs bridged by NVLink, a ring through
the NVSwitches, PCIe peer to peer where NVML says it works.  Times are CUDA
events on the device, never the host's clock.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from ..deepmodel import DeepGpu, DeepRun, MemError
from ..records import NamedTuple
from .cudaprobe import MIB, ChildOutcome, ProbeTarget, _Cuda, _CudaError, child_failure, run_children
from ..model import ProbeStatus
from .deepcuda import CU_ERROR_NOT_READY, FLIP, THREADS, DeepTarget, Device, GpuClocks, read_ptx, u64
from .deeplinks import host_copies, run_peer_pairs

MAX_RECORDS = 8  # HC_MAX_RECORDS in deep_kernels.cu
RESULT_BYTES = (1 + 3 * MAX_RECORDS) * 8
BLOCKS_PER_SM = 8
FMA_BLOCKS_PER_SM = 4
MI_PATTERN = 0x5555555555555555  # and its complement 0xAAAA...: every bit both ways
LOAD_POLL_S = 0.02  # between NVML reads while the FMA kernel runs


class DeepPlan(NamedTuple):
    fraction: float = 0.9  # share of free memory the memory test covers (probe.full_fraction)
    bandwidth_mib: int = 1024  # each bandwidth buffer (capped at a quarter of free memory)
    host_mib: int = 256  # the pinned host buffer
    peer_mib: int = 256
    reps: int = 5  # timed repetitions of each bandwidth test
    fma_iters: int = 8192  # ~18 GFLOP per launch on 132 SMs: ~0.3 s at 60 TFLOPS
    host_gates: Tuple[Any, ...] = ()  # deeplinks.HostGate per GPU: NUMA node, one copy at a time


def _memtest(d: Device, plan: DeepPlan, out: Dict[str, Any]) -> bool:
    """The memory test; False when it found failing words (recorded in out)."""
    nbytes = int(d.free_mem() * plan.fraction) - RESULT_BYTES - 2 * MIB
    nbytes -= nbytes % MIB
    if nbytes < MIB:
        raise _CudaError(ProbeStatus.ALLOC_ERROR, "cuMemGetInfo_v2", 2, "too little free memory")
    buf = d.alloc(nbytes)  # first: on an idle GPU it starts the GPU's memory
    result = d.alloc(4096)
    words, blocks = nbytes // 8, d.sms * BLOCKS_PER_SM
    out["mem_bytes"] = nbytes
    host = (ctypes.c_uint64 * (1 + 3 * MAX_RECORDS))()
    start, end = d.event(), d.event()
    d.record(start)

    def checked(name: str, kernel: str, *args: Any) -> bool:
        d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemsetD32_v2", ctypes.c_uint64(result), ctypes.c_uint(0),
                    ctypes.c_size_t(RESULT_BYTES // 4))
        d.launch(kernel, blocks, *args, ctypes.c_uint64(result))
        d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemcpyDtoH_v2", host, ctypes.c_uint64(result),
                    ctypes.c_size_t(RESULT_BYTES))
        if host[0] == 0:
            return True
        out["mem_errors"], out["mem_pass"] = int(host[0]), name
        out["mem_records"] = [[int(host[1 + 3 * k]) * 8, buf + int(host[1 + 3 * k]) * 8,
                               int(host[2 + 3 * k]), int(host[3 + 3 * k])]
                              for k in range(min(int(host[0]), MAX_RECORDS))]
        return False

    n, tag = ctypes.c_uint64(words), ctypes.c_uint64(buf)
    ok = True
    for name, flip in (("address in address", 0), ("address in address, inverted", FLIP)):
        d.launch("hc_addr_write", blocks, ctypes.c_uint64(buf), n, tag, u64(flip))
        if not checked(name, "hc_addr_check", ctypes.c_uint64(buf), n, tag, u64(flip)):
            ok = False
            break
    if ok:
        p, q = MI_PATTERN, MI_PATTERN ^ FLIP
        d.launch("hc_mi_fill", blocks, ctypes.c_uint64(buf), n, u64(p))
        for name, expect, write, down in (("moving inversions up", p, q, 0),
                                          ("moving inversions down", q, p, 1),
                                          ("moving inversions verify", p, p, 0)):
            if not checked(name, "hc_mi_step", ctypes.c_uint64(buf), n, u64(expect), u64(write),
                           ctypes.c_uint(down)):
                ok = False
                break
    d.record(end)
    out["times"]["memory"] = d.seconds(start, end)
    d.free(buf)
    d.free(result)
    return ok


def _bandwidth(d: Device, plan: DeepPlan, out: Dict[str, Any]) -> None:
    nbytes = min(plan.bandwidth_mib * MIB, d.free_mem() // 4)
    nbytes -= nbytes % MIB
    src, dst, sink = d.alloc(nbytes), d.alloc(nbytes), d.alloc(4096)
    n, blocks = ctypes.c_uint64(nbytes // 8), d.sms * BLOCKS_PER_SM
    d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemsetD32_v2", ctypes.c_uint64(src), ctypes.c_uint(0x5AA5C33C),
                ctypes.c_size_t(nbytes // 4))
    start, end = d.event(), d.event()
    for key, kernel, args, moved in (
            ("hbm_read", "hc_read", (ctypes.c_uint64(src), n, ctypes.c_uint64(sink)), nbytes),
            ("hbm_copy", "hc_copy", (ctypes.c_uint64(dst), ctypes.c_uint64(src), n), 2 * nbytes)):
        d.launch(kernel, blocks, *args)  # warm-up: the first launch of a kernel pays for loading
        d.record(start)
        for _ in range(plan.reps):
            d.launch(kernel, blocks, *args)
        d.record(end)
        seconds = d.seconds(start, end)
        out[f"{key}_gbps"] = moved * plan.reps / seconds / 1e9
        out["times"][key] = seconds
    d.free(src)
    d.free(sink)
    host_copies(d, plan, out, dst, nbytes)
    d.free(dst)


def _compute(d: Device, plan: DeepPlan, uuid: str, out: Dict[str, Any]) -> None:
    blocks = d.sms * FMA_BLOCKS_PER_SM
    sink = d.alloc(blocks * THREADS * 4)
    start, end = d.event(), d.event()
    nvml = GpuClocks(uuid)
    try:
        d.record(start)
        d.launch("hc_fma", blocks, ctypes.c_uint64(sink), ctypes.c_uint(plan.fma_iters), ctypes.c_float(1.0))
        d.record(end)
        reasons, clocks = 0, []
        while True:  # NVML read while the kernel runs: a throttled GPU is named with its reason
            r, clock = nvml.sample()
            reasons |= r or 0
            if clock is not None:
                clocks.append(clock)
            code = d.cuda.lib.cuEventQuery(end)
            if code != CU_ERROR_NOT_READY:
                break
            time.sleep(LOAD_POLL_S)
        seconds = d.seconds(start, end)
        out["gflops"] = 16.0 * plan.fma_iters * blocks * THREADS / seconds / 1e9
        out["times"]["compute"] = seconds
        out["load_reasons"] = reasons if nvml.lib is not None else None
        out["sm_clock_mhz"] = min(clocks) if clocks else None
        out["sm_clock_max_mhz"] = nvml.max_clock()
    finally:
        nvml.close()
    d.free(sink)


def _deep_in_child(target: DeepTarget, plan: DeepPlan, ptx: bytes) -> Dict[str, object]:
    out: Dict[str, Any] = {"status": "ok", "times": {}}
    try:
        cuda = _Cuda()
    except OSError as exc:
        return {"status": "error", "detail": f"cannot load libcuda.so.1: {exc}"}
    device: Optional[Device] = None
    try:
        cuda.call(ProbeStatus.INIT_ERROR, "cuInit", ctypes.c_uint(0))
        device = Device(cuda, 0, ptx)
        if _memtest(device, plan, out):
            _bandwidth(device, plan, out)
            _compute(device, plan, target.uuid, out)
    except _CudaError as err:
        out.update(status="error", cu_result=err.code, cu_name=err.name, detail=str(err))
    finally:
        if device is not None:
            device.close()
    return out


def run_deep(targets: Sequence[ProbeTarget], pairs: Sequence[Any], plan: DeepPlan,
             timeout_s: float) -> DeepRun:
    """The deep tests of every target GPU in parallel, then the peer copies `pairs`
    (read/deeptopo.PeerPair, planned from NVML's topology) between GPUs that passed them."""
    ptx = read_ptx()
    gpus = [DeepTarget(t.index, t.uuid) for t in targets]
    outcomes = run_children(gpus, lambda t: _deep_in_child(t, plan, ptx), timeout_s)
    results = tuple(_gpu_result(o, timeout_s) for o in outcomes)
    healthy = {r.index for r in results if r.status == "ok" and not r.mem_errors}
    pairs = [p for p in pairs if p.src in healthy and p.dst in healthy]
    if not pairs:
        return DeepRun(gpus=results)  # no pair with a peer path: nothing to copy between
    peers, detail = run_peer_pairs(targets, pairs, plan, ptx, timeout_s)
    return DeepRun(gpus=results, peers=peers, peer_detail=detail)


def _gpu_result(outcome: ChildOutcome, timeout_s: float) -> DeepGpu:
    index = outcome.target.index
    failure = child_failure(outcome, timeout_s)
    if failure is not None:
        return DeepGpu(index, failure[0].value, detail=failure[1].replace("CUDA probe", "deep test"),
                       duration_s=outcome.elapsed_s)
    data = outcome.data or {}

    def num(key: str) -> Optional[float]:
        value = data.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    def whole(key: str) -> Optional[int]:
        value = data.get(key)
        return value if isinstance(value, int) else None

    status = data.get("status")
    return DeepGpu(
        index, status if status in ("ok", "error") else "crashed", detail=str(data.get("detail", "")),
        cu_result=whole("cu_result"), cu_name=str(data["cu_name"]) if data.get("cu_name") else None,
        mem_bytes=whole("mem_bytes") or 0, mem_errors=whole("mem_errors") or 0,
        mem_pass=str(data["mem_pass"]) if data.get("mem_pass") else None,
        mem_records=tuple(MemError(*map(int, r)) for r in data.get("mem_records") or ()),
        hbm_read_gbps=num("hbm_read_gbps"), hbm_copy_gbps=num("hbm_copy_gbps"),
        h2d_gbps=num("h2d_gbps"), d2h_gbps=num("d2h_gbps"), gflops=num("gflops"),
        sm_clock_mhz=whole("sm_clock_mhz"), sm_clock_max_mhz=whole("sm_clock_max_mhz"),
        load_reasons=whole("load_reasons"), host_numa=whole("host_numa"),
        times=tuple(sorted((str(k), float(v)) for k, v in (data.get("times") or {}).items())),
        duration_s=outcome.elapsed_s)
