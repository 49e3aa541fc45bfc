"""tests/gpu/validate (the real-GPU validation script) run against the fake GPUs."""

import json
import os
import subprocess
import sys

from tests.lib.fakenode import ROOT

VALIDATE = ROOT / "tests" / "gpu" / "validate"


def _validate(tmp_path, fakegpu, scenario):
    path = tmp_path / "node.scenario"
    # cuda.pause_on_stall_s: a stall of the loaded host cannot let the fake GPUs idle and empty
    # the deep level's clock trace (tests/fakegpu/README.md)
    path.write_text("cuda.pause_on_stall_s = 0.2\n" + scenario)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "CUDA_VISIBLE", "GPU_HEALTHCHECK"))}
    env.update(LD_LIBRARY_PATH=str(fakegpu), FAKEGPU_SCENARIO=str(path), OUT=str(out))
    # 64 MiB boards and 4 MiB bandwidth buffers: the fake runs the kernels on the host, so the
    # deep level's cost grows with the memory it sweeps; every stage still runs on every GPU
    done = subprocess.run([sys.executable, str(VALIDATE), "--kernel-log", str(tmp_path / "kern"),
                           "--deep-duration", "0.5", "--deep-bandwidth-mib", "4", "--full-fraction", "0.1"],
                          env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads((out / "validate.json").read_text())
    return done, doc


def test_validate_passes_on_a_healthy_node(tmp_path, fakegpu):
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 2\ngpu.*.memory.total_mib = 64\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert doc["ok"] and doc["problems"] == []
    assert [m["rc"] for m in doc["modes"]] == [0, 0, 0, 0]
    calls = {f'{c["call"].split(" ")[0]} {c["function"]}' for c in doc["nvml"]["calls"]}
    assert {"gpu0 UUID", "gpu1 TotalEccErrors", "gpu1 ComputeRunningProcesses"} <= calls
    assert "gpu0 MemoryInfo" in done.stdout and "== OK" in done.stdout


def test_validate_fails_on_a_lost_gpu(tmp_path, fakegpu):
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 2\ngpu.*.memory.total_mib = 64\n"
                                             "gpu.1.lost = 1\n")
    assert done.returncode != 0
    assert not doc["ok"]
    assert any("gpu1" in p and "GPU_IS_LOST" in p for p in doc["problems"]), doc["problems"]


def test_validate_accepts_not_supported_but_not_other_errors(tmp_path, fakegpu):
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 1\ngpu.*.memory.total_mib = 64\n"
                                             "gpu.0.unsupported = Serial,EccMode\n")
    assert done.returncode == 0, done.stdout + done.stderr
    kinds = {f'{c["call"].split(" ")[0]} {c["function"]}': c["kind"] for c in doc["nvml"]["calls"]}
    assert kinds["gpu0 Serial"] == "not available"


def test_validate_runs_every_deep_kernel_and_records_the_scenarios_figures(tmp_path, fakegpu):
    """Part 4 of validate: --level deep on every GPU; its JSON carries each GPU's GB/s, GFLOP/s
    and times, and they are the figures the fake's scenario sets (its timings follow them)."""
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 2\ngpu.*.memory.total_mib = 64\n"
                                             "gpu.1.perf.hbm_gbps = 3100\n"
                                             "gpu.0.perf.h2d_gbps = 45\ngpu.1.perf.d2h_gbps = 48\n"
                                             "gpu.1.perf.gflops = 60000\n"
                                             "gpu.*.nvlink.peer_gbps = 400\n")
    assert done.returncode == 0, done.stdout + done.stderr
    deep = doc["deep"]
    assert deep["mode"]["rc"] == 0 and deep["mode"]["verdict"] == "pass"
    # every kernel the package ships, each under the timed test that ran it
    assert deep["kernels"] == {"hc_addr_write": "memory", "hc_addr_check": "memory",
                               "hc_mi_fill": "memory", "hc_mi_step": "memory",
                               "hc_walk_fill": "memory", "hc_walk": "memory",
                               "hc_rand_write": "memory", "hc_rand_check": "memory",
                               "hc_read": "hbm_read", "hc_copy": "hbm_copy", "hc_fma": "compute",
                               "hc_check": "compute", "hc_mma_bf16": "compute",
                               "hc_mma_f16": "compute"}
    rows = {r["gpu"]: r for r in deep["gpus"]}
    assert sorted(rows) == [0, 1]
    expect = {0: (3000, 3000, 45, 50, 55000), 1: (3100, 3100, 50, 48, 60000)}
    for gpu, (read, copy, h2d, d2h, gflops) in expect.items():
        row = rows[gpu]
        assert row["status"] == "ok" and row["memory_errors"] == 0 and row["memory_bytes"] > 0
        assert [round(row[k]) for k in ("hbm_read_gbps", "hbm_copy_gbps", "h2d_gbps", "d2h_gbps",
                                        "gflops")] == [read, copy, h2d, d2h, gflops], row
        assert set(row["times_s"]) == {"memory", "hbm_read", "hbm_copy", "h2d", "d2h", "compute"}
        assert all(t > 0 for t in row["times_s"].values()), row["times_s"]
        # the sustained load: its seconds, every launch checked, and the clock trace
        assert row["load_s"] >= 0.5 and row["launches"] > 0 and row["wrong_elements"] == 0
        assert row["sm_clock_sustained_mhz"] == row["sm_clock_max_mhz"] == 1980
        assert round(row["tensor_gflops"]) == 600000 and row["memory_passes"] == 1
        assert row["clock_trace"] and all(len(s) == 5 for s in row["clock_trace"])
    # two GPUs: one pair, at the slower side's rate
    assert [(p["src"], p["dst"], round(p["gbps"]), p["via"]) for p in deep["peers"]] == [(0, 1, 400, "nvswitch")]
    assert "deep gpu1: " in done.stdout and "hbm_read_gbps=" in done.stdout
    # the SASS load widths: the fake's libcuda has no linker API, so PyPI's ptxas assembles for
    # the GPU's sm_90 and nvdisasm reads it; the HBM kernels load 128 bits at a time
    sass = doc["sass"]
    assert sass["jit"]["cc"] == "9.0" and sass["source"] == "ptxas"
    if sass["nvdisasm"]:
        assert sass["loads"]["hc_read"] == {"128": 5} and sass["loads"]["hc_copy"] == {"128": 5}
        assert set(sass["loads"]["hc_walk"]) == {"64"}


def test_validate_names_a_deep_test_that_is_not_ok(tmp_path, fakegpu):
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 2\ngpu.*.memory.total_mib = 64\n"
                                             "gpu.1.mem.stuck_bits = 0x1003:5\n")
    assert done.returncode != 0 and not doc["ok"]
    assert any(p.startswith("--node --level deep --json: exit") for p in doc["problems"]), doc["problems"]
    row = next(r for r in doc["deep"]["gpus"] if r["gpu"] == 1)
    assert row["memory_errors"] > 0
