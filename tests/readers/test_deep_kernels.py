"""The deep level's kernels (host build, run by the fake libcuda.so.1) and the committed PTX."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json, sys
from healthcheck.read.cudaprobe import ProbeTarget
from healthcheck.read.deep import DeepPlan, run_deep
ts = [ProbeTarget(i, 'GPU-fa4e0000-0000-4000-8000-%012x' % i) for i in range(int(sys.argv[1]))]
run = run_deep(ts, [], DeepPlan(bandwidth_mib=2, host_mib=2), 120)
print(json.dumps([[g.index, g.status, g.detail, g.mem_errors, g.mem_pass,
                   [list(r) for r in g.mem_records]] for g in run.gpus]))
"""


def run_deep_on(fakegpu, tmp_path, scenario: str, gpus: int):
    path = tmp_path / "scenario"
    path.write_text(f"gpus = {gpus}\ngpu.*.memory.total_mib = 32\n" + scenario)
    env = {**os.environ, "LD_LIBRARY_PATH": str(fakegpu), "FAKEGPU_SCENARIO": str(path),
           "PYTHONPATH": str(ROOT)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(gpus)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import json

    return json.loads(done.stdout)


def test_deep_memory_host_build_passes_on_clean_memory(fakegpu, tmp_path):
    for index, status, detail, errors, _, _ in run_deep_on(fakegpu, tmp_path, "", 2):
        assert (status, errors) == ("ok", 0), detail


@pytest.mark.parametrize("addr,bit,value", [(0, 0, 1), (0x43, 3, 1), (0x1FFFFF, 7, 1),
                                            (0x123457, 6, 0), (0x1000000, 1, 0)])
def test_deep_memory_host_build_finds_every_injected_stuck_bit(fakegpu, tmp_path, addr, bit, value):
    ((_, status, detail, errors, where, records),) = run_deep_on(
        fakegpu, tmp_path, f"gpu.0.mem.stuck_bits = {addr:#x}:{bit}={value}\n", 1)
    assert status == "ok", detail
    assert errors == 1, (where, records)
    offset, _, expected, actual = records[0]
    assert offset == addr - addr % 8
    assert expected ^ actual == 1 << ((addr % 8) * 8 + bit)


def test_deep_memory_host_build_finds_two_stuck_bits_in_one_pass(fakegpu, tmp_path):
    ((_, _, _, errors, _, records),) = run_deep_on(
        fakegpu, tmp_path, "gpu.0.mem.stuck_bits = 0x10:0,0x100008:5\n", 1)
    assert errors == 2
    assert sorted(r[0] for r in records) == [0x10, 0x100008]


def test_deep_ptx_regenerates_to_the_committed_file():
    """make ptx (NVRTC, pinned in setup.cfg) writes exactly the PTX the package ships."""
    pytest.importorskip("nvidia.cuda_nvrtc", reason="nvidia-cuda-nvrtc-cu12 not installed (make venv)")
    done = subprocess.run([sys.executable, str(ROOT / "tests/ptx/make_ptx.py"), "--stdout"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    committed = (ROOT / "healthcheck/read/ptx/deep_kernels.ptx").read_text()
    assert done.stdout == committed, "run `make ptx` and commit healthcheck/read/ptx/deep_kernels.ptx"
    assert "\n.version 7.0\n.target sm_70\n" in committed


def test_deep_ptx_check_assembles_for_every_architecture():
    pytest.importorskip("nvidia.cuda_nvcc", reason="nvidia-cuda-nvcc-cu12 not installed (make venv)")
    done = subprocess.run([sys.executable, str(ROOT / "tests/ptx/ptx_check.py")], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["sm_70", "sm_80", "sm_90", "sm_100", "sm_120"]
    assert all("hc_mi_step" in ln and "registers" in ln for ln in lines)
