#!/usr/bin/env python3
"""Compile the deep level's CUDA C sources to the PTX the package ships (`make ptx`).

    python tests/ptx/make_ptx.py                    # write both .ptx files
    python tests/ptx/make_ptx.py --stdout [NAME]    # print one (the regenerate-and-compare test)

healthcheck/read/ptx/deep_kernels.cu -> deep_kernels.ptx for compute_70 (every GPU), and
deep_tensor.cu -> deep_tensor.ptx for compute_80 (the tensor-core GEMM: mma.sync needs sm_80).
NVRTC (PyPI nvidia-cuda-nvrtc-cu12, pinned in setup.cfg's test extra: another NVRTC writes
other PTX) compiles them.  NVRTC stamps its own PTX ISA version (8.8 for 12.9), which a driver
older than CUDA 12.9 refuses to JIT; the kernels use nothing past ISA 7.0 (ld/st.global with
.v2.u64, atom.global.add.u64, fma.rn.f32, and mma.sync.aligned.m16n8k16 .bf16/.f16, all in ISA
7.0), so the `.version` line is set to 7.0, which every driver since CUDA 11.0 (R450) loads.
`make ptx-check` (tests/ptx/ptx_check.py) proves the claim: ptxas refuses an instruction the
stated ISA does not have.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PTX_DIR = os.path.join(ROOT, "healthcheck", "read", "ptx")
PTX_ISA = "7.0"
# name -> the virtual architecture it is compiled for
SOURCES = {"deep_kernels": "compute_70", "deep_tensor": "compute_80"}
DEPRECATED = "Architectures prior to '<compute/sm>_75' are deprecated"


def options(arch: str) -> Tuple[str, ...]:
    return (f"--gpu-architecture={arch}", "--std=c++11", "--fmad=true")


class NvrtcMissing(Exception):
    pass


def find_nvrtc() -> str:
    """libnvrtc.so.12 from the nvidia-cuda-nvrtc-cu12 wheel on sys.path."""
    for entry in sys.path:
        for path in glob.glob(os.path.join(entry, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12")):
            return path
    raise NvrtcMissing("libnvrtc.so.12 not found: pip install nvidia-cuda-nvrtc-cu12 (make venv)")


def compile_ptx(source: str, name: str = "deep_kernels") -> str:
    lib = ctypes.CDLL(find_nvrtc())
    prog = ctypes.c_void_p()
    check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(),
                                      0, None, None), "nvrtcCreateProgram")
    opts_list = options(SOURCES[name])
    opts = (ctypes.c_char_p * len(opts_list))(*(o.encode() for o in opts_list))
    rc = lib.nvrtcCompileProgram(prog, len(opts_list), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    # NVRTC 12.9 calls compute_70 deprecated (still supported) and has no option to hush it:
    # that one line is expected; any other line fails the build.
    lines = [ln for ln in log.value.decode().splitlines() if ln.strip() and DEPRECATED not in ln]
    if rc != 0 or lines:
        raise SystemExit(f"make_ptx: NVRTC on {name}.cu: rc {rc}:\n" + "\n".join(lines))
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


def build(name: str) -> str:
    with open(os.path.join(PTX_DIR, f"{name}.cu"), encoding="utf-8") as handle:
        return compile_ptx(handle.read(), name)


def main(argv: List[str]) -> int:
    if "--stdout" in argv:
        rest = [a for a in argv if a != "--stdout"]
        sys.stdout.write(build(rest[0] if rest else "deep_kernels"))
        return 0
    for name, arch in SOURCES.items():
        ptx = build(name)
        target = os.path.join(PTX_DIR, f"{name}.ptx")
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(ptx)
        print(f"{os.path.relpath(target, ROOT)}: {len(ptx)} bytes, PTX ISA {PTX_ISA}, {arch}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
