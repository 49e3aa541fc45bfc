"""The incident, closed on a real Slurm cluster: munge, slurmctld and three slurmd on this machine
run our real prolog/ and epilog/ scripts against per-node fake-GPU scenarios, and drain through
the real scontrol.
"""

from __future__ import annotations

import json
import os
import time
from typing import List

import pytest

from tests.lib.gpucluster import HEALTHY, GpuCluster, pci, require_slurm, serial

pytestmark = pytest.mark.slurm

@pytest.fixture
def gpu_cluster(tmp_path, fakegpu):
    require_slurm()
    cluster = GpuCluster(tmp_path, fakegpu)
    with cluster.cluster:
        yield cluster


WAIT_FOR_GO = "echo started gpus=$SLURM_JOB_GPUS host=$SLURMD_NODENAME\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"


def test_ecc_volatile_uncorrected_epilog_drains_the_node_whose_gpu_got_a_dbe_and_the_next_job_runs_on_a_healthy_node(gpu_cluster, tmp_path):
    c = gpu_cluster
    go = tmp_path / "go"
    job1 = c.cluster.sbatch(["--gres=gpu:8", "-J", "train-13b"], WAIT_FOR_GO.format(go=go))
    assert c.wait_running(job1)["NodeList"] == "gpu-a"
    with c.scenario("gpu-a").open("a") as scenario:  # the DBE happens during the job
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\ngpu.2.ecc.aggregate.uncorrected = 1\n")
    go.touch()
    c.cluster.wait_job(job1, timeout=60)
    reason = c.wait_reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: gpu2 pci={pci(2)} sn={serial(2)} "
                             f"ecc.volatile_uncorrected=1 epilog job={job1}")
    assert c.drained("gpu-a")
    # Slurm 22.05 refuses to update a finished job ("Job has already finished"), and the
    # epilog runs after the job finished: the attempt is logged, the reason names the job.

    job2 = c.cluster.sbatch(["--gres=gpu:8", "-J", "train-13b"], "echo next task\n")
    info = c.cluster.wait_job(job2, timeout=60)
    assert info["NodeList"] == "gpu-b"
    sinfo = c.cluster.sinfo_reasons()
    assert f"ecc.volatile_uncorrected=1 epilog job={job1}" in sinfo and "gpu-a" in sinfo
    # the admin's view, from one scontrol call to the real controller
    view = json.loads(c.check("gpu-b", "--cluster", "--json").stdout)
    [row] = [r for r in view if r["node"] == "gpu-a"]
    assert row["ours"] is True and (row["gpu"], row["serial"], row["check"], row["context"], row["job"]) == (
        "2", serial(2), "ecc.volatile_uncorrected", "epilog", job1)


def test_ecc_volatile_uncorrected_prolog_drains_a_node_that_is_already_bad_and_the_job_completes_elsewhere_without_release(gpu_cluster):
    c = gpu_cluster
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.5.ecc.volatile.uncorrected = 4\n")
    job = c.cluster.sbatch(["--gres=gpu:2"], "echo ran on $SLURMD_NODENAME\n")
    info = c.cluster.wait_job(job, timeout=240)  # requeue waits for cred_expire
    assert info["NodeList"] == "gpu-b"
    assert int(info.get("Restarts", "0")) >= 1
    assert "Priority=0" not in json.dumps(info) and info.get("Reason") != "launch_failed_requeued_held"
    reason = c.reason("gpu-a")
    assert reason == f"gpu-healthcheck: gpu5 pci={pci(5)} sn={serial(5)} ecc.volatile_uncorrected=4 prolog job={job}"
    assert c.cluster.job_info(job).get("AdminComment") == reason


def test_two_jobs_share_a_node_and_the_second_prolog_probes_only_its_own_gpus(gpu_cluster, tmp_path):
    c = gpu_cluster
    go = tmp_path / "go"
    job1 = c.cluster.sbatch(["--gres=gpu:4", "-w", "gpu-a"], WAIT_FOR_GO.format(go=go))
    c.wait_running(job1)
    gpus1 = c.cluster.job_info(job1)
    baseline = json.loads((c.state("gpu-a") / "jobs" / f"{job1}.json").read_text())
    assert baseline["job_id"] == job1
    # job 1's GPUs now hold its process and all their memory: touching them would fail
    ids = _job_gpus(c, job1)
    assert len(ids) == 4
    c.scenario("gpu-a").write_text(HEALTHY + "".join(
        f"gpu.{i}.processes = {os.getpid()}:70000\ngpu.{i}.cuda.alloc_error = 2\n" for i in ids))
    job2 = c.cluster.sbatch(["--gres=gpu:4", "-w", "gpu-a"], WAIT_FOR_GO.format(go=go))
    info2 = c.wait_running(job2)
    assert info2["NodeList"] == "gpu-a" and gpus1["NodeList"] == "gpu-a"
    assert c.cluster.job_info(job1)["JobState"] == "RUNNING"
    assert not set(_job_gpus(c, job2)) & set(ids)
    go.touch()
    for job in (job1, job2):
        c.cluster.wait_job(job, timeout=60)
    assert not c.drained("gpu-a"), c.reason("gpu-a")


