"""The fake GPUs serve every NVML call the peer tool (gcm `health_checks check-nvidia-smi`,
with pynvml 11.4.1 as gcm pins it) makes for the checks tests/bench times.

gcm 0.0.2's gpu_num, running_procs, ecc_uncorrected_volatile_total, row_remap_pending and
row_remap_failed call nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
nvmlDeviceGetComputeRunningProcesses_v2 (nvmlProcessInfo_v2_t), nvmlDeviceGetTotalEccErrors
and nvmlDeviceGetRemappedRows: all present in tests/fakegpu already, so no symbol was added.
(Its other checks would need nvmlDeviceGetApplicationsClock, nvmlDeviceGetVbiosVersion,
nvmlDeviceGetEnforcedPowerLimit and nvmlDeviceGetUtilizationRates, which the fake lacks.)

Skipped unless the peer venv exists (python3 -m tests.bench creates it: pip install gpucm),
except under .ci/run, which makes it and sets GPU_HEALTHCHECK_REQUIRE_PEER=1: a skip there is a
failure.
"""

import os
import subprocess

import pytest

from tests.bench.peer import peer_argv, peer_command



@pytest.fixture(autouse=True)
def _peer_installed():
    if peer_command().exists():
        return
    reason = "gcm not installed (run python3 -m tests.bench once)"
    if os.environ.get("GPU_HEALTHCHECK_REQUIRE_PEER"):
        pytest.fail(f"required by GPU_HEALTHCHECK_REQUIRE_PEER but {reason}")
    pytest.skip(reason)


def _gcm(tmp_path, fakegpu, scenario, gpus="0,1,2,3,4,5,6,7"):
    (tmp_path / "s").write_text(scenario)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CUDA_VISIBLE"))}
    env.update(LD_LIBRARY_PATH=str(fakegpu), FAKEGPU_SCENARIO=str(tmp_path / "s"),
               SLURM_JOB_ID="1", SLURM_JOB_GPUS=gpus, PYTHONPATH="")
    return subprocess.run(peer_argv(peer_command(), tmp_path / "logs", 8, verbose=True),
                          env=env, capture_output=True, text=True, timeout=120)


def test_gcm_checks_pass_on_healthy_fake_gpus(tmp_path, fakegpu):
    done = _gcm(tmp_path, fakegpu, "gpus = 8\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Number of GPUs present is the same as expected, 8" in done.stdout
    assert "FunctionNotFound" not in done.stdout + done.stderr


def test_gcm_sees_the_fakes_counters_and_processes(tmp_path, fakegpu):
    done = _gcm(tmp_path, fakegpu, f"gpus = 8\ngpu.2.ecc.volatile.uncorrected = 1\n"
                                   f"gpu.3.remap.failure = 1\ngpu.1.processes = {os.getpid()}:1000\n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "GPU 1 is occupied by 1 other processes" in done.stdout
    assert "GPU 3 has failed row remaps" in done.stdout
    assert "GPU 2 has ECC uncorrected: 1" in done.stdout
    assert "FunctionNotFound" not in done.stdout + done.stderr
