"""cuda.probe on a GPU that is busy or closed, not faulty (issue 22, item 7), through the real CLI
on the fake GPUs: a live co-tenant of a gres/shard GPU that fills it, a context refused under
compute mode EXCLUSIVE_PROCESS or PROHIBITED, and an MPS server in the way are never a FAIL and
never "reset the GPU"; a leaked context with nothing live holding the memory still fails.

slurmd's answer to `scontrol listpids` is a stub (the Slurm boundary); the real cluster case is
tests/slurm/test_probe_co_tenants_slurm.py."""

import os
import shutil
import subprocess

import pytest

JOB = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "0"}
TOTAL = 81920  # MiB, an 80 GiB board


def shard_node(node, tmp_path, pid):
    """gpu-a shares its GPUs by shards; slurmd says `pid` is job 77's."""
    node.gres_conf.write_text("AutoDetect=off\nName=gpu File=/dev/nvidia[0-7]\nName=shard Count=16\n")
    stub = tmp_path / "scontrol"
    stub.write_text("#!/bin/sh\n[ \"$1\" = listpids ] || exit 1\n"
                    f"printf 'PID JOBID STEPID LOCALID GLOBALID\\n{pid} 77 batch 0 0\\n'\n")
    stub.chmod(0o755)
    node.write_config(f'scontrol = "{stub}"')


def probe_finding(result):
    found = [f for f in result.json["findings"] if f["check"] == "cuda.probe"]
    return found[0] if found else None


def no_reset(result):
    return all("reset the gpu" not in f["message"].lower() for f in result.json["findings"]
               if f["check"] == "cuda.probe")


def test_cuda_probe_a_live_co_tenant_that_fills_a_shard_gpu_leaves_the_probe_room(node, tmp_path):
    """120 MiB free of 80 GiB, the rest job 77's: the quick probe (256 MiB) sizes itself below
    what is left and passes; before, its allocation failed OUT_OF_MEMORY: drain, reset."""
    pid = os.getpid()
    shard_node(node, tmp_path, pid)
    held = TOTAL - 120
    result = node.run("--prolog", "--json", env=JOB, scenario=(
        f"gpus = 8\ngpu.*.memory.total_mib = {TOTAL}\ngpu.0.processes = {pid}:{held}\n"
        f"gpu.0.memory.used_mib = {held}\n"))
    assert result.rc == 0, result.stdout
    [probe] = [p for p in result.json["probes"] if p["gpu"] == 0]
    assert probe["status"] == "ok", probe
    assert probe_finding(result) is None and not result.checks("fail")
    assert not (node.state_dir / "pending-drain.json").exists()


def test_cuda_probe_out_of_memory_behind_a_live_co_tenant_is_unknown_naming_the_job(node, tmp_path):
    """Job 77 holds every MiB: the probe cannot allocate, and says whose memory it is."""
    pid = os.getpid()
    shard_node(node, tmp_path, pid)
    result = node.run("--prolog", "--json", env=JOB, scenario=(
        f"gpus = 8\ngpu.*.memory.total_mib = {TOTAL}\ngpu.0.processes = {pid}:{TOTAL}\n"
        f"gpu.0.memory.used_mib = {TOTAL}\n"))
    assert result.rc == 0, result.stdout
    f = probe_finding(result)
    assert f["severity"] == "unknown" and f["gpu"] == 0, f
    assert "CUDA_ERROR_OUT_OF_MEMORY" in f["message"] and "live job(s) 77 hold 81920 MiB" in f["message"]
    assert "gres/shard" in f["message"] and "compute mode DEFAULT" in f["message"]
    assert no_reset(result) and f["action"] == "none"


