"""The deep level's CUDA plumbing, shared by its children (read/deep.py: one GPU each;
read/deeplinks.py: host copies and GPU pairs): one GPU's context, the module from the PTX the
package ships, launches, events, and NVML's clock readings while a kernel runs.

    d = Device(cuda, 0, read_ptx())     # in a probe child (cudaprobe.run_children)
    d.launch("hc_read", blocks, *args); d.record(start); ...; seconds = d.seconds(start, end)

Times are CUDA events on the device, never the host's clock.  The parent never touches CUDA.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Optional, Tuple

from ..model import ProbeStatus
from ..records import NamedTuple
from .cudaprobe import _Cuda

PTX_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptx", "deep_kernels.ptx")
KERNELS = ("hc_addr_write", "hc_addr_check", "hc_mi_fill", "hc_mi_step", "hc_read", "hc_copy",
           "hc_fma")
THREADS = 256
FLIP = (1 << 64) - 1
CU_ATTR_SM_COUNT = 16
CU_ERROR_NOT_READY = 600
NVML_CLOCK_SM = 1


class DeepTarget(NamedTuple):
    index: int  # type: ignore[assignment]
    uuid: str  # GPU-<uuid> (several, comma-separated, for the peer child)
    indices: Tuple[int, ...] = ()  # the peer child: the NVML index of each listed GPU


def read_ptx() -> bytes:
    with open(PTX_PATH, "rb") as handle:
        return handle.read() + b"\0"


def u64(value: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(value & FLIP)


class Device:
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


class GpuClocks:
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