def _job_gpus(c: GpuCluster, job: str) -> List[int]:
    """The job's GPU indices, from the job's detail (GRES=gpu:4(IDX:0-3))."""
    detail = c.cluster.run(["scontrol", "-d", "show", "job", job]).stdout
    import re
    m = re.search(r"gpu(?::\w+)?:\d+\(IDX:([\d,\-]+)\)", detail)
    assert m, detail
    out: List[int] = []
    for part in m.group(1).split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def test_admin_reason_survives_node_act_and_our_drain_is_resumed_but_never_rma(gpu_cluster):
    c = gpu_cluster
    c.cluster.drain("gpu-b", "admin: replacing a fan")
    result = c.check("gpu-b", "--node", "--act")
    assert result.returncode == 0, result.stderr
    assert c.reason("gpu-b") == "admin: replacing a fan" and c.drained("gpu-b")
    c.scenario("gpu-b").write_text(HEALTHY + "gpu.1.ecc.volatile.uncorrected = 1\n")
    assert c.check("gpu-b", "--node", "--act").returncode == 2
    assert c.reason("gpu-b") == "admin: replacing a fan"

    c.scenario("gpu-a").write_text(HEALTHY + "gpu.3.ecc.volatile.uncorrected = 2\n")
    assert c.check("gpu-a", "--node", "--act").returncode == 2
    assert c.reason("gpu-a").startswith("gpu-healthcheck: gpu3") and c.drained("gpu-a")
    assert c.check("gpu-a", "--node", "--act").returncode == 2  # still bad: stays drained
    assert c.drained("gpu-a")
    c.scenario("gpu-a").write_text(HEALTHY)  # the GPU was reset: counters clean
    assert c.check("gpu-a", "--node", "--act").returncode == 0
    c.cluster.wait_node("gpu-a", lambda info: "DRAIN" not in info.get("State", ""), 30)

    c.scenario("gpu-c").write_text(HEALTHY + "gpu.4.remap.failure = 1\n")
    assert c.check("gpu-c", "--node", "--act").returncode == 2
    assert " rma node" in c.reason("gpu-c")
    c.scenario("gpu-c").write_text(HEALTHY)
    result = c.check("gpu-c", "--node", "--act")
    assert result.returncode == 0 and c.drained("gpu-c")
    assert "remap.failure=1 rma" in c.reason("gpu-c")


