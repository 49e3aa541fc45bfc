#!/usr/bin/env python3
"""Assemble the committed PTX with ptxas for every architecture it must run on (`make ptx-check`).

    python tests/ptx/ptx_check.py

ptxas comes from PyPI nvidia-cuda-nvcc-cu12 (pinned in setup.cfg's test extra).  Each of
sm_70, sm_80, sm_90, sm_100 and sm_120 must assemble with no error and no warning; one line per
architecture names each kernel's register count (`ptxas -v`).  Exit status 1 on any error or
warning, 2 when ptxas is not installed: never a pass without having assembled.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PTX = os.path.join(ROOT, "healthcheck", "read", "ptx", "deep_kernels.ptx")
ARCHS = ("sm_70", "sm_80", "sm_90", "sm_100", "sm_120")
TIMEOUT_S = 120.0
USED = re.compile(r"Used (\d+) registers")
FUNCTION = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")


def find_ptxas() -> str:
    for entry in sys.path:
        for path in glob.glob(os.path.join(entry, "nvidia", "cuda_nvcc", "bin", "ptxas")):
            return path
    raise FileNotFoundError("ptxas not found: pip install nvidia-cuda-nvcc-cu12 (make venv)")


def assemble(ptxas: str, arch: str) -> Tuple[int, str, Dict[str, int]]:
    """(exit status, ptxas's messages, kernel -> registers) for one architecture."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, f"{arch}.cubin")
        run = subprocess.run([ptxas, "-v", "--warning-as-error", f"-arch={arch}", "-o", out, PTX],
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


def main() -> int:
    try:
        ptxas = find_ptxas()
    except FileNotFoundError as exc:
        print(f"ptx-check: {exc}", file=sys.stderr)
        return 2
    failed = False
    for arch in ARCHS:
        rc, text, registers = assemble(ptxas, arch)
        bad = problems(text)
        if rc != 0 or bad or not registers:
            failed = True
            print(f"{arch}: FAILED (ptxas exit {rc})")
            for line in bad or text.splitlines():
                print(f"    {line}")
            continue
        print(f"{arch}: ok, registers " + ", ".join(f"{k} {v}" for k, v in sorted(registers.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
