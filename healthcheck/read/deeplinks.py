"""The deep level's copies across links: host<->device over PCIe, and GPU to GPU over NVLink
(read/deep.py runs the per-GPU tests and calls these).

    host_copies(device, plan, out, dst, nbytes)    # in a GPU's child: h2d_gbps, d2h_gbps
    peers = run_peer_ring(targets, plan, ptx, timeout_s)   # -> (DeepPeer, ...), detail

The ring copies from each GPU to the next, one pair at a time, in one child that sees them all
(cuCtxEnablePeerAccess, cuMemcpyPeer).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..deepmodel import DeepPeer
from ..model import ProbeStatus
from .cudaprobe import MIB, ProbeTarget, _Cuda, _CudaError, child_failure, run_children
from .deepcuda import DeepTarget, Device

CU_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


def host_copies(d: Device, plan: Any, out: Dict[str, Any], dst: int, nbytes: int) -> None:
    """Pinned host memory to the GPU's buffer `dst` (`nbytes` long) and back: h2d_gbps, d2h_gbps."""
    start, end = d.event(), d.event()
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


def _peers_in_child(target: DeepTarget, plan: Any, ptx: bytes) -> Dict[str, object]:
    """Copies from each listed GPU to the next (a ring), one pair at a time."""
    cuda = _Cuda()
    cuda.call(ProbeStatus.INIT_ERROR, "cuInit", ctypes.c_uint(0))
    devices: List[Device] = []
    pairs: List[List[Any]] = []
    try:
        for ordinal in range(len(target.indices)):
            devices.append(Device(cuda, ordinal, ptx))
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


def run_peer_ring(ring: Sequence[ProbeTarget], plan: Any, ptx: bytes,
                  timeout_s: float) -> Tuple[Tuple[DeepPeer, ...], Optional[str]]:
    """The peer ring of `ring` (two GPUs or more): its copies, and why it failed where it did."""
    peer_target = DeepTarget(-1, ",".join(t.uuid for t in ring), tuple(t.index for t in ring))
    (outcome,) = run_children([peer_target], lambda t: _peers_in_child(t, plan, ptx), timeout_s)
    failure = child_failure(outcome, timeout_s)
    data = outcome.data or {}
    peers = tuple(DeepPeer(int(p[0]), int(p[1]), None if p[2] is None else float(p[2]), str(p[3]))
                  for p in data.get("pairs") or ())
    detail = failure[1] if failure else (str(data.get("detail")) if data.get("status") != "ok" else None)
    return peers, detail
