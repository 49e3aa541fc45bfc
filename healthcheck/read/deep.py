"""--level deep: on-device tests from the PTX the package ships, in killable probe children.

    run = run_deep(targets, pairs, DeepPlan(...), timeout_s=300.0)   # -> deepmodel.DeepRun

Each GPU under test gets one forked child (cudaprobe.run_children: CUDA_VISIBLE_DEVICES names
it, a deadline kills it; the parent never touches CUDA).  The child loads ptx/deep_kernels.ptx
(and ptx/deep_tensor.ptx on sm_80 and newer) with cuModuleLoadData (the driver JIT-compiles it:
no toolkit on the node) and runs, in order:

1. the memory test (read/deepmem.py) over `fraction` of free memory, compared on the device:
   address in address, moving inversions, walking ones and zeros, random data, `memtest_passes`
   times; only the count and the first failing words come back;
2. HBM read and copy bandwidth (16-byte loads, four in flight per thread);
3. host<->device bandwidth from pinned memory (cuMemHostAlloc), both directions;
4. `duration_s` of compute launches back to back, every output checked against its closed form,
   with NVML's SM clock, power, temperature and clocks event reasons every 100 ms
   (read/deepload.py).

Then one child that sees them all copies between the GPU pairs read/deeptopo.py plans from
NVML's topology (cuCtxEnablePeerAccess, cuMemcpyPeer): pairs bridged by NVLink, a ring through
the NVSwitches, PCIe peer to peer where NVML says it works.  Times are CUDA events on the
device, never the host's clock.  Launches are sized by the driver's occupancy
(cuOccupancyMaxActiveBlocksPerMultiprocessor).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Sequence, Tuple

from ..deepmodel import DeepGpu, DeepRun, LoadSample, MemError
from ..records import NamedTuple
from .cudaprobe import MIB, ChildOutcome, ProbeTarget, _Cuda, _CudaError, child_failure, run_children
from ..model import ProbeStatus
from .deepcuda import TENSOR_PTX, DeepTarget, Device, read_ptx
from .deeplinks import host_copies, run_peer_pairs
from .deepload import sustained
from .deepmem import memtest

VECTOR = 16  # bytes per load of hc_read and hc_copy (ulonglong2)


class DeepPlan(NamedTuple):
    fraction: float = 0.9  # share of free memory the memory test covers (probe.full_fraction)
    bandwidth_mib: int = 1024  # each bandwidth buffer (capped at a quarter of free memory)
    host_mib: int = 256  # the pinned host buffer
    peer_mib: int = 256
    reps: int = 5  # timed repetitions of each bandwidth test
    host_gates: Tuple[Any, ...] = ()  # deeplinks.HostGate per GPU: NUMA node, one copy at a time
    duration_s: float = 30.0  # device seconds of compute launches (deep.duration_s)
    memtest_passes: int = 1


def _bandwidth(d: Device, plan: DeepPlan, out: Dict[str, Any]) -> None:
    nbytes = min(plan.bandwidth_mib * MIB, d.free_mem() // 4)
    nbytes -= nbytes % MIB
    src, dst, sink = d.alloc(nbytes), d.alloc(nbytes), d.alloc(4096)
    n = ctypes.c_uint64(nbytes // VECTOR)
    d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemsetD32_v2", ctypes.c_uint64(src), ctypes.c_uint(0x5AA5C33C),
                ctypes.c_size_t(nbytes // 4))
    start, end = d.event(), d.event()
    for key, kernel, args, moved in (
            ("hbm_read", "hc_read", (ctypes.c_uint64(src), n, ctypes.c_uint64(sink)), nbytes),
            ("hbm_copy", "hc_copy", (ctypes.c_uint64(dst), ctypes.c_uint64(src), n), 2 * nbytes)):
        blocks = d.grid(kernel)
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


def _deep_in_child(target: DeepTarget, plan: DeepPlan, ptx: bytes, tensor_ptx: bytes) -> Dict[str, object]:
    out: Dict[str, Any] = {"status": "ok", "times": {}}
    try:
        cuda = _Cuda()
    except OSError as exc:
        return {"status": "error", "detail": f"cannot load libcuda.so.1: {exc}"}
    device: Optional[Device] = None
    try:
        cuda.call(ProbeStatus.INIT_ERROR, "cuInit", ctypes.c_uint(0))
        device = Device(cuda, 0, ptx, tensor_ptx)
        if memtest(device, plan, out, target.held_mib):
            _bandwidth(device, plan, out)
            sustained(device, plan, target.uuid, out)
    except _CudaError as err:
        out.update(status="error", cu_result=err.code, cu_name=err.name, detail=str(err))
    finally:
        if device is not None:
            device.close()
    return out


def run_deep(targets: Sequence[ProbeTarget], pairs: Sequence[Any], plan: DeepPlan,
             timeout_s: float) -> DeepRun:
    """The deep tests of every target GPU in parallel, then the peer copies `pairs`
    (read/deeptopo.PeerPair, planned from NVML's topology) between GPUs that passed them.  A
    GPU's deadline is timeout_s plus the load's duration_s."""
    ptx, tensor_ptx = read_ptx(), read_ptx(TENSOR_PTX)
    gpus = [DeepTarget(t.index, t.uuid, held_mib=t.held_mib) for t in targets]
    deadline = timeout_s + plan.duration_s
    outcomes = run_children(gpus, lambda t: _deep_in_child(t, plan, ptx, tensor_ptx), deadline)
    results = tuple(_gpu_result(o, deadline) for o in outcomes)
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
        mem_passes=whole("mem_passes") or 0,
        tensor_gflops=num("tensor_gflops"), load_s=num("load_s") or 0.0,
        launches=whole("launches") or 0, wrong_elements=whole("wrong_elements") or 0,
        wrong_launches=whole("wrong_launches") or 0, wrong_most=whole("wrong_most") or 0,
        wrong_kernels=tuple(str(k) for k in data.get("wrong_kernels") or ()),
        sm_clock_sustained_mhz=whole("sm_clock_sustained_mhz"), power_max_mw=whole("power_max_mw"),
        temperature_max_c=whole("temperature_max_c"),
        reasons_first_s=tuple((int(b), float(t)) for b, t in data.get("reasons_first_s") or ()),
        trace=tuple(LoadSample(*row) for row in data.get("trace") or ()),
        times=tuple(sorted((str(k), float(v)) for k, v in (data.get("times") or {}).items())),
        duration_s=outcome.elapsed_s)
