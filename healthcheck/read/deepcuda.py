"""The deep level's CUDA plumbing, shared by its children (read/deep.py: one GPU each;
read/deeplinks.py: host copies and GPU pairs): one GPU's context, the modules from the PTX the
package ships (deep_kernels.ptx on every GPU, deep_tensor.ptx on sm_80 and newer), launches
sized by the driver's occupancy, events, and NVML's readings while a kernel runs.

    d = Device(cuda, 0, read_ptx(), read_ptx(TENSOR_PTX))   # in a probe child
    d.launch("hc_read", d.grid("hc_read"), *args); d.record(start); ...; d.seconds(start, end)

Times are CUDA events on the device, never the host's clock.  The parent never touches CUDA.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Optional, Tuple

from ..model import ProbeStatus
from ..records import NamedTuple
from .cudaprobe import _Cuda, _CudaError

PTX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptx")
PTX_PATH = os.path.join(PTX_DIR, "deep_kernels.ptx")
TENSOR_PTX = os.path.join(PTX_DIR, "deep_tensor.ptx")
KERNELS = ("hc_addr_write", "hc_addr_check", "hc_mi_fill", "hc_mi_step", "hc_walk_fill",
           "hc_walk", "hc_rand_write", "hc_rand_check", "hc_read", "hc_copy", "hc_fma",
           "hc_check")
TENSOR_KERNELS = ("hc_mma_bf16", "hc_mma_f16")
TENSOR_CC = 8  # mma.sync m16n8k16 with .bf16: compute capability 8.0 and newer
THREADS = 256
FLIP = (1 << 64) - 1
CU_ATTR_SM_COUNT = 16
CU_ATTR_CC_MAJOR = 75
CU_ERROR_NOT_READY = 600
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0


class DeepTarget(NamedTuple):
    index: int  # type: ignore[assignment]
    uuid: str  # GPU-<uuid> (several, comma-separated, for the peer child)
    indices: Tuple[int, ...] = ()  # the peer child: the NVML index of each listed GPU
    held_mib: int = 0  # memory live co-tenants hold on the GPU (model.co_tenant_mib)


def read_ptx(path: str = PTX_PATH) -> bytes:
    with open(path, "rb") as handle:
        return handle.read() + b"\0"


def u64(value: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(value & FLIP)


class Device:
    """One GPU in a child: its context, the module, and the launch and timing helpers."""

    def __init__(self, cuda: _Cuda, ordinal: int, ptx: bytes, tensor_ptx: Optional[bytes] = None) -> None:
        c = ctypes
        self.cuda, self.dev, self.ctx = cuda, c.c_int(), c.c_void_p()
        self.allocs: List[int] = []
        err = ProbeStatus.INIT_ERROR
        cuda.call(err, "cuDeviceGet", c.byref(self.dev), c.c_int(ordinal))
        cuda.call(err, "cuDevicePrimaryCtxRetain", c.byref(self.ctx), self.dev)
        self.current()
        self.fn: Dict[str, Any] = {}
        self._load(ptx, KERNELS)
        major = c.c_int()
        cuda.call(err, "cuDeviceGetAttribute", c.byref(major), c.c_int(CU_ATTR_CC_MAJOR), self.dev)
        self.cc_major = major.value
        self.tensor = tensor_ptx is not None and self.cc_major >= TENSOR_CC
        if self.tensor and tensor_ptx is not None:
            self._load(tensor_ptx, TENSOR_KERNELS)
        sms = c.c_int()
        cuda.call(err, "cuDeviceGetAttribute", c.byref(sms), c.c_int(CU_ATTR_SM_COUNT), self.dev)
        self.sms = max(1, sms.value)
        self.per_sm: Dict[str, int] = {}

    def _load(self, ptx: bytes, names: Tuple[str, ...]) -> None:
        c, err = ctypes, ProbeStatus.INIT_ERROR
        module = c.c_void_p()
        self.cuda.call(err, "cuModuleLoadData", c.byref(module), c.c_char_p(ptx))
        for name in names:
            fn = c.c_void_p()
            self.cuda.call(err, "cuModuleGetFunction", c.byref(fn), module, name.encode())
            self.fn[name] = fn

    def grid(self, name: str) -> int:
        """Blocks of THREADS for a kernel to fill every SM: the SMs times what the driver says
        one SM holds at once (cuOccupancyMaxActiveBlocksPerMultiprocessor: 8 on a 2,048-thread
        SM, 6 on the 1,536-thread SMs of sm_86, sm_89 and sm_120)."""
        if name not in self.per_sm:
            n = ctypes.c_int()
            self.cuda.call(ProbeStatus.INIT_ERROR, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                           ctypes.byref(n), self.fn[name], ctypes.c_int(THREADS), ctypes.c_size_t(0))
            self.per_sm[name] = max(1, n.value)
        return self.sms * self.per_sm[name]

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
        return self.mem_info()[0]

    def mem_info(self) -> Tuple[int, int]:
        """(free, total) bytes of device memory."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.cuda.call(ProbeStatus.ALLOC_ERROR, "cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return int(free.value), int(total.value)

    def ready(self, ev: ctypes.c_void_p) -> bool:
        """Whether the work before the event has finished (cuEventQuery, without waiting)."""
        code = self.cuda.lib.cuEventQuery(ev)
        if code not in (0, CU_ERROR_NOT_READY):
            raise _CudaError(ProbeStatus.COPY_ERROR, "cuEventQuery", code, self.cuda.name(code))
        return code == 0

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
        """(clocks event reasons, SM clock MHz)."""
        reasons, clock, _, _ = self.sample_all()
        return reasons, clock

    def sample_all(self) -> Tuple[Optional[int], Optional[int], Optional[int], Optional[int]]:
        """(clocks event reasons, SM clock MHz, power mW, temperature C); None where NVML
        has no answer."""
        if self.lib is None:
            return None, None, None, None
        reasons, clock, power, temp = ctypes.c_ulonglong(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
        fn = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self.lib, "nvmlDeviceGetCurrentClocksThrottleReasons")
        got_reasons = fn(self.handle, ctypes.byref(reasons)) == 0
        got_clock = self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(clock)) == 0
        got_power = self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(power)) == 0
        got_temp = self.lib.nvmlDeviceGetTemperature(self.handle, NVML_TEMPERATURE_GPU,
                                                     ctypes.byref(temp)) == 0
        return (int(reasons.value) if got_reasons else None, int(clock.value) if got_clock else None,
                int(power.value) if got_power else None, int(temp.value) if got_temp else None)

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


