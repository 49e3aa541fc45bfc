"""processes.leftover on the real Slurm cluster: a process is a co-tenant of a shared GPU only
on a node with gres/mps or gres/shard, in a job slurmd still runs, on a GPU that job was given
(issue 22, item 4).  Before: any job cgroup id or any `scontrol listpids` job exempted it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.lib.gpucluster import GpuCluster, HEALTHY, require_slurm

SCRIPT = "echo started pid=$$ gpus=$SLURM_JOB_GPUS\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"


@pytest.fixture(scope="module")
def cotenants(tmp_path_factory, fakegpu):
    """gpu-a shares its GPUs through MPS, gpu-b by shards, gpu-c not at all."""
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("cotenants"), fakegpu,
                   shared_gres={"gpu-a": "mps:800", "gpu-b": "shard:16"})
    with c.cluster:
        yield c


def _job(c: GpuCluster, go: Path, gres: str, node: str):
    job = c.cluster.sbatch([f"--gres={gres}", "-w", node], SCRIPT.format(go=go))
    c.wait_running(job)
    out = c.cluster.job_output(job)
    return job, int(out.split("pid=")[1].split()[0]), out.split("gpus=")[1].split()[0] if "gpus=" in out else ""


def _prolog(c: GpuCluster, node: str, gpus: str):
    result = c.check(node, "--prolog", "--json", env={"SLURM_JOB_ID": "78", "SLURM_JOB_GPUS": gpus,
                                                      "SLURMD_NODENAME": node})
    [finding] = [f for f in json.loads(result.stdout)["findings"] if f["check"] == "processes.leftover"]
    return result.returncode, finding


def _on_gpu(c: GpuCluster, node: str, gpu: int, pid: int) -> None:
    c.scenario(node).write_text(HEALTHY + f"gpu.{gpu}.processes = {pid}:61440\n"
                                          f"gpu.{gpu}.memory.used_mib = 61444\n")


@pytest.mark.slurm
def test_processes_leftover_a_shard_job_on_a_gpu_it_was_not_given_is_a_leftover(cotenants, tmp_path):
    c = cotenants
    go = tmp_path / "go"
    job, pid, gpus = _job(c, go, "shard:1", "gpu-b")
    try:
        assert gpus == "0"
        _on_gpu(c, "gpu-b", 0, pid)  # on its own GPU: a co-tenant
        rc, f = _prolog(c, "gpu-b", "0")
        assert rc == 0 and f["severity"] == "info" and f"shared with live job(s) {job} " in f["message"]
        _on_gpu(c, "gpu-b", 3, pid)  # on a GPU slurmctld never gave it
        rc, f = _prolog(c, "gpu-b", "3")
        assert rc == 1 and f["severity"] == "fail", f
        assert f"job {job} was given GPU(s) 0, not this one" in f["message"]
    finally:
        go.touch()
        c.cluster.wait_job(job, timeout=60)
        c.scenario("gpu-b").write_text(HEALTHY)


@pytest.mark.slurm
def test_processes_leftover_a_process_in_a_stale_job_cgroup_is_a_leftover(cotenants, tmp_path):
    """The cgroup says job_4242, which slurmd on gpu-b does not run (listpids)."""
    c = cotenants
    proc = tmp_path / "proc"
    (proc / str(os.getpid())).mkdir(parents=True)
    (proc / str(os.getpid()) / "cgroup").write_text(
        "0::/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0\n")
    (proc / "uptime").write_text(Path("/proc/uptime").read_text())
    config = c.wd / "config" / "gpu-b.toml"
    text = config.read_text()
    config.write_text(f'proc_root = "{proc}"\n' + text)
    try:
        _on_gpu(c, "gpu-b", 0, os.getpid())
        rc, f = _prolog(c, "gpu-b", "0")
        assert rc == 1 and f["severity"] == "fail", f
        assert "job 4242 no longer runs here" in f["message"] and "stale job cgroup" in f["message"]
    finally:
        config.write_text(text)
        c.scenario("gpu-b").write_text(HEALTHY)


@pytest.mark.slurm
def test_processes_leftover_a_live_job_on_a_node_that_shares_no_gpu_is_a_leftover(cotenants, tmp_path):
    """gpu-c has gres/gpu only: the job's GPU is its alone, so its process on another GPU, which
    another job's prolog is about to give out, is a leftover whatever slurmd says of the job."""
    c = cotenants
    go = tmp_path / "go"
    job, pid, gpus = _job(c, go, "gpu:1", "gpu-c")
    try:
        other = 1 if gpus == "0" else 0
        _on_gpu(c, "gpu-c", other, pid)
        rc, f = _prolog(c, "gpu-c", str(other))
        assert rc == 1 and f["severity"] == "fail", f
        # slurmd is not even asked there: no job of gpu-c shares a GPU
        assert "in no live job" in f["message"] and f"job {job}" not in f["message"]
    finally:
        go.touch()
        c.cluster.wait_job(job, timeout=60)
        c.scenario("gpu-c").write_text(HEALTHY)
