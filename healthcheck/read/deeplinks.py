"""The deep level's copies across links: host<->device over PCIe, and GPU to GPU over NVLink
(read/deep.py runs the per-GPU tests and calls these).

    gates = host_gates(gpus, sysfs_root, lock)      # in the parent: each GPU's NUMA node and the lock
    host_copies(device, plan, out, dst, nbytes)    # in a GPU's child: h2d_gbps, d2h_gbps
    peers, why = run_peer_pairs(targets, pairs, plan, ptx, timeout_s)   # -> (DeepPeer, ...), detail

The peer test copies between the pairs read/deeptopo.py plans from NVML's topology, one pair at
a time, in one child that sees them all (cuCtxEnablePeerAccess, cuMemcpyPeer).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..deepmodel import DeepPeer
from ..model import ProbeStatus
from ..pci import function_form
from ..records import NamedTuple
from .cudaprobe import MIB, ProbeTarget, _Cuda, _CudaError, child_failure, run_children
from .deepcuda import DeepTarget, Device

CU_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


class HostGate(NamedTuple):
    """How one GPU's host copies run (host_gates): the lock file every GPU's copies take in
    turn, and the CPUs of the GPU's NUMA node its child binds to first."""

    pci: str  # the GPU's address, pci.function_form
    lock: str  # a file under the deep run's temporary directory
    numa_node: Optional[int] = None  # sysfs numa_node; None: the kernel gives none (-1) or no file
    cpus: Tuple[int, ...] = ()


def host_gates(gpus: Sequence[Any], sysfs_root: str, lock: str) -> Tuple[HostGate, ...]:
    """Each GPU's gate from sysfs: /sys/bus/pci/devices/ADDR/numa_node and that node's cpulist
    (/sys/devices/system/node/nodeN/cpulist).  All GPUs share one lock: their copies run one
    GPU at a time, so two GPUs behind one PCIe switch (or one root port, or one socket's
    memory) never share it while measured."""
    gates = []
    for gpu in gpus:
        try:
            pci = function_form(gpu.pci_bus_id or "")
        except ValueError:
            continue
        node = _read_int(os.path.join(sysfs_root, "bus", "pci", "devices", pci, "numa_node"))
        cpus: Tuple[int, ...] = ()
        if node is not None and node >= 0:
            cpus = _cpulist(os.path.join(sysfs_root, "devices", "system", "node", f"node{node}", "cpulist"))
        gates.append(HostGate(pci, lock, node if node is not None and node >= 0 else None, cpus))
    return tuple(gates)


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _cpulist(path: str) -> Tuple[int, ...]:
    """"0-31,64-95" -> the CPUs; () where unreadable."""
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except OSError:
        return ()
    cpus: List[int] = []
    try:
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        return ()
    return tuple(cpus)


@contextlib.contextmanager
def _gated(d: Device, plan: Any, out: Dict[str, Any]) -> Iterator[None]:
    """Bind this child to its GPU's NUMA node (the pinned buffer is then that node's memory:
    the kernel places pages on the node of the CPU that touches them first) and hold the
    copies' lock while they run.  Where no gate is known the copies run as they are."""
    bus = ctypes.create_string_buffer(32)
    gate = None
    if d.cuda.lib.cuDeviceGetPCIBusId(bus, ctypes.c_int(len(bus)), d.dev) == 0:
        try:
            mine = function_form(bus.value.decode())
        except ValueError:
            mine = ""
        gate = next((g for g in getattr(plan, "host_gates", ()) if g.pci == mine), None)
    if gate is None:
        yield
        return
    if gate.cpus:
        try:
            os.sched_setaffinity(0, gate.cpus)
            out["host_numa"] = gate.numa_node
        except OSError:
            pass  # CPUs outside this cgroup's set: copy unbound rather than not at all
    with open(gate.lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the child ends, killed or not
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def host_copies(d: Device, plan: Any, out: Dict[str, Any], dst: int, nbytes: int) -> None:
    """Pinned host memory to the GPU's buffer `dst` (`nbytes` long) and back: h2d_gbps,
    d2h_gbps; bound to the GPU's NUMA node, one GPU at a time (plan.host_gates)."""
    with _gated(d, plan, out):
        _host_copies(d, plan, out, dst, nbytes)


def _host_copies(d: Device, plan: Any, out: Dict[str, Any], dst: int, nbytes: int) -> None:
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


def _pairs_in_child(target: DeepTarget, pairs: Sequence[Any], plan: Any, ptx: bytes) -> Dict[str, object]:
    """Each listed copy (src, dst: positions in target.indices), one pair at a time."""
    cuda = _Cuda()
    cuda.call(ProbeStatus.INIT_ERROR, "cuInit", ctypes.c_uint(0))
    devices: List[Device] = []
    done: List[List[Any]] = []
    try:
        for ordinal in range(len(target.indices)):
            devices.append(Device(cuda, ordinal, ptx))
        for i, j in pairs:
            done.append([target.indices[i], target.indices[j], *_copy(cuda, devices[i], devices[j], plan)])
    except _CudaError as err:
        return {"status": "error", "detail": str(err), "pairs": done}
    finally:
        for device in devices:
            device.close()
    return {"status": "ok", "pairs": done}


def _copy(cuda: _Cuda, a: Device, b: Device, plan: Any) -> Tuple[Optional[float], str]:
    """GB/s of cuMemcpyPeer from a to b (CUDA events on a), or None and why not."""
    can = ctypes.c_int()
    cuda.call(ProbeStatus.INIT_ERROR, "cuDeviceCanAccessPeer", ctypes.byref(can), a.dev, b.dev)
    if not can.value:
        return None, "no peer access between them"
    a.current()
    code = cuda.lib.cuCtxEnablePeerAccess(b.ctx, ctypes.c_uint(0))
    if code not in (0, CU_ERROR_PEER_ACCESS_ALREADY_ENABLED):
        return None, f"cuCtxEnablePeerAccess returned {cuda.name(code)}"
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
    gbps = nbytes * plan.reps / a.seconds(start, end) / 1e9
    a.free(src)
    b.current()
    b.free(dst)
    return gbps, ""


def run_peer_pairs(targets: Sequence[ProbeTarget], pairs: Sequence[Any], plan: Any, ptx: bytes,
                   timeout_s: float) -> Tuple[Tuple[DeepPeer, ...], Optional[str]]:
    """The planned copies (read/deeptopo.PeerPair) between `targets`, in one child that sees
    every GPU they name: each copy, and why the child failed where it did."""
    named = sorted({i for p in pairs for i in (p.src, p.dst)})
    ring = [t for t in targets if t.index in named]
    position = {t.index: k for k, t in enumerate(ring)}
    plan_of = {(p.src, p.dst): p for p in pairs}
    ordinals = [(position[p.src], position[p.dst]) for p in pairs if p.src in position and p.dst in position]
    peer_target = DeepTarget(-1, ",".join(t.uuid for t in ring), tuple(t.index for t in ring))
    (outcome,) = run_children([peer_target], lambda t: _pairs_in_child(t, ordinals, plan, ptx), timeout_s)
    failure = child_failure(outcome, timeout_s)
    data = outcome.data or {}
    peers = []
    for src, dst, gbps, detail in data.get("pairs") or ():
        planned = plan_of.get((int(src), int(dst)))
        peers.append(DeepPeer(int(src), int(dst), None if gbps is None else float(gbps), str(detail),
                              planned.via if planned else "", tuple(planned.links) if planned else ()))
    detail = failure[1] if failure else (str(data.get("detail")) if data.get("status") != "ok" else None)
    return tuple(peers), detail
