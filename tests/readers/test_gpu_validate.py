"""tests/gpu/validate (the real-GPU validation script) run against the fake GPUs."""

import json
import os
import subprocess
import sys

from tests.lib.fakenode import ROOT

VALIDATE = ROOT / "tests" / "gpu" / "validate"


def _validate(tmp_path, fakegpu, scenario):
    path = tmp_path / "node.scenario"
    path.write_text(scenario)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "CUDA_VISIBLE", "GPU_HEALTHCHECK"))}
    env.update(LD_LIBRARY_PATH=str(fakegpu), FAKEGPU_SCENARIO=str(path), OUT=str(out))
    done = subprocess.run([sys.executable, str(VALIDATE), "--kernel-log", str(tmp_path / "kern")],
                          env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads((out / "validate.json").read_text())
    return done, doc


def test_validate_passes_on_a_healthy_node(tmp_path, fakegpu):
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 2\ngpu.*.memory.total_mib = 300\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert doc["ok"] and doc["problems"] == []
    assert [m["rc"] for m in doc["modes"]] == [0, 0, 0, 0]
    calls = {f'{c["call"].split(" ")[0]} {c["function"]}' for c in doc["nvml"]["calls"]}
    assert {"gpu0 UUID", "gpu1 TotalEccErrors", "gpu1 ComputeRunningProcesses"} <= calls
    assert "gpu0 MemoryInfo" in done.stdout and "== OK" in done.stdout


def test_validate_fails_on_a_lost_gpu(tmp_path, fakegpu):
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 2\ngpu.*.memory.total_mib = 300\n"
                                             "gpu.1.lost = 1\n")
    assert done.returncode != 0
    assert not doc["ok"]
    assert any("gpu1" in p and "GPU_IS_LOST" in p for p in doc["problems"]), doc["problems"]


def test_validate_accepts_not_supported_but_not_other_errors(tmp_path, fakegpu):
    (tmp_path / "kern").write_text("")
    done, doc = _validate(tmp_path, fakegpu, "gpus = 1\ngpu.*.memory.total_mib = 300\n"
                                             "gpu.0.unsupported = Serial,EccMode\n")
    assert done.returncode == 0, done.stdout + done.stderr
    kinds = {f'{c["call"].split(" ")[0]} {c["function"]}': c["kind"] for c in doc["nvml"]["calls"]}
    assert kinds["gpu0 Serial"] == "not available"
