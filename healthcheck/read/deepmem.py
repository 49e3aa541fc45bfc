"""The deep level's memory test, in a GPU's child (read/deep.py calls it): every word of the
tested memory is written and compared on the device, and only the count and the first failing
words come back.

    ok = memtest(device, plan, out, held_mib)     # False: failing words, recorded in out

Each pass runs, in order, and stops at the first that finds a failing word:
1. address in address: each 64-bit word holds its own device address, then its complement
   (addressing faults: two addresses that reach one cell);
2. moving inversions: a pattern and its complement, read-verify-write up then down (stuck
   and coupled bits, a cell disturbed by its neighbours' writes);
3. walking ones and zeros: each word one bit set (every other word its complement) at a
   position that moves with the address, 64 sweeps so every bit of every word is walked;
   the next pass swaps which words carry the ones (data-line faults);
4. random data: a hash of the word's index and the pass (patterns with no structure).
`[deep] memtest_passes` repeats the whole (default 1).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict

from ..model import ProbeStatus
from .cudaprobe import MIB, _CudaError
from .deepcuda import FLIP, Device, u64

MAX_RECORDS = 8  # HC_MAX_RECORDS in deep_kernels.cu
RESULT_BYTES = (1 + 3 * MAX_RECORDS) * 8
MI_PATTERN = 0x5555555555555555  # and its complement 0xAAAA...: every bit both ways
RANDOM_SEED = 0x243F6A8885A308D3  # pi's digits: any fixed seed; pass p adds p


def memtest_bytes(free: int, total: int, fraction: float, held_mib: int) -> int:
    """How much the memory test covers (pure): `fraction` of free memory less the result
    buffer and a margin.  On a GPU whose live co-tenants hold `held_mib` (model.co_tenant_mib,
    as the CUDA probe is sized) at most half of what they leave: the test must neither fail
    for their memory nor take the last of it from them."""
    if held_mib > 0:
        free = min(free, max(0, total - held_mib * MIB)) // 2
    nbytes = int(free * fraction) - RESULT_BYTES - 2 * MIB
    return nbytes - nbytes % MIB


def memtest(d: Device, plan: Any, out: Dict[str, Any], held_mib: int = 0) -> bool:
    """The memory test; False when it found failing words (recorded in out)."""
    free, total = d.mem_info()
    nbytes = memtest_bytes(free, total, plan.fraction, held_mib)
    if nbytes < MIB:
        raise _CudaError(ProbeStatus.ALLOC_ERROR, "cuMemGetInfo_v2", 2, "too little free memory")
    buf = d.alloc(nbytes)  # first: on an idle GPU it starts the GPU's memory
    result = d.alloc(4096)
    words = nbytes // 8
    out["mem_bytes"] = nbytes
    host = (ctypes.c_uint64 * (1 + 3 * MAX_RECORDS))()
    start, end = d.event(), d.event()
    d.record(start)
    n, ptr = ctypes.c_uint64(words), ctypes.c_uint64(buf)

    def launch(kernel: str, *args: Any) -> None:
        d.launch(kernel, d.grid(kernel), ptr, n, *args)

    def clear() -> None:
        d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemsetD32_v2", ctypes.c_uint64(result), ctypes.c_uint(0),
                    ctypes.c_size_t(RESULT_BYTES // 4))

    def verdict(name: str) -> bool:
        """The failing words the kernels since clear() counted: True when none."""
        d.cuda.call(ProbeStatus.COPY_ERROR, "cuMemcpyDtoH_v2", host, ctypes.c_uint64(result),
                    ctypes.c_size_t(RESULT_BYTES))
        if host[0] == 0:
            return True
        out["mem_errors"], out["mem_pass"] = int(host[0]), name
        out["mem_records"] = [[int(host[1 + 3 * k]) * 8, buf + int(host[1 + 3 * k]) * 8,
                               int(host[2 + 3 * k]), int(host[3 + 3 * k])]
                              for k in range(min(int(host[0]), MAX_RECORDS))]
        return False

    def one_pass(p: int) -> bool:
        label = f"pass {p + 1}: " if plan.memtest_passes > 1 else ""
        for name, flip in (("address in address", 0), ("address in address, inverted", FLIP)):
            launch("hc_addr_write", ptr, u64(flip))
            clear()
            launch("hc_addr_check", ptr, u64(flip), ctypes.c_uint64(result))
            if not verdict(label + name):
                return False
        pat, inv = MI_PATTERN, MI_PATTERN ^ FLIP
        launch("hc_mi_fill", u64(pat))
        for name, expect, write, down in (("moving inversions up", pat, inv, 0),
                                          ("moving inversions down", inv, pat, 1),
                                          ("moving inversions verify", pat, pat, 0)):
            clear()
            launch("hc_mi_step", u64(expect), u64(write), ctypes.c_uint(down), ctypes.c_uint64(result))
            if not verdict(label + name):
                return False
        parity = ctypes.c_uint64(p & 1)
        launch("hc_walk_fill", parity)
        clear()
        launch("hc_walk", parity, ctypes.c_uint64(result))  # 64 sweeps in one launch
        if not verdict(label + "walking ones and zeros"):
            return False
        seed = u64(RANDOM_SEED + p)
        launch("hc_rand_write", seed)
        clear()
        launch("hc_rand_check", seed, ctypes.c_uint64(result))
        return verdict(label + "random data")

    ok = True
    for p in range(plan.memtest_passes):
        out["mem_passes"] = p + 1
        if not one_pass(p):
            ok = False
            break
    d.record(end)
    out["times"]["memory"] = d.seconds(start, end)
    d.free(buf)
    d.free(result)
    return ok
