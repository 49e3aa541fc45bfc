"""cuda.probe on the real Slurm cluster (issue 22, item 7): on a gres/shard node, a co-tenant job
that fills GPU 0 does not make the next job's prolog drain the node; that job runs on GPU 0.
Before, the prolog's quick probe failed OUT_OF_MEMORY: "reset the GPU", drained, requeued."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lib.fakenode import logged
from tests.lib.gpucluster import GpuCluster, HEALTHY, require_slurm

SCRIPT = "echo started pid=$$ gpus=$SLURM_JOB_GPUS\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"
TOTAL_MIB = 81559  # the fake's default board


@pytest.fixture(scope="module")
def shard_cluster(tmp_path_factory, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("probe-cotenants"), fakegpu,
                   shared_gres={"gpu-b": "shard:16"})
    with c.cluster:
        yield c


def _started(c: GpuCluster, go: Path, node: str):
    job = c.cluster.sbatch(["--gres=shard:1", "-w", node], SCRIPT.format(go=go))
    c.wait_running(job)
    out = c.cluster.job_output(job)
    return job, int(out.split("pid=")[1].split()[0]), out.split("gpus=")[1].split()[0] if "gpus=" in out else ""


@pytest.mark.slurm
def test_cuda_probe_a_co_tenant_filling_gpu_0_of_a_shard_node_does_not_drain_it(shard_cluster, tmp_path):
    c = shard_cluster
    go = tmp_path / "go"
    jobs = []
    try:
        tenant, pid, gpus = _started(c, go, "gpu-b")
        jobs.append(tenant)
        assert gpus == "0"
        # the co-tenant's process holds every MiB of GPU 0
        c.scenario("gpu-b").write_text(HEALTHY + f"gpu.0.processes = {pid}:{TOTAL_MIB}\n"
                                                 f"gpu.0.memory.used_mib = {TOTAL_MIB}\n")
        second, _, gpus2 = _started(c, go, "gpu-b")
        jobs.append(second)
        assert gpus2 == "0"  # the same GPU, shared
        assert not c.drained("gpu-b"), c.reason("gpu-b")
        assert c.cluster.job_info(tenant)["JobState"] == "RUNNING"
        text = logged(c.state("gpu-b"))
        assert f"live job(s) {tenant} hold {TOTAL_MIB} MiB" in text, text[-2000:]
        assert "reset the GPU" not in text
    finally:
        go.touch()
        for job in jobs:
            c.cluster.wait_job(job, timeout=60)
        c.scenario("gpu-b").write_text(HEALTHY)
    assert not c.drained("gpu-b"), c.reason("gpu-b")
