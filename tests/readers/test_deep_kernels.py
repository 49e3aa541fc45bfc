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
run = run_deep(ts, [], DeepPlan(bandwidth_mib=2, host_mib=2, duration_s=0.2), 120)
print(json.dumps([[g.index, g.status, g.detail, g.mem_errors, g.mem_pass,
                   [list(r) for r in g.mem_records], g.wrong_elements] for g in run.gpus]))
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
    for index, status, detail, errors, _, _, wrong in run_deep_on(fakegpu, tmp_path, "", 2):
        assert (status, errors, wrong) == ("ok", 0, 0), detail


@pytest.mark.parametrize("addr,bit,value", [(0, 0, 1), (0x43, 3, 1), (0x1FFFFF, 7, 1),
                                            (0x123457, 6, 0), (0x1000000, 1, 0)])
def test_deep_memory_host_build_finds_every_injected_stuck_bit(fakegpu, tmp_path, addr, bit, value):
    ((_, status, detail, errors, where, records, _),) = run_deep_on(
        fakegpu, tmp_path, f"gpu.0.mem.stuck_bits = {addr:#x}:{bit}={value}\n", 1)
    assert status == "ok", detail
    assert errors == 1, (where, records)
    offset, _, expected, actual = records[0]
    assert offset == addr - addr % 8
    assert expected ^ actual == 1 << ((addr % 8) * 8 + bit)


def test_deep_memory_host_build_finds_two_stuck_bits_in_one_pass(fakegpu, tmp_path):
    ((_, _, _, errors, _, records, _),) = run_deep_on(
        fakegpu, tmp_path, "gpu.0.mem.stuck_bits = 0x10:0,0x100008:5\n", 1)
    assert errors == 2
    assert sorted(r[0] for r in records) == [0x10, 0x100008]


