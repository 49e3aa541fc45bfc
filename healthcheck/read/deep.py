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

Then, when two or more GPUs with NVLink are under test, one child that sees them all copies
between each GPU and the next (a ring: cuCtxEnablePeerAccess, cuMemcpyPeer).  Times are CUDA
events on the device, never the host's clock.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..deepmodel import DeepGpu, DeepPeer, DeepRun, MemError
from ..records import NamedTuple
from .cudaprobe import MIB, ChildOutcome, ProbeTarget, _Cuda, _CudaError, child_failure, run_children
from ..model import ProbeStatus

PTX_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptx", "deep_kernels.ptx")
KERNELS = ("hc_addr_write", "hc_addr_check", "hc_mi_fill", "hc_mi_step", "hc_read", "hc_copy",
           "hc_fma")
MAX_RECORDS = 8  # HC_MAX_RECORDS in deep_kernels.cu
RESULT_BYTES = (1 + 3 * MAX_RECORDS) * 8
THREADS = 256
BLOCKS_PER_SM = 8
FMA_BLOCKS_PER_SM = 4
FLIP = (1 << 64) - 1
MI_PATTERN = 0x5555555555555555  # and its complement 0xAAAA...: every bit both ways
CU_ATTR_SM_COUNT = 16
CU_ERROR_NOT_READY = 600
CU_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
NVML_CLOCK_SM = 1
LOAD_POLL_S = 0.02  # between NVML reads while the FMA kernel runs


class DeepPlan(NamedTuple):
    fraction: float = 0.9  # share of free memory the memory test covers (probe.full_fraction)
    bandwidth_mib: int = 1024  # each bandwidth buffer (capped at a quarter of free memory)
    host_mib: int = 256  # the pinned host buffer
    peer_mib: int = 256
    reps: int = 5  # timed repetitions of each bandwidth test
    fma_iters: int = 8192  # ~18 GFLOP per launch on 132 SMs: ~0.3 s at 60 TFLOPS


class DeepTarget(NamedTuple):
    index: int  # type: ignore[assignment]
    uuid: str  # GPU-<uuid> (several, comma-separated, for the peer child)
    indices: Tuple[int, ...] = ()  # the peer child: the NVML index of each listed GPU


def read_ptx() -> bytes:
    with open(PTX_PATH, "rb") as handle:
        return handle.read() + b"\0"


