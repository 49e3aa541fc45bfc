"""The network checks on the real test Slurm (munge, slurmctld, three slurmd): gpu-a reads a
made 8-HCA sysfs tree (tests/lib/netfixtures.py) that the test changes between prolog and epilog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.netfixtures import make_ib_tree, set_port

pytestmark = pytest.mark.slurm

WAIT_FOR_GO = "echo started on $SLURMD_NODENAME\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"


@pytest.fixture
def gpu_cluster(tmp_path, fakegpu):
    require_slurm()
    cluster = GpuCluster(tmp_path, fakegpu)
    with cluster.cluster:
        yield cluster


def with_ib_tree(c: GpuCluster, node: str, root: Path, network: str = "") -> Path:
    """Point the node's config at its own sysfs tree with RDMA ports."""
    make_ib_tree(root, hcas=8, ports=1)
    path = c.wd / "config" / f"{node}.toml"
    text = path.read_text().replace(f'sysfs_root = "{c.sysfs}"', f'sysfs_root = "{root}"')
    assert str(root) in text
    path.write_text(text + (f"[network]\n{network}" if network else ""))
    return root


def test_ib_errors_link_downed_grows_by_3_during_the_job_and_its_epilog_drains_naming_the_port(gpu_cluster, tmp_path):
    c = gpu_cluster
    root = with_ib_tree(c, "gpu-a", tmp_path / "ib-gpu-a")
    go = tmp_path / "go"
    job = c.cluster.sbatch(["--gres=gpu:8", "-J", "allreduce"], WAIT_FOR_GO.format(go=go))
    assert c.wait_running(job)["NodeList"] == "gpu-a"
    set_port(root, "mlx5_0:1", link_downed=3)  # the link flapped three times during the job
    go.touch()
    c.cluster.wait_job(job, timeout=60)
    reason = c.wait_reason("gpu-a")
    assert reason == f"gpu-healthcheck: pci=0000:1a:00.0 ib.errors=3@mlx5_0:1 epilog job={job}"
    assert c.drained("gpu-a")
    view = json.loads(c.check("gpu-b", "--cluster", "--json").stdout)
    [row] = [r for r in view if r["node"] == "gpu-a"]
    assert (row["check"], row["context"], row["job"]) == ("ib.errors", "epilog", job)


def test_ib_port_state_a_port_down_at_prolog_time_requeues_the_job_onto_a_healthy_node(gpu_cluster, tmp_path):
    c = gpu_cluster
    root = with_ib_tree(c, "gpu-a", tmp_path / "ib-gpu-a", "expected_ports = 8\n")
    set_port(root, "mlx5_0:1", state="1: DOWN", phys_state="2: Polling")
    job = c.cluster.sbatch(["--gres=gpu:2"], "echo ran on $SLURMD_NODENAME\n")
    info = c.cluster.wait_job(job, timeout=240)  # requeue waits for cred_expire
    assert info["NodeList"] == "gpu-b"
    assert int(info.get("Restarts", "0")) >= 1
    reason = c.reason("gpu-a")
    assert reason.startswith("gpu-healthcheck: pci=0000:1a:00.0 ib.port_state=")
    assert "@mlx5_0:1 prolog job=" + job in reason


def test_ib_a_port_gone_and_a_counter_reset_during_the_job_fail_its_epilog_without_expected_ports(gpu_cluster, tmp_path):
    """No network.expected_ports: mlx5_3 was ACTIVE at the prolog and is gone at the epilog (its
    HCA fell off the bus), and mlx5_0:1's link_downed read 5 at the prolog and 2 at the epilog
    (cleared during the job, then down twice)."""
    import shutil

    c = gpu_cluster
    root = with_ib_tree(c, "gpu-a", tmp_path / "ib-gpu-a")
    set_port(root, "mlx5_0:1", link_downed=5)  # from before the job: not the job's
    go = tmp_path / "go"
    job = c.cluster.sbatch(["--gres=gpu:8", "-J", "allreduce"], WAIT_FOR_GO.format(go=go))
    assert c.wait_running(job)["NodeList"] == "gpu-a"
    shutil.rmtree(root / "class" / "infiniband" / "mlx5_3")
    set_port(root, "mlx5_0:1", link_downed=2)
    go.touch()
    c.cluster.wait_job(job, timeout=60)
    reason = c.wait_reason("gpu-a")
    assert f"epilog job={job}" in reason and ("ib.port_state=absent@mlx5_3:1" in reason
                                              or "ib.errors=2@mlx5_0:1" in reason), reason
    epilog = [json.loads(line) for line in (c.state("gpu-a") / "history.jsonl").read_text().splitlines()
              if json.loads(line).get("mode") == "epilog" and json.loads(line).get("job_id") == job]
    found = {(f["check"], f["severity"], str(f["value"])) for f in epilog[-1]["findings"]}
    assert {("ib.port_state", "fail", "absent"), ("ib.errors", "fail", "2")} <= found, found