@pytest.mark.parametrize("name,target", [("deep_kernels", "sm_70"), ("deep_tensor", "sm_80")])
def test_deep_ptx_regenerates_to_the_committed_file(name, target):
    """make ptx (NVRTC, pinned in setup.cfg) writes exactly the PTX the package ships, with the
    PTX ISA version pinned at 7.0 (the oldest driver the package supports, R450)."""
    pytest.importorskip("nvidia.cuda_nvrtc", reason="nvidia-cuda-nvrtc-cu12 not installed (make venv)")
    done = subprocess.run([sys.executable, str(ROOT / "tests/ptx/make_ptx.py"), "--stdout", name],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    committed = (ROOT / f"healthcheck/read/ptx/{name}.ptx").read_text()
    assert done.stdout == committed, f"run `make ptx` and commit healthcheck/read/ptx/{name}.ptx"
    assert f"\n.version 7.0\n.target {target}\n" in committed


def test_deep_hbm_kernels_issue_128_bit_loads_in_the_committed_ptx():
    """hc_read and hc_copy load 16 bytes at a time (ld.global.v2.u64 / v4.u32), four in flight:
    one 8-byte load at a time caps them near 3 TB/s, below an H200's 4.8 TB/s."""
    from tests.ptx.ptx_check import ptx_load_widths

    widths = ptx_load_widths((ROOT / "healthcheck/read/ptx/deep_kernels.ptx").read_text())
    for kernel in ("hc_read", "hc_copy"):
        assert set(widths[kernel]) == {128}, (kernel, widths[kernel])
        assert widths[kernel][128] >= 4, (kernel, widths[kernel])  # the unrolled loop's four


def test_deep_ptx_check_assembles_for_every_architecture():
    pytest.importorskip("nvidia.cuda_nvcc", reason="nvidia-cuda-nvcc-cu12 not installed (make venv)")
    done = subprocess.run([sys.executable, str(ROOT / "tests/ptx/ptx_check.py")], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    archs = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
    assembled = [ln.split(":")[0] for ln in lines if not ln.startswith("loads ")]
    assert assembled == [f"deep_kernels {a}" for a in archs] + [f"deep_tensor {a}" for a in archs[2:]]
    assert all("registers" in ln for ln in lines if not ln.startswith("loads "))
    assert all("hc_mma_bf16" in ln for ln in lines if ln.startswith("deep_tensor"))
    loads = {ln.split(":")[0][len("loads "):]: ln for ln in lines if ln.startswith("loads ")}
    assert sorted(loads) == sorted(["hc_addr_check", "hc_mi_step", "hc_walk", "hc_rand_check",
                                    "hc_read", "hc_copy"])
    assert "PTX 5x128-bit" in loads["hc_read"] and "FAILED" not in done.stdout
    if "sm_90 " in loads["hc_read"]:  # nvidia-cuda-nvdisasm installed: the SASS says it too
        assert "sm_90 5x128-bit" in loads["hc_read"] and "sm_90 5x128-bit" in loads["hc_copy"]


def test_deep_tensor_kernels_on_the_fake_compute_their_closed_form(fakegpu, tmp_path):
    """The host build of deep_tensor.cu (cuda_shim.h's mma) gives the closed form the child
    checks every launch against, and a GPU of compute capability 7.0 never loads that PTX."""
    for cc, kernels in (("9.0", {"hc_fma", "hc_mma_bf16", "hc_mma_f16"}), ("7.0", {"hc_fma"})):
        log = tmp_path / f"launches-{cc}"
        rows = run_deep_on(fakegpu, tmp_path, f"gpu.0.cuda_cc = {cc}\ncuda.launch_log = {log}\n", 1)
        assert rows[0][1] == "ok", rows
        ran = {line.split()[1].split("=")[1] for line in log.read_text().splitlines()}
        assert ran & {"hc_fma", "hc_mma_bf16", "hc_mma_f16"} == kernels


def _launches(log):
    return [dict(f.split("=", 1) for f in line.split()) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("threads,per_sm", [(2048, 8), (1536, 6)])
def test_deep_launches_are_sized_by_the_drivers_occupancy(fakegpu, tmp_path, threads, per_sm):
    """Blocks per SM come from cuOccupancyMaxActiveBlocksPerMultiprocessor, not a fixed 8: the
    1,536-thread SMs of sm_86, sm_89 and sm_120 hold 6 blocks of 256 threads."""
    log = tmp_path / "launches"
    rows = run_deep_on(fakegpu, tmp_path, f"gpu.0.cuda.max_threads_per_sm = {threads}\n"
                                          f"cuda.launch_log = {log}\n", 1)
    assert rows[0][1] == "ok", rows
    grids = {(r["kernel"], r["grid"]) for r in _launches(log)}
    for kernel in ("hc_read", "hc_copy", "hc_addr_check", "hc_walk", "hc_fma", "hc_mma_bf16"):
        assert (kernel, str(132 * per_sm)) in grids, (kernel, grids)


def test_deep_memtest_passes_runs_every_pattern_that_many_times(fakegpu, tmp_path):
    log = tmp_path / "launches"
    path = tmp_path / "scenario"
    path.write_text(f"gpus = 1\ngpu.*.memory.total_mib = 32\ncuda.launch_log = {log}\n")
    env = {**os.environ, "LD_LIBRARY_PATH": str(fakegpu), "FAKEGPU_SCENARIO": str(path),
           "PYTHONPATH": str(ROOT)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = CHILD.replace("duration_s=0.2)", "duration_s=0.2, memtest_passes=2)").replace(
        "g.wrong_elements]", "g.wrong_elements, g.mem_passes]")
    done = subprocess.run([sys.executable, "-c", child, "1"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    import json

    (row,) = json.loads(done.stdout)
    assert row[1] == "ok" and row[-1] == 2
    kernels = [r["kernel"] for r in _launches(log)]
    for kernel in ("hc_addr_check", "hc_mi_step", "hc_walk_fill", "hc_walk", "hc_rand_write", "hc_rand_check"):
        per_pass = {"hc_addr_check": 2, "hc_mi_step": 3}.get(kernel, 1)
        assert kernels.count(kernel) == 2 * per_pass, (kernel, kernels.count(kernel))


# One FMA launch of half a second of device time, then a host stall: the child does not run for
# 1.5 s (a sleep standing for the stall, not a wait for a condition).  Is the launch done?
STALL_CHILD = """
import ctypes, json, time
from healthcheck.read.cudaprobe import ProbeStatus, _Cuda
from healthcheck.read.deepcuda import THREADS, Device, read_ptx
cuda = _Cuda()
cuda.call(ProbeStatus.INIT_ERROR, "cuInit", ctypes.c_uint(0))
d = Device(cuda, 0, read_ptx())
out, blocks = d.alloc(d.grid("hc_fma") * THREADS * 4), d.grid("hc_fma")
start, end = d.event(), d.event()
def launch(iters):
    d.record(start)
    d.launch("hc_fma", blocks, ctypes.c_uint64(out), ctypes.c_uint(iters))
    d.record(end)
launch(256)
per_iter = d.seconds(start, end) / 256
launch(int(0.5 / per_iter))
time.sleep(1.5)
print(json.dumps(d.ready(end)))
"""


@pytest.mark.parametrize("pause,done", [("", True), ("cuda.pause_on_stall_s = 0.2\n", False)])
def test_a_host_stall_lets_queued_work_end_unless_the_device_clock_pauses_for_it(fakegpu, tmp_path, pause, done):
    """The fake's cuda.pause_on_stall_s, which makes the deep load's trace independent of the
    host's speed: without it, half a second of queued work has ended after a 1.5 s stall of the
    host process; with it, the device clock stood still for the stall and the work is still
    queued.  Either way a slower host only lengthens the stall, so the answer is fixed."""
    path = tmp_path / "scenario"
    path.write_text("gpus = 1\ngpu.*.memory.total_mib = 32\n" + pause)
    env = {**os.environ, "LD_LIBRARY_PATH": str(fakegpu), "FAKEGPU_SCENARIO": str(path),
           "PYTHONPATH": str(ROOT)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = subprocess.run([sys.executable, "-c", STALL_CHILD], env=env, capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == ("true" if done else "false")
