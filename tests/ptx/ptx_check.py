#!/usr/bin/env python3
"""Assemble the committed PTX with ptxas for every architecture it must run on (`make ptx-check`).

    python tests/ptx/ptx_check.py

ptxas comes from PyPI nvidia-cuda-nvcc-cu12 (pinned in setup.cfg's test extra).
deep_kernels.ptx must assemble for sm_70, sm_75, sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120,
and deep_tensor.ptx (mma.sync: sm_80 and newer) for sm_80 to sm_120, each with no error and no
warning; one line per file and architecture names each kernel's register count (`ptxas -v`).
Then one line per memory kernel gives the width of its global loads: in the PTX
(`ld.global.v2.u64` is 128 bits), and in the SASS that ptxas wrote for each architecture, read
with nvdisasm (PyPI nvidia-cuda-nvdisasm; its CUDA 13 build no longer reads sm_70, which is
said so).  The HBM kernels (hc_read, hc_copy) must load 128 bits at a time in both.
Exit status 1 on any error or warning or a narrower HBM load, 2 when ptxas is not installed:
never a pass without having assembled.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PTX_DIR = os.path.join(ROOT, "healthcheck", "read", "ptx")
PTX = os.path.join(PTX_DIR, "deep_kernels.ptx")
ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
FILES: Dict[str, Tuple[str, ...]] = {"deep_kernels": ARCHS, "deep_tensor": ARCHS[2:]}
# the kernels that read device memory, and which of them must load 128 bits at a time
MEMORY_KERNELS = ("hc_addr_check", "hc_mi_step", "hc_walk", "hc_rand_check", "hc_read",
                  "hc_copy")
HBM_KERNELS = ("hc_read", "hc_copy")
TIMEOUT_S = 120.0
USED = re.compile(r"Used (\d+) registers")
FUNCTION = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
PTX_LOAD = re.compile(r"\bld\.global(?:\.nc)?(?:\.v(\d))?\.[bsuf](\d+)")
SASS_LOAD = re.compile(r"\bLDG\.E(?:\.(?:EF|EL|LU|NA|CONSTANT|STRONG\.\w+|SYS|GPU))*(?:\.(64|128|U8|S8|U16|S16))?\b")


def find_tool(package: str, name: str) -> str:
    for entry in sys.path:
        for path in glob.glob(os.path.join(entry, "nvidia", package, "bin", name)):
            return path
    raise FileNotFoundError(f"{name} not found: pip install the nvidia {package} wheel (make venv)")


def find_ptxas() -> str:
    return find_tool("cuda_nvcc", "ptxas")


def find_nvdisasm() -> Optional[str]:
    for package in ("cu13", "cuda_nvdisasm"):
        try:
            return find_tool(package, "nvdisasm")
        except FileNotFoundError:
            continue
    return None


def assemble(ptxas: str, arch: str, ptx: str = PTX,
             cubin: Optional[str] = None) -> Tuple[int, str, Dict[str, int]]:
    """(exit status, ptxas's messages, kernel -> registers) for one architecture; the cubin is
    kept at `cubin` when given."""
    with tempfile.TemporaryDirectory() as tmp:
        out = cubin or os.path.join(tmp, f"{arch}.cubin")
        run = subprocess.run([ptxas, "-v", "--warning-as-error", f"-arch={arch}", "-o", out, ptx],
                             capture_output=True, text=True, timeout=TIMEOUT_S)
    text = run.stdout + run.stderr
    registers: Dict[str, int] = {}
    current = None
    for line in text.splitlines():
        m = FUNCTION.search(line)
        if m:
            current = m.group(1)
        m = USED.search(line)
        if m and current:
            registers[current] = int(m.group(1))
    return run.returncode, text, registers


def problems(text: str) -> List[str]:
    """ptxas's warning and error lines (the info lines of -v are not problems)."""
    return [ln for ln in text.splitlines() if re.search(r"\b(warning|error|fatal)\b", ln, re.I)]


def ptx_load_widths(ptx_text: str) -> Dict[str, Counter]:
    """kernel -> Counter of its global loads' widths in bits, from the PTX."""
    out: Dict[str, Counter] = {}
    for body in re.split(r"(?=\.visible \.entry )", ptx_text)[1:]:
        name = body.split(".entry ", 1)[1].split("(", 1)[0].strip()
        out[name] = Counter(int(v or 1) * int(bits) for v, bits in PTX_LOAD.findall(body))
    return out


def sass_load_widths(sass: str) -> Dict[str, Counter]:
    """kernel -> Counter of its LDG widths in bits, from nvdisasm's listing."""
    out: Dict[str, Counter] = {}
    current = None
    sizes = {"": 32, "64": 64, "128": 128, "U8": 8, "S8": 8, "U16": 16, "S16": 16}
    for line in sass.splitlines():
        m = re.match(r"^\.text\.(\w+):", line.strip())
        if m:
            current = m.group(1)
            out.setdefault(current, Counter())
            continue
        if current:
            for size in SASS_LOAD.findall(line):
                out[current][sizes[size]] += 1
    return out


def disassemble(nvdisasm: Optional[str], cubin: str) -> Tuple[Optional[Dict[str, Counter]], str]:
    if nvdisasm is None:
        return None, "nvdisasm not installed"
    run = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, timeout=TIMEOUT_S)
    if run.returncode != 0:
        first = (run.stderr.strip().splitlines() or ["exit %d" % run.returncode])[0]
        return None, first.replace("nvdisasm fatal   : ", "")
    return sass_load_widths(run.stdout), ""


