"""The one door to CUDA: allocation probes in killable child processes with deadlines.

    results = run_probes([ProbeTarget(index=0, uuid="GPU-..."), ...], ProbeSize(quick_mib=256),
                         timeout_s=30.0)

For each GPU the parent forks one child that sets
CUDA_VISIBLE_DEVICES=GPU-<uuid>, loads libcuda.so.1 through ctypes (never a framework),
creates the primary context, allocates, writes a pattern with cuMemsetD32, copies a block
host-to-device, reads both back and compares.  The parent never calls CUDA itself, so forking
it is safe and cheap.  A child past the deadline is killed: a hung GPU costs that GPU its
verdict, not the run.  A child dies with its parent however the parent dies: it stays in the
parent's process group (slurmd's SIGTERM/SIGKILL of the group reaches it) and asks the kernel
for SIGKILL when the parent goes (PR_SET_PDEATHSIG), so no probe outlives a killed check.

At --level quick the memset pattern is read back at 32 evenly spread samples (1 MiB in all), and
a 256 KiB non-constant block is written and read back; at --level full every byte is read back
in 64 MiB chunks.  The buffers are small on purpose: each probe child is a fork, and the pages
it touches are what it costs.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..model import ProbeResult, ProbeStatus
from ..records import NamedTuple

MIB = 1 << 20
CHUNK = 64 * MIB  # host buffer for full read-back
SAMPLES = 32  # read-back samples at --level quick, evenly spread
SAMPLE_BYTES = 32 * 1024
HTOD_BYTES = 256 * 1024  # the non-constant block written and read back
PAGE = 4096  # sample offsets stay page- (so pattern-word-) aligned
PATTERN = 0x5AA5C33C  # alternating bits in every byte lane

CU_RESULT_NAMES = {
    0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE", 220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    226: "CUDA_ERROR_CONTAINED", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    802: "CUDA_ERROR_SYSTEM_NOT_READY", 999: "CUDA_ERROR_UNKNOWN",
}


class ProbeTarget(NamedTuple):
    index: int  # type: ignore[assignment]  # NVML index, for the result
    uuid: str  # GPU-<uuid>, or MIG-<uuid> for a MIG device: how the child selects its device
    # memory live co-tenants of a shared GPU (gres/shard, gres/mps) hold there: not free for the
    # probe, which then sizes itself below what is left (probe_bytes)
    held_mib: int = 0
    pci_bus_id: str = ""  # NVML gave no UUID (uuid ""): the child takes the device at this address


class ProbeSize(NamedTuple):
    quick_mib: int = 256
    full_fraction: Optional[float] = None  # set at --level full: share of free memory


class _Kit(NamedTuple):
    """What every probe child needs that does not depend on its GPU, made once in the parent
    before it forks: a child only reads it, so its pages stay shared.  Each child building its
    own (a libc handle, the 256 KiB block) cost it ~125 of the ~815 page faults a child took."""

    prctl: Any  # libc's prctl, or None where there is none
    memcmp: Any
    block: bytes  # the non-constant host-to-device block


def _kit() -> _Kit:
    libc = ctypes.CDLL(None, use_errno=True)
    memcmp = libc.memcmp
    memcmp.restype = ctypes.c_int
    memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    return _Kit(prctl=getattr(libc, "prctl", None), memcmp=memcmp,
                block=bytes((i * 7 + 13) & 0xFF for i in range(256)) * (HTOD_BYTES // 256))


class _CudaError(Exception):
    def __init__(self, status: ProbeStatus, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} returned {name} ({code})")
        self.status, self.call, self.code, self.name = status, call, code, name


class _Cuda:
    """Just enough of the CUDA driver API, through ctypes."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")

    def name(self, code: int) -> str:
        text = ctypes.c_char_p()
        fn = getattr(self.lib, "cuGetErrorName", None)
        if fn is not None and fn(code, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode("ascii", "replace")
        return CU_RESULT_NAMES.get(code, f"CUresult {code}")

    def call(self, status: ProbeStatus, fn: str, *args: object) -> None:
        code = getattr(self.lib, fn)(*args)
        if code != 0:
            raise _CudaError(status, fn, code, self.name(code))


def probe_bytes(size: ProbeSize, free: int, total: int, held_mib: int = 0) -> int:
    """How much the probe allocates (pure): `quick_mib`, or at --level full `full_fraction` of
    free memory.  quick_mib larger than this GPU (a small board in a fleet config) would fail
    every probe with OUT_OF_MEMORY: half the board is tested instead.  The quick size is not
    capped by free memory, which a leaked context legitimately exhausts (and the allocation's
    OUT_OF_MEMORY then fails the GPU), except on a shared GPU, where `held_mib` of it belongs
    to live co-tenants: there the probe takes at most half of what they leave, so that it
    neither fails for their memory nor takes the last of it from them."""
    if held_mib > 0:
        free = min(free, max(0, total - held_mib * MIB))
    if size.full_fraction is not None:
        nbytes = int(free * size.full_fraction)
    else:
        nbytes = min(size.quick_mib * MIB, total // 2)
        if held_mib > 0:
            nbytes = min(nbytes, free // 2)
    return max(HTOD_BYTES, nbytes - nbytes % MIB)


def _probe_in_child(size: ProbeSize, kit: _Kit, held_mib: int = 0,
                    tick: Callable[[], None] = lambda: None, pci_bus_id: str = "") -> Dict[str, object]:
    """Runs in the child, with CUDA_VISIBLE_DEVICES naming exactly one GPU (given `pci_bus_id`:
    unset, the device at that address taken).  `tick` tells the parent it is still moving."""
    mps = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    result = _probe_on_device(size, kit, held_mib, tick, pci_bus_id)
    return {**result, "mps_pipe": mps[:200]} if mps else result


def _probe_on_device(size: ProbeSize, kit: _Kit, held_mib: int,
                     tick: Callable[[], None], pci_bus_id: str = "") -> Dict[str, object]:
    try:
        cuda = _Cuda()
    except OSError as exc:
        return {"status": ProbeStatus.INIT_ERROR.value, "detail": f"cannot load libcuda.so.1: {exc}"}
    c = ctypes
    dev, ctx, count = c.c_int(), c.c_void_p(), c.c_int()
    ptr = c.c_uint64()
    tested = 0
    try:
        init = ProbeStatus.INIT_ERROR
        cuda.call(init, "cuInit", c.c_uint(0))
        if pci_bus_id:
            cuda.call(init, "cuDeviceGetByPCIBusId", c.byref(dev), c.c_char_p(pci_bus_id.encode()))
        else:
            cuda.call(init, "cuDeviceGetCount", c.byref(count))
            if count.value != 1:
                return {"status": init.value, "detail": f"CUDA sees {count.value} devices, expected 1"}
            cuda.call(init, "cuDeviceGet", c.byref(dev), c.c_int(0))
        cuda.call(init, "cuDevicePrimaryCtxRetain", c.byref(ctx), dev)
        cuda.call(init, "cuCtxSetCurrent", ctx)
        free, total = c.c_size_t(), c.c_size_t()
        cuda.call(ProbeStatus.ALLOC_ERROR, "cuMemGetInfo_v2", c.byref(free), c.byref(total))
        nbytes = probe_bytes(size, free.value, total.value, held_mib)
        cuda.call(ProbeStatus.ALLOC_ERROR, "cuMemAlloc_v2", c.byref(ptr), c.c_size_t(nbytes))
        copy = ProbeStatus.COPY_ERROR
        cuda.call(copy, "cuMemsetD32_v2", c.c_uint64(ptr.value), c.c_uint(PATTERN), c.c_size_t(nbytes // 4))
        cuda.call(copy, "cuCtxSynchronize")
        tick()
        if size.full_fraction is not None:
            spans = [(off, min(CHUNK, nbytes - off)) for off in range(0, nbytes, CHUNK)]
        else:
            # aligned, or the pattern read at an odd offset would look like corruption
            step = max(SAMPLE_BYTES, (nbytes - SAMPLE_BYTES) // (SAMPLES - 1) // PAGE * PAGE)
            spans = [(min(i * step, nbytes - SAMPLE_BYTES), SAMPLE_BYTES) for i in range(SAMPLES)]
        longest = max(length for _, length in spans)
        # Built once and compared with memcmp: at --level full a Python slice-and-compare per
        # chunk costs ~1.6 s of CPU per GiB, past the deadline on a 141 GiB board.
        expected = c.create_string_buffer(PATTERN.to_bytes(4, "little") * (longest // 4), longest)
        host = c.create_string_buffer(max(longest, HTOD_BYTES))
        memcmp, block = kit.memcmp, kit.block
        for offset, length in spans:
            cuda.call(copy, "cuMemcpyDtoH_v2", host, c.c_uint64(ptr.value + offset), c.c_size_t(length))
            if memcmp(host, expected, length) != 0:
                bad = _first_difference(host.raw[:length], expected.raw[:length])
                return {"status": ProbeStatus.MISMATCH.value, "bytes": tested + bad,
                        "detail": f"read back differs from the pattern written at byte "
                                  f"{offset + bad} of {nbytes}"}
            tested += length
            tick()
        # a block that is not a constant: catches a copy path that returns stale or fixed data
        cuda.call(copy, "cuMemcpyHtoD_v2", c.c_uint64(ptr.value), block, c.c_size_t(HTOD_BYTES))
        cuda.call(copy, "cuMemcpyDtoH_v2", host, c.c_uint64(ptr.value), c.c_size_t(HTOD_BYTES))
        if memcmp(host, block, HTOD_BYTES) != 0:
            bad = _first_difference(host.raw[:HTOD_BYTES], block)
            return {"status": ProbeStatus.MISMATCH.value, "bytes": tested,
                    "detail": f"host-to-device block read back differs at byte {bad}"}
        tested += HTOD_BYTES
        return {"status": ProbeStatus.OK.value, "bytes": tested,
                "detail": f"{nbytes // MIB} MiB allocated, {tested // MIB} MiB verified"}
    except _CudaError as err:
        return {"status": err.status.value, "cu_result": err.code, "cu_name": err.name,
                "bytes": tested, "detail": str(err)}
    finally:
        if ptr.value:
            cuda.lib.cuMemFree_v2(c.c_uint64(ptr.value))
        if ctx.value:
            release = getattr(cuda.lib, "cuDevicePrimaryCtxRelease_v2", None) or getattr(
                cuda.lib, "cuDevicePrimaryCtxRelease")
            release(dev)


def _first_difference(a: bytes, b: bytes) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int, prctl: Any) -> None:
    """In a forked child: SIGKILL when the parent dies, however it dies (SIGKILL included).

    No setsid(): a child in its own session escapes slurmd's kill of the process group."""
    if prctl is not None:  # None: not Linux; the process group still reaches us
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


TICK = b"\0"  # a child's "still moving" on its pipe: never part of its JSON result
# A child cut by the run's budget counts as cut short, not hung, only if it ticked this
# recently: one 64 MiB chunk read back and compared takes well under a second, even with
# eight children sharing two cores; a GPU stuck in the driver ticks no more.
STALL_S = 5.0


def _tick(write_fd: int) -> None:
    try:
        os.write(write_fd, TICK)
    except OSError:
        pass  # the parent is gone or stopped reading: the result will say so


def _child_main(target: Any, work: Callable[..., Dict[str, object]], prctl: Any, write_fd: int, parent: int,
                progress: bool = False) -> None:
    """Never returns: the child must not run the parent's cleanup or atexit handlers.
    `progress`: work is called as work(target, tick), tick() telling the parent it moves."""
    code = 0
    try:
        # The parent's SIGTERM handler unwinds Python code; the child, maybe blocked in a
        # driver call, must simply die with its group.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(parent, prctl)
        if target.uuid:
            os.environ["CUDA_VISIBLE_DEVICES"] = target.uuid
        else:  # no UUID to name it by: all visible, the work takes its device by PCI address
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        os.environ.pop("CUDA_DEVICE_ORDER", None)
        result = work(target, lambda: _tick(write_fd)) if progress else work(target)
        os.write(write_fd, json.dumps(result).encode())
    except BaseException as exc:  # noqa: BLE001 - report anything, then leave without cleanup
        try:
            os.write(write_fd, json.dumps({"status": ProbeStatus.CRASHED.value,
                                           "detail": f"probe raised {type(exc).__name__}: {exc}"}).encode())
        except OSError:
            code = 1
    finally:
        os._exit(code)


class _Child:
    """One probe child as the parent tracks it (mutable: its output arrives in pieces)."""

    __slots__ = ("target", "pid", "fd", "started", "data", "eof", "ticks", "ticked")

    def __init__(self, target: Any, pid: int, fd: int, started: float) -> None:
        self.target, self.pid, self.fd, self.started = target, pid, fd, started
        self.data = b""
        self.eof = False
        self.ticks = 0
        self.ticked: Optional[float] = None  # monotonic time of its last tick


class ChildOutcome(NamedTuple):
    """What one child left: its target, its JSON result (None: none, or not JSON), whether it
    finished, its wait status (-1: not reaped) and how long it ran."""

    target: Any
    data: Optional[Dict[str, Any]]
    finished: bool
    wait_status: int
    elapsed_s: float
    ticks: int = 0  # how often it said it was still moving
    quiet_s: Optional[float] = None  # seconds from its last tick to the end; None: it never ticked


def run_probes(targets: Sequence[ProbeTarget], size: ProbeSize, timeout_s: float,
               own_timeout_s: Optional[float] = None) -> Tuple[ProbeResult, ...]:
    """Probe every target in parallel; return one result per target, within timeout_s.
    `own_timeout_s`: the probe's own deadline where the run's budget cut it to `timeout_s`; a
    child still moving when that shorter deadline ends it is cut short (budget_cut), not hung."""
    kit = _kit()
    outcomes = run_children(targets, lambda target, tick: _probe_in_child(size, kit, target.held_mib, tick,
                                                                    target.pci_bus_id),
                            timeout_s, kit.prctl, progress=True)
    cut = own_timeout_s if own_timeout_s is not None and own_timeout_s > timeout_s else None
    return tuple(_result(outcome, timeout_s, cut) for outcome in outcomes)


def run_children(targets: Sequence[Any], work: Callable[..., Dict[str, object]], timeout_s: float,
                 prctl: Any = None, progress: bool = False) -> Tuple[ChildOutcome, ...]:
    """Run work(target) in one forked child per target (CUDA_VISIBLE_DEVICES = target.uuid), in
    parallel; each child's dict comes back as JSON within timeout_s, or the child is killed.
    The parent never touches CUDA: `work` runs only in the children."""
    children: List[_Child] = []
    parent = os.getpid()
    if prctl is None:
        prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    pipes: List[Tuple[int, int]] = []
    pids = [0] * len(targets)
    try:
        for _ in targets:
            pipes.append(os.pipe())
        # Nothing but the fork between forks: after the first, every page the parent writes
        # costs it a copy-on-write fault, once per page per fork.
        for i in range(len(targets)):
            pids[i] = os.fork()
            if pids[i] == 0:  # pragma: no cover - runs in the child, reported through the pipe
                for j, (read_fd, write_fd) in enumerate(pipes):
                    os.close(read_fd)
                    if j != i:
                        os.close(write_fd)  # or the parent never sees that child's pipe close
                _child_main(targets[i], work, prctl, pipes[i][1], parent, progress)
        started = time.monotonic()
        for target, pid, (read_fd, write_fd) in zip(targets, pids, pipes):
            os.close(write_fd)
            children.append(_Child(target, pid, read_fd, started))
        pipes = []
        deadline = time.monotonic() + timeout_s
        _collect(children, deadline)
    finally:
        for read_fd, write_fd in pipes:  # the forks were cut short
            os.close(read_fd)
            os.close(write_fd)
        # On a deadline, an exception or SIGTERM from slurmd: no child outlives us.
        forked = [pid for pid in pids if pid]
        finished = {child.pid for child in children if child.eof}
        for pid in forked:
            if pid not in finished:
                _kill(pid)
        reap_by = time.monotonic() + REAP_S
        statuses = {pid: _reap(pid, reap_by) for pid in forked}
        for child in children:
            os.close(child.fd)
    end = time.monotonic()
    return tuple(ChildOutcome(child.target, _decoded(child.data), child.eof, statuses[child.pid],
                              end - child.started, child.ticks,
                              end - child.ticked if child.ticked is not None else None)
                 for child in children)


def _decoded(data: bytes) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(data.decode()) if data else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def child_failure(outcome: ChildOutcome, timeout_s: float) -> Optional[Tuple[ProbeStatus, str]]:
    """Why a child left no result (TIMEOUT or CRASHED, and the words), or None when it did."""
    if not outcome.finished:
        return ProbeStatus.TIMEOUT, f"CUDA probe did not finish within {timeout_s:g} s; killed"
    if outcome.data is not None:
        return None
    wait_status = outcome.wait_status
    if wait_status == -1:
        how = "did not exit when killed"
    else:
        how = (f"killed by signal {os.WTERMSIG(wait_status)}" if os.WIFSIGNALED(wait_status)
               else f"exited with status {os.waitstatus_to_exitcode(wait_status)}")
    return ProbeStatus.CRASHED, f"CUDA probe child {how} without a result"


RESULT_CAP_BYTES = 1 << 20  # what is kept of a probe child's result pipe


def _collect(children: List[_Child], deadline: float) -> None:
    open_fds = {child.fd: child for child in children}
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        ready, _, _ = select.select(list(open_fds), [], [], remaining)
        for fd in ready:
            chunk = os.read(fd, 65536)
            child = open_fds[fd]
            if chunk:
                ticks = chunk.count(TICK)
                if ticks:
                    child.ticks += ticks
                    child.ticked = time.monotonic()
                    chunk = chunk.replace(TICK, b"")
                # a result is a few hundred bytes: past the cap it is read and dropped
                child.data += chunk[:max(0, RESULT_CAP_BYTES - len(child.data))]
            else:
                child.eof = True
                del open_fds[fd]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


REAP_S = 2.0  # how long to wait for killed children to be reaped


REAP_POLL_S = (0.0005, 0.01)  # first and longest pause between waitpid polls (no pidfd)


def _reap(pid: int, by: float) -> int:
    """The child's wait status; -1 when it is not gone by `by` (killed, but stuck in the driver
    in uninterruptible sleep: it is left to init rather than holding the run past its budget).

    A child that closed its pipe is exiting and is gone within a millisecond.  Its pidfd
    (Linux 5.3) wakes us the moment it is; without one, polls start at 0.5 ms and double up to
    10 ms.  Polling cost every prolog about a millisecond of sleeping past the exits."""
    status = _wait_now(pid)
    if status is not None:
        return status
    pidfd = _pidfd(pid)
    if pidfd is not None:
        try:
            while True:
                remaining = by - time.monotonic()
                if remaining <= 0:
                    return -1
                if select.select([pidfd], [], [], remaining)[0]:
                    break
        finally:
            os.close(pidfd)
        status = _wait_now(pid)
        return -1 if status is None else status
    pause, longest = REAP_POLL_S
    while True:
        if time.monotonic() >= by:
            return -1
        time.sleep(pause)
        pause = min(pause * 2, longest)
        status = _wait_now(pid)
        if status is not None:
            return status


def _wait_now(pid: int) -> Optional[int]:
    """The wait status if the child has exited (0 if it was reaped already), else None."""
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        return status if done else None


def _pidfd(pid: int) -> Optional[int]:
    """A pidfd for the child, readable once it has exited; None where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python built without it, or a kernel before 5.3
        return None


def _result(outcome: ChildOutcome, timeout_s: float, own_timeout_s: Optional[float] = None) -> ProbeResult:
    index, elapsed = outcome.target.index, outcome.elapsed_s
    failure = child_failure(outcome, timeout_s)
    if (failure is not None and failure[0] is ProbeStatus.TIMEOUT and own_timeout_s is not None
            and outcome.quiet_s is not None and outcome.quiet_s < STALL_S):
        return ProbeResult(index, ProbeStatus.TIMEOUT, duration_s=elapsed, budget_cut=True,
                           detail=f"cut short at {timeout_s:.1f} s by the run's time budget, still "
                                  f"reading memory back ({outcome.ticks} steps done; its own "
                                  f"deadline is {own_timeout_s:.1f} s)")
    if failure is not None:
        return ProbeResult(index, failure[0], duration_s=elapsed, detail=failure[1])
    data = outcome.data or {}
    try:
        status = ProbeStatus(data.get("status"))
    except ValueError:
        status = ProbeStatus.CRASHED
    code = data.get("cu_result")
    return ProbeResult(index, status, cu_result=code if isinstance(code, int) else None,
                       cu_name=str(data["cu_name"]) if data.get("cu_name") else None,
                       bytes_tested=int(data.get("bytes") or 0), duration_s=elapsed,
                       detail=str(data.get("detail", "")),
                       mps_pipe=str(data["mps_pipe"]) if data.get("mps_pipe") else None)