def test_cuda_probe_a_leaked_context_with_nothing_live_holding_the_memory_still_fails(node, tmp_path):
    """The same full GPU with no process at all, on the same shard node: a real fault."""
    shard_node(node, tmp_path, os.getpid())
    result = node.run("--prolog", "--json", env=JOB, scenario=(
        f"gpus = 8\ngpu.*.memory.total_mib = {TOTAL}\ngpu.0.memory.used_mib = {TOTAL}\n"))
    assert result.rc == 1
    f = probe_finding(result)
    assert f["severity"] == "fail" and f["action"] == "reset" and "reset the GPU" in f["message"]
    node_result = node.run("--node", "--json", "--gpus", "0")
    assert node_result.rc == 2 and probe_finding(node_result)["severity"] == "fail"


def test_cuda_probe_exclusive_process_with_another_process_is_unknown_not_reset(node):
    result = node.run("--node", "--json", "--gpus", "0", scenario=(
        f"gpus = 8\ngpu.0.compute_mode = exclusive_process\ngpu.0.processes = {os.getpid()}:1000\n"))
    f = probe_finding(result)
    assert f["severity"] == "unknown", f
    assert "CUDA_ERROR_DEVICE_UNAVAILABLE" in f["message"] and "compute mode EXCLUSIVE_PROCESS" in f["message"]
    assert f"pid {os.getpid()}" in f["message"] and no_reset(result)
    assert result.rc == 3  # could not check, never fail
    assert result.json["gpus"][0]["compute_mode"] == 3


def test_cuda_probe_exclusive_process_co_tenant_in_a_prolog_does_not_drain(node, tmp_path):
    pid = os.getpid()
    shard_node(node, tmp_path, pid)
    result = node.run("--prolog", "--json", env=JOB, scenario=(
        f"gpus = 8\ngpu.0.compute_mode = exclusive_process\ngpu.0.processes = {pid}:1000\n"))
    assert result.rc == 0, result.stdout
    f = probe_finding(result)
    assert f["severity"] == "unknown" and "live job(s) 77" in f["message"] and no_reset(result)


def test_cuda_probe_prohibited_compute_mode_is_info(node):
    result = node.run("--node", "--json", "--gpus", "0",
                      scenario="gpus = 8\ngpu.0.compute_mode = prohibited\n")
    f = probe_finding(result)
    assert f["severity"] == "info" and "compute mode PROHIBITED" in f["message"], f
    assert result.rc == 0 and no_reset(result)


@pytest.fixture
def mps_server(tmp_path):
    """A process whose command is nvidia-cuda-mps-server (what NVML lists for gres/mps)."""
    exe = tmp_path / "nvidia-cuda-mps-server"
    shutil.copy(shutil.which("sleep"), exe)
    proc = subprocess.Popen([str(exe), "600"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_cuda_probe_an_mps_server_holding_an_exclusive_gpu_is_unknown(node, mps_server):
    node.gres_conf.write_text("AutoDetect=off\nName=gpu File=/dev/nvidia[0-7]\nName=mps Count=800\n")
    result = node.run("--prolog", "--json", env=JOB, scenario=(
        f"gpus = 8\ngpu.0.compute_mode = exclusive_process\ngpu.0.processes = {mps_server}:300\n"))
    assert result.rc == 0, result.stdout
    f = probe_finding(result)
    assert f["severity"] == "unknown" and f"the MPS server (pid {mps_server})" in f["message"], f
    assert no_reset(result)


def test_cuda_probe_as_an_mps_client_out_of_memory_is_unknown(node, tmp_path):
    """CUDA_MPS_PIPE_DIRECTORY set: the probe is an MPS client, whose memory the server limits."""
    result = node.run("--node", "--json", "--gpus", "0", scenario="gpus = 8\ngpu.0.cuda.alloc_error = 2\n",
                      env={"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "mps")})
    f = probe_finding(result)
    assert f["severity"] == "unknown" and "MPS client" in f["message"] and no_reset(result), f
    without = node.run("--node", "--json", "--gpus", "0")
    assert probe_finding(without)["severity"] == "fail"