def widths(counter: Counter) -> str:
    return " ".join(f"{n}x{bits}-bit" for bits, n in sorted(counter.items(), reverse=True)) or "none"


def main() -> int:
    try:
        ptxas = find_ptxas()
    except FileNotFoundError as exc:
        print(f"ptx-check: {exc}", file=sys.stderr)
        return 2
    nvdisasm = find_nvdisasm()
    failed = False
    sass: Dict[str, Dict[str, Counter]] = {}  # arch -> kernel -> widths (deep_kernels only)
    sass_missing: Dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, archs in FILES.items():
            ptx = os.path.join(PTX_DIR, f"{name}.ptx")
            for arch in archs:
                cubin = os.path.join(tmp, f"{name}-{arch}.cubin")
                rc, text, registers = assemble(ptxas, arch, ptx, cubin)
                bad = problems(text)
                if rc != 0 or bad or not registers:
                    failed = True
                    print(f"{name} {arch}: FAILED (ptxas exit {rc})")
                    for line in bad or text.splitlines():
                        print(f"    {line}")
                    continue
                print(f"{name} {arch}: ok, registers "
                      + ", ".join(f"{k} {v}" for k, v in sorted(registers.items())))
                if name == "deep_kernels":
                    got, why = disassemble(nvdisasm, cubin)
                    if got is None:
                        sass_missing[arch] = why
                    else:
                        sass[arch] = got
    with open(PTX, encoding="utf-8") as handle:
        in_ptx = ptx_load_widths(handle.read())
    for kernel in MEMORY_KERNELS:
        ptx_w = in_ptx.get(kernel, Counter())
        by_arch = [f"{arch} {widths(sass[arch].get(kernel, Counter()))}" for arch in sass]
        line = f"loads {kernel}: PTX {widths(ptx_w)}; SASS " + "; ".join(by_arch)
        if sass_missing:
            line += "; " + "; ".join(f"{a} not disassembled ({w})" for a, w in sass_missing.items())
        if kernel in HBM_KERNELS:
            narrow = [f"PTX {widths(ptx_w)}"] if set(ptx_w) != {128} else []
            narrow += [f"{a} SASS {widths(k.get(kernel, Counter()))}" for a, k in sass.items()
                       if set(k.get(kernel, Counter())) != {128}]
            if narrow:
                failed = True
                line += f"  <-- FAILED: an HBM kernel must load 128 bits at a time ({', '.join(narrow)})"
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
