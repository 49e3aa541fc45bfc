#!/usr/bin/env python3
"""Compile healthcheck/read/ptx/deep_kernels.cu to the PTX the package ships (`make ptx`).

    python tests/ptx/make_ptx.py            # write healthcheck/read/ptx/deep_kernels.ptx
    python tests/ptx/make_ptx.py --stdout   # print it (the regenerate-and-compare test)

NVRTC (PyPI nvidia-cuda-nvrtc-cu12, pinned in setup.cfg's test extra: another NVRTC writes
other PTX) compiles for compute_70.  NVRTC stamps its own PTX ISA version (8.8 for 12.9),
which a driver older than CUDA 12.9 refuses to JIT; the kernels use nothing past ISA 7.0
(ld/st.global, atom.global.add.u64, fma.rn.f32), so the `.version` line is set to 7.0, which
every driver since CUDA 11.0 (R450) loads.  `make ptx-check` (tests/ptx/ptx_check.py) proves
the claim: ptxas refuses an instruction the stated ISA does not have.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SOURCE = os.path.join(ROOT, "healthcheck", "read", "ptx", "deep_kernels.cu")
TARGET = os.path.join(ROOT, "healthcheck", "read", "ptx", "deep_kernels.ptx")
PTX_ISA = "7.0"
ARCH = "compute_70"
DEPRECATED = "Architectures prior to '<compute/sm>_75' are deprecated"
OPTIONS = (f"--gpu-architecture={ARCH}", "--std=c++11", "--fmad=true")


class NvrtcMissing(Exception):
    pass


def find_nvrtc() -> str:
    """libnvrtc.so.12 from the nvidia-cuda-nvrtc-cu12 wheel on sys.path."""
    for entry in sys.path:
        for path in glob.glob(os.path.join(entry, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12")):
            return path
    raise NvrtcMissing("libnvrtc.so.12 not found: pip install nvidia-cuda-nvrtc-cu12 (make venv)")


def compile_ptx(source: str) -> str:
    lib = ctypes.CDLL(find_nvrtc())
    prog = ctypes.c_void_p()
    check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"deep_kernels.cu",
                                      0, None, None), "nvrtcCreateProgram")
    opts = (ctypes.c_char_p * len(OPTIONS))(*(o.encode() for o in OPTIONS))
    rc = lib.nvrtcCompileProgram(prog, len(OPTIONS), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    # NVRTC 12.9 calls compute_70 deprecated (still supported) and has no option to hush it:
    # that one line is expected; any other line fails the build.
    lines = [ln for ln in log.value.decode().splitlines() if ln.strip() and DEPRECATED not in ln]
    if rc != 0 or lines:
        raise SystemExit(f"make_ptx: NVRTC on {SOURCE}: rc {rc}:\n" + "\n".join(lines))
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    check(lib, lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return stated_isa(ptx.value.decode())


def stated_isa(ptx: str) -> str:
    text, n = re.subn(r"^\.version \d+\.\d+$", f".version {PTX_ISA}", ptx, count=1, flags=re.M)
    if n != 1:
        raise SystemExit("make_ptx: NVRTC's PTX has no .version line")
    return text


def check(lib: ctypes.CDLL, rc: int, what: str) -> None:
    if rc != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise SystemExit(f"make_ptx: {what}: {lib.nvrtcGetErrorString(rc).decode()}")


def main(argv: List[str]) -> int:
    with open(SOURCE, encoding="utf-8") as handle:
        ptx = compile_ptx(handle.read())
    if "--stdout" in argv:
        sys.stdout.write(ptx)
        return 0
    with open(TARGET, "w", encoding="utf-8") as handle:
        handle.write(ptx)
    print(f"{os.path.relpath(TARGET, ROOT)}: {len(ptx)} bytes, PTX ISA {PTX_ISA}, {ARCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