class _Device:
    """One GPU in a child: its context, the module, and the launch and timing helpers."""

    def __init__(self, cuda: _Cuda, ordinal: int, ptx: bytes) -> None:
        c = ctypes
        self.cuda, self.dev, self.ctx, self.module = cuda, c.c_int(), c.c_void_p(), c.c_void_p()
        self.allocs: List[int] = []
        err = ProbeStatus.INIT_ERROR
        cuda.call(err, "cuDeviceGet", c.byref(self.dev), c.c_int(ordinal))
        cuda.call(err, "cuDevicePrimaryCtxRetain", c.byref(self.ctx), self.dev)
        self.current()
        cuda.call(err, "cuModuleLoadData", c.byref(self.module), c.c_char_p(ptx))
        self.fn: Dict[str, Any] = {}
        for name in KERNELS:
            fn = c.c_void_p()
            cuda.call(err, "cuModuleGetFunction", c.byref(fn), self.module, name.encode())
            self.fn[name] = fn
        sms = c.c_int()
        cuda.call(err, "cuDeviceGetAttribute", c.byref(sms), c.c_int(CU_ATTR_SM_COUNT), self.dev)
        self.sms = max(1, sms.value)

    def current(self) -> None:
        self.cuda.call(ProbeStatus.INIT_ERROR, "cuCtxSetCurrent", self.ctx)

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self.cuda.call(ProbeStatus.ALLOC_ERROR, "cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        self.allocs.append(ptr.value)
        return ptr.value

    def free(self, ptr: int) -> None:
        self.allocs.remove(ptr)
        self.cuda.lib.cuMemFree_v2(ctypes.c_uint64(ptr))

    def free_mem(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.cuda.call(ProbeStatus.ALLOC_ERROR, "cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return int(free.value)

    def launch(self, name: str, blocks: int, *args: Any) -> None:
        params = (ctypes.c_void_p * len(args))(*(ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
                                                  for a in args))
        self.cuda.call(ProbeStatus.COPY_ERROR, "cuLaunchKernel", self.fn[name],
                       ctypes.c_uint(blocks), ctypes.c_uint(1), ctypes.c_uint(1),
                       ctypes.c_uint(THREADS), ctypes.c_uint(1), ctypes.c_uint(1),
                       ctypes.c_uint(0), ctypes.c_void_p(0), params, ctypes.c_void_p(0))

    def event(self) -> ctypes.c_void_p:
        ev = ctypes.c_void_p()
        self.cuda.call(ProbeStatus.INIT_ERROR, "cuEventCreate", ctypes.byref(ev), ctypes.c_uint(0))
        return ev

    def record(self, ev: ctypes.c_void_p) -> None:
        self.cuda.call(ProbeStatus.COPY_ERROR, "cuEventRecord", ev, ctypes.c_void_p(0))

    def seconds(self, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
        self.cuda.call(ProbeStatus.COPY_ERROR, "cuEventSynchronize", end)
        ms = ctypes.c_float()
        self.cuda.call(ProbeStatus.COPY_ERROR, "cuEventElapsedTime", ctypes.byref(ms), start, end)
        return max(ms.value / 1000.0, 1e-9)

    def close(self) -> None:
        for ptr in list(self.allocs):
            self.free(ptr)
        if self.ctx.value:
            release = getattr(self.cuda.lib, "cuDevicePrimaryCtxRelease_v2", None) or getattr(
                self.cuda.lib, "cuDevicePrimaryCtxRelease")
            release(self.dev)


def u64(value: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(value & FLIP)


def _memtest(d: _Device, plan: DeepPlan, out: Dict[str, Any]) -> bool:
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


def _bandwidth(d: _Device, plan: DeepPlan, out: Dict[str, Any]) -> None:
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
    host_bytes = min(plan.host_mib * MIB, nbytes)
    pinned = ctypes.c_void_p()
    d.cuda.call(ProbeStatus.ALLOC_ERROR, "cuMemHostAlloc", ctypes.byref(pinned), ctypes.c_size_t(host_bytes),
                ctypes.c_uint(0))
    try:
        copies: Tuple[Tuple[str, str, Tuple[Any, ...]], ...] = (
            ("h2d", "cuMemcpyHtoD_v2", (ctypes.c_uint64(dst), pinned)),
            ("d2h", "cuMemcpyDtoH_v2", (pinned, ctypes.c_uint64(dst))))
        for key, call, args in copies:
            d.cuda.call(ProbeStatus.COPY_ERROR, call, *args, ctypes.c_size_t(host_bytes))
            d.record(start)
            for _ in range(plan.reps):
                d.cuda.call(ProbeStatus.COPY_ERROR, call, *args, ctypes.c_size_t(host_bytes))
            d.record(end)
            seconds = d.seconds(start, end)
            out[f"{key}_gbps"] = host_bytes * plan.reps / seconds / 1e9
            out["times"][key] = seconds
    finally:
        d.cuda.lib.cuMemFreeHost(pinned)
    d.free(dst)


class _Nvml:
    """The SM clock and clocks event reasons of one GPU, by UUID, for the FMA's duration.  Any
    failure leaves the readings None: they are a bonus, never the deep run's failure."""

    def __init__(self, uuid: str) -> None:
        self.handle = ctypes.c_void_p()
        self.lib: Any = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0:
                self.lib = lib
                if lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self.handle)) != 0:
                    self.close()
        except (OSError, AttributeError):
            self.lib = None

    def sample(self) -> Tuple[Optional[int], Optional[int]]:
        if self.lib is None:
            return None, None
        reasons, clock = ctypes.c_ulonglong(), ctypes.c_uint()
        fn = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self.lib, "nvmlDeviceGetCurrentClocksThrottleReasons")
        got_reasons = fn(self.handle, ctypes.byref(reasons)) == 0
        got_clock = self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(clock)) == 0
        return (int(reasons.value) if got_reasons else None, int(clock.value) if got_clock else None)

    def max_clock(self) -> Optional[int]:
        clock = ctypes.c_uint()
        if self.lib is None or self.lib.nvmlDeviceGetMaxClockInfo(self.handle, NVML_CLOCK_SM,
                                                                   ctypes.byref(clock)) != 0:
            return None
        return int(clock.value)

    def close(self) -> None:
        if self.lib is not None:
            self.lib.nvmlShutdown()
            self.lib = None


def _compute(d: _Device, plan: DeepPlan, uuid: str, out: Dict[str, Any]) -> None:
    blocks = d.sms * FMA_BLOCKS_PER_SM
    sink = d.alloc(blocks * THREADS * 4)
    start, end = d.event(), d.event()
    nvml = _Nvml(uuid)
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
    device: Optional[_Device] = None
    try:
        cuda.call(ProbeStatus.INIT_ERROR, "cuInit", ctypes.c_uint(0))
        device = _Device(cuda, 0, ptx)
        if _memtest(device, plan, out):
            _bandwidth(device, plan, out)
            _compute(device, plan, target.uuid, out)
    except _CudaError as err:
        out.update(status="error", cu_result=err.code, cu_name=err.name, detail=str(err))
    finally:
        if device is not None:
            device.close()
    return out


def _peers_in_child(target: DeepTarget, plan: DeepPlan, ptx: bytes) -> Dict[str, object]:
    """Copies from each listed GPU to the next (a ring), one pair at a time."""
    cuda = _Cuda()
    cuda.call(ProbeStatus.INIT_ERROR, "cuInit", ctypes.c_uint(0))
    devices: List[_Device] = []
    pairs: List[List[Any]] = []
    try:
        for ordinal in range(len(target.indices)):
            devices.append(_Device(cuda, ordinal, ptx))
        n = len(devices)
        for i in range(n if n > 2 else 1):
            a, b = devices[i], devices[(i + 1) % n]
            src_index, dst_index = target.indices[i], target.indices[(i + 1) % n]
            can = ctypes.c_int()
            cuda.call(ProbeStatus.INIT_ERROR, "cuDeviceCanAccessPeer", ctypes.byref(can), a.dev, b.dev)
            if not can.value:
                pairs.append([src_index, dst_index, None, "no peer access between them"])
                continue
            a.current()
            code = cuda.lib.cuCtxEnablePeerAccess(b.ctx, ctypes.c_uint(0))
            if code not in (0, CU_ERROR_PEER_ACCESS_ALREADY_ENABLED):
                pairs.append([src_index, dst_index, None, f"cuCtxEnablePeerAccess returned {cuda.name(code)}"])
                continue
            nbytes = min(plan.peer_mib * MIB, a.free_mem() // 4)
            b.current()
            nbytes = min(nbytes, b.free_mem() // 4) // MIB * MIB
            a.current()
            src = a.alloc(nbytes)
            b.current()
            dst = b.alloc(nbytes)
            a.current()
            start, end = a.event(), a.event()
            copy = (ctypes.c_uint64(dst), b.ctx, ctypes.c_uint64(src), a.ctx, ctypes.c_size_t(nbytes))
            cuda.call(ProbeStatus.COPY_ERROR, "cuMemcpyPeer", *copy)
            a.record(start)
            for _ in range(plan.reps):
                cuda.call(ProbeStatus.COPY_ERROR, "cuMemcpyPeer", *copy)
            a.record(end)
            pairs.append([src_index, dst_index, nbytes * plan.reps / a.seconds(start, end) / 1e9, ""])
            a.free(src)
            b.current()
            b.free(dst)
    except _CudaError as err:
        return {"status": "error", "detail": str(err), "pairs": pairs}
    finally:
        for device in devices:
            device.close()
    return {"status": "ok", "pairs": pairs}


def run_deep(targets: Sequence[ProbeTarget], peer_capable: Sequence[int], plan: DeepPlan,
             timeout_s: float) -> DeepRun:
    """The deep tests of every target GPU in parallel, then the peer ring of `peer_capable`
    (NVML indices of targets with NVLink) when it has two GPUs or more."""
    ptx = read_ptx()
    gpus = [DeepTarget(t.index, t.uuid) for t in targets]
    outcomes = run_children(gpus, lambda t: _deep_in_child(t, plan, ptx), timeout_s)
    results = tuple(_gpu_result(o, timeout_s) for o in outcomes)
    healthy = {r.index for r in results if r.status == "ok" and not r.mem_errors}
    ring = [t for t in targets if t.index in peer_capable and t.index in healthy]
    if len(ring) < 2:
        why = ("fewer than two GPUs with NVLink under test" if len(ring) < 2 else None)
        return DeepRun(gpus=results, peer_detail=why)
    peer_target = DeepTarget(-1, ",".join(t.uuid for t in ring), tuple(t.index for t in ring))
    (outcome,) = run_children([peer_target], lambda t: _peers_in_child(t, plan, ptx), timeout_s)
    failure = child_failure(outcome, timeout_s)
    data = outcome.data or {}
    peers = tuple(DeepPeer(int(p[0]), int(p[1]), None if p[2] is None else float(p[2]), str(p[3]))
                  for p in data.get("pairs") or ())
    detail = failure[1] if failure else (str(data.get("detail")) if data.get("status") != "ok" else None)
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
        load_reasons=whole("load_reasons"),
        times=tuple(sorted((str(k), float(v)) for k, v in (data.get("times") or {}).items())),
        duration_s=outcome.elapsed_s)