def test_pending_drain_when_scontrol_fails_is_applied_by_the_next_run(gpu_cluster, tmp_path):
    c = gpu_cluster
    failing = tmp_path / "scontrol-down"
    failing.write_text("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
    failing.chmod(0o755)
    c.write_config("gpu-a", scontrol=str(failing))
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.6.lost = 1\n")
    job = c.cluster.sbatch(["--gres=gpu:1"], "true\n")
    assert c.wait_reason("gpu-a", prefix="Prolog error", timeout=60) == "Prolog error"
    pending = json.loads((c.state("gpu-a") / "pending-drain.json").read_text())
    assert pending["reason"] == f"gpu-healthcheck: gpu6 gpu.lost=GPU_IS_LOST prolog job={job}"
    assert c.cluster.wait_job(job, timeout=240)["NodeList"] != "gpu-a"

    c.write_config("gpu-a")  # slurmctld reachable again
    c.check("gpu-a", "--node", "--act")
    assert c.reason("gpu-a") == pending["reason"]
    assert not (c.state("gpu-a") / "pending-drain.json").exists()


# The drain budget (one node may be drained, the second is refused and logged) is the fault
# matrix row test_every_node_of_the_test_cluster_fails_the_same_check_drain_budget_holds.


def test_eight_concurrent_node_act_runs_with_a_slow_scontrol_never_leave_more_drained_than_the_budget(tmp_path, fakegpu):
    """Issue 17: each run read the count, then drained, and nothing stopped the others in
    between; with a 300 ms scontrol every node drained."""
    require_slurm()
    names = [f"gpu-{letter}" for letter in "abcdefgh"]
    c = GpuCluster(tmp_path, fakegpu, nodes=names)
    slow = c.slow_scontrol(0.3)
    for node in names:  # a fleet-wide false positive: the same DBE everywhere
        c.write_config(node, max_fraction=0.34, scontrol=slow)  # floor(8 * 0.34) = 2 nodes
        c.scenario(node).write_text(HEALTHY + "gpu.0.ecc.volatile.uncorrected = 1\n")
    with c.cluster:
        runs = {node: c.start_check(node, "--node", "--act", "--json") for node in names}
        done = {node: run.communicate(timeout=300) for node, run in runs.items()}
        drained = [n for n in names if c.drained(n)]
        assert len(drained) == 2, (drained, {n: done[n][1][-600:] for n in names})
        for node in drained:
            assert c.reason(node).startswith("gpu-healthcheck: gpu0 ")
        for node in set(names) - set(drained):
            out, err = done[node]
            assert f"drain of {node} refused" in err
            assert json.loads(out)["action"]["refused"] is True
            assert not c.drained(node)  # (24.11 keeps an undone drain's reason after RESUME)


def test_eight_prologs_at_once_on_one_node_all_pass_and_keep_their_own_state(gpu_cluster, tmp_path):
    c = gpu_cluster
    go = tmp_path / "go"
    jobs = [c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-c"], WAIT_FOR_GO.format(go=go)) for _ in range(8)]
    for job in jobs:
        assert c.wait_running(job)["NodeList"] == "gpu-c"
    baselines = {p.name: json.loads(p.read_text()) for p in (c.state("gpu-c") / "jobs").iterdir()}
    assert sorted(baselines) == sorted(f"{job}.json" for job in jobs)
    assert all(baselines[f"{job}.json"]["job_id"] == job for job in jobs)
    go.touch()
    for job in jobs:
        c.cluster.wait_job(job, timeout=60)
    deadline = time.monotonic() + 30  # epilogs run after the jobs complete
    while list((c.state("gpu-c") / "jobs").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list((c.state("gpu-c") / "jobs").iterdir()) == []
    assert not c.drained("gpu-c")


def test_a_gap_in_gres_conf_the_job_on_nvidia4_gets_index_3_and_its_prolog_probes_gpu_4_not_the_excluded_gpu_3(tmp_path, fakegpu):
    """Issue 17: with GPU 3 taken out of gres.conf (File=nvidia[0-2,4-7]) the job on nvidia4
    gets SLURM_JOB_GPUS=3; the prolog probed the broken GPU 3 and drained the node."""
    require_slurm()
    c = GpuCluster(tmp_path, fakegpu, nodes=["gpu-a"], gres_minors={"gpu-a": [0, 1, 2, 4, 5, 6, 7]})
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.3.cuda.corrupt = 1\n")  # the broken, excluded GPU
    go = tmp_path / "go"
    with c.cluster:
        assert "nvidia[0-2,4-7]" in c.cluster.gres_conf_path.read_text()
        first = c.cluster.sbatch(["--gres=gpu:3", "-w", "gpu-a"], WAIT_FOR_GO.format(go=go))
        c.wait_running(first)
        second = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-a"], "echo gpus=$SLURM_JOB_GPUS\n")
        c.cluster.wait_job(second, timeout=60)
        assert "gpus=3" in c.cluster.job_output(second)
        assert not c.drained("gpu-a"), c.reason("gpu-a")
        # the same index again, now with nvidia4 itself broken: the prolog names GPU 4
        c.scenario("gpu-a").write_text(HEALTHY + "gpu.3.cuda.corrupt = 1\ngpu.4.cuda.corrupt = 1\n")
        third = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-a"], "echo gpus=$SLURM_JOB_GPUS\n")
        reason = c.wait_reason("gpu-a")
        assert reason.startswith(f"gpu-healthcheck: gpu4 pci={pci(4)} sn={serial(4)} ")
        assert f"prolog job={third}" in reason
        go.touch()


def test_nvlink_down_prolog_drains_a_node_with_link_5_of_gpu_3_down_naming_gpu_and_link(gpu_cluster):
    c = gpu_cluster
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.*.nvlink.links = 18\ngpu.3.nvlink.down = 5\n")
    job = c.cluster.sbatch(["--gres=gpu:2"], "echo ran on $SLURMD_NODENAME\n")
    info = c.cluster.wait_job(job, timeout=240)  # requeue waits for cred_expire
    assert info["NodeList"] != "gpu-a"
    assert c.reason("gpu-a") == (f"gpu-healthcheck: gpu3 pci={pci(3)} sn={serial(3)} "
                                 f"nvlink.down=link5 prolog job={job}")
    assert c.drained("gpu-a")
