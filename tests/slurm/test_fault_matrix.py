"""The fault matrix (docs/failures.md, "Failure behaviour"): one test per row, named after its
row; here the rows that need the real local Slurm cluster (the others: tests/cli/test_fault_matrix.py).

Each runs the real CLI against the fake GPU libraries and the real local Slurm cluster (munge,
slurmctld, three slurmd) with the real scontrol.  Each asserts the documented outcome and that
nothing is lost: every finding, drain and refusal reaches the history file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

import pytest

from tests.lib.fakenode import history, logged
from tests.lib.gpucluster import GpuCluster, HEALTHY, NODES, pci, require_slurm, serial

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("matrix"), fakegpu)
    with c.cluster:
        yield c


@pytest.fixture
def c(cluster):
    """The shared cluster, every node healthy, undrained and with empty state."""
    for node in NODES:
        cluster.scenario(node).write_text(HEALTHY)
        cluster.write_config(node)
        shutil.rmtree(cluster.state(node), ignore_errors=True)
        (cluster.wd / "kern" / f"{node}.log").write_text("")
        if cluster.drained(node):
            cluster.cluster.resume(node)
        if cluster.cluster.node_info(node).get("Comment"):
            cluster.cluster.run(["scontrol", "update", f"NodeName={node}", "Comment="], check=True)
    for node in NODES:
        cluster.cluster.wait_node(node, lambda info: "DRAIN" not in info.get("State", ""), 30)
    return cluster


def prolog(c: GpuCluster, node: str = "gpu-a", env: Optional[Dict[str, str]] = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    return c.check(node, "--prolog", "--json", env={**JOB, "SLURMD_NODENAME": node, **(env or {})},
                   timeout=timeout)


# --- rows --------------------------------------------------------------------------------

@pytest.mark.slurm
@pytest.mark.parametrize("code,name", [(9, "DRIVER_NOT_LOADED"), (18, "LIB_RM_VERSION_MISMATCH")])
def test_nvml_init_fails_driver_not_loaded_or_rm_version_mismatch_fail_drain(c, code, name):
    c.scenario("gpu-a").write_text(f"nvml.init_error = {code}\n")
    result = prolog(c)
    assert result.returncode == 1
    assert c.reason("gpu-a") == f"gpu-healthcheck: nvml.init={name} prolog job=4242"
    assert f"nvml.init={name}" in logged(c.state("gpu-a")) and '"taken": "drain"' in logged(c.state("gpu-a"))


@pytest.mark.slurm
def test_gpu_lost_a_gpu_is_lost_fail_drain(c):
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.1.lost = 1\n")
    assert prolog(c).returncode == 1
    assert c.reason("gpu-a") == "gpu-healthcheck: gpu1 gpu.lost=GPU_IS_LOST prolog job=4242"
    assert "gpu.lost" in logged(c.state("gpu-a"))


@pytest.mark.slurm
def test_gpu_lost_nvml_hangs_on_one_gpu_bounded_by_the_deadline_fail_that_gpu(c):
    path = c.wd / "config" / "gpu-a.toml"
    path.write_text(path.read_text().replace("scontrol_timeout_s = 10\n", "scontrol_timeout_s = 10\nnvml_timeout_s = 2\n"))
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.1.nvml.hang_s = 3600\n")
    result = prolog(c, timeout=60)  # an hour-long hang: returning before this timeout is the proof
    assert result.returncode == 1
    findings = json.loads(result.stdout)["findings"]
    assert [(f["check"], f["gpu"], f["value"]) for f in findings] == [("gpu.lost", 1, "TIMEOUT")]
    assert c.reason("gpu-a").startswith("gpu-healthcheck: gpu1 gpu.lost=TIMEOUT prolog")


@pytest.mark.slurm
@pytest.mark.parametrize("fault,value", [("cuda.hang_s = 3600", "timeout"), ("cuda.crash = 11", "crashed")])
def test_cuda_probe_hangs_or_crashes_bounded_fail_that_gpu(c, fault, value):
    path = c.wd / "config" / "gpu-a.toml"
    path.write_text(path.read_text().replace("timeout_s = 20", "timeout_s = 3"))
    c.scenario("gpu-a").write_text(HEALTHY + f"gpu.0.{fault}\n")
    result = prolog(c, timeout=60)  # an hour-long hang: returning before this timeout is the proof
    assert result.returncode == 1
    findings = json.loads(result.stdout)["findings"]
    assert [(f["check"], f["gpu"], f["value"]) for f in findings] == [("cuda.probe", 0, value)]
    assert c.reason("gpu-a").startswith("gpu-healthcheck: gpu0 pci=")
    assert f"cuda.probe={value}" in c.reason("gpu-a")
    assert "cuda.probe" in logged(c.state("gpu-a"))


@pytest.mark.slurm
def test_nvml_init_libnvidia_ml_absent_on_a_node_with_nvidia_pci_devices_fail(c, tmp_path):
    from tests.lib.fakenode import make_sysfs
    sysfs = make_sysfs(tmp_path / "sys", nvidia=["0000:41:00.0"])
    path = c.wd / "config" / "gpu-a.toml"
    path.write_text(path.read_text().replace(f'sysfs_root = "{c.sysfs}"', f'sysfs_root = "{sysfs}"'))
    result = c.check("gpu-a", "--node", "--act", "--json", env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert result.returncode == 2
    [finding] = json.loads(result.stdout)["findings"]
    assert (finding["check"], finding["severity"], finding["value"]) == ("nvml.init", "fail", "LIBRARY_NOT_FOUND")
    assert c.reason("gpu-a") == "gpu-healthcheck: nvml.init=LIBRARY_NOT_FOUND node"
    assert "LIBRARY_NOT_FOUND" in logged(c.state("gpu-a"))


@pytest.mark.slurm
def test_nvml_init_libnvidia_ml_absent_on_a_node_with_no_nvidia_devices_pass_with_no_gpus(c, tmp_path):
    result = c.check("gpu-a", "--node", "--act", "--json", env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "pass" and "no GPUs" in doc["findings"][0]["message"]
    assert not c.drained("gpu-a")
    assert history(c.state("gpu-a"))[-1]["verdict"] == "pass"


def _stub(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.slurm
@pytest.mark.parametrize("how", ["missing", "non-zero", "hanging", "slurmctld down"])
def test_scontrol_missing_nonzero_hanging_or_slurmctld_down_pending_drain_kept_applied_at_next_run(c, tmp_path, how):
    env: Dict[str, str] = {}
    if how == "missing":
        c.write_config("gpu-a", scontrol=str(tmp_path / "no-such-scontrol"))
    elif how == "non-zero":
        c.write_config("gpu-a", scontrol=_stub(tmp_path / "scontrol", "echo 'error: Invalid user' >&2; exit 1"))
    elif how == "hanging":
        c.write_config("gpu-a", scontrol=_stub(tmp_path / "scontrol", "exec sleep 3600"))
        path = c.wd / "config" / "gpu-a.toml"
        path.write_text(path.read_text().replace("scontrol_timeout_s = 10", "scontrol_timeout_s = 1"))
    else:  # the real scontrol, pointed at a controller port where nothing listens
        conf = tmp_path / "slurm.conf"
        text = c.cluster.conf_path.read_text()
        port = c.cluster.ctld_port
        conf.write_text(text.replace(f"SlurmctldPort={port}", f"SlurmctldPort={_closed_port()}")
                        .replace("MessageTimeout=", "#MessageTimeout=") + "\nMessageTimeout=2\n")
        env["SLURM_CONF"] = str(conf)
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.0.ecc.volatile.uncorrected = 1\n")
    result = prolog(c, env=env, timeout=90)
    assert result.returncode == 1  # the job must not start; Slurm drains with "Prolog error"
    pending = json.loads((c.state("gpu-a") / "pending-drain.json").read_text())
    assert pending["reason"].endswith("ecc.volatile_uncorrected=1 prolog job=4242")
    assert "pending" in logged(c.state("gpu-a")) and "cannot drain gpu-a" in logged(c.state("gpu-a"))
    assert not c.drained("gpu-a")  # (Slurm 24.11 keeps an earlier test's reason after RESUME)

    c.cluster.drain("gpu-a", "Prolog error")  # what slurmctld does with the prolog's exit 1
    c.write_config("gpu-a")  # scontrol and slurmctld work again
    c.check("gpu-a", "--node", "--act")
    assert c.reason("gpu-a") == pending["reason"]
    assert not (c.state("gpu-a") / "pending-drain.json").exists()


def _closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slurm
def test_every_node_of_the_test_cluster_fails_the_same_check_drain_budget_holds(c):
    for node in NODES:
        c.write_config(node, max_fraction=0.34)  # three nodes: one may be drained
        c.scenario(node).write_text(HEALTHY + "gpu.0.recovery_action = 2\n")
    results = {node: c.check(node, "--node", "--act", "--json") for node in NODES}
    assert [n for n in NODES if c.drained(n)] == ["gpu-a"]
    for node in ("gpu-b", "gpu-c"):
        assert results[node].returncode == 2
        assert f"drain of {node} refused" in results[node].stderr
        assert json.loads(results[node].stdout)["action"]["refused"] is True
        assert "refused" in logged(c.state(node))


@pytest.mark.slurm
def test_one_job_on_every_node_gets_a_dbe_and_scontrol_is_slow_drain_budget_holds_under_concurrency(c, tmp_path):
    slow = c.slow_scontrol(0.3)  # a loaded controller: 300 ms per call
    for node in NODES:
        c.write_config(node, max_fraction=0.34, scontrol=slow)  # three nodes: one may be drained
    go = tmp_path / "go"
    job = c.cluster.sbatch(["-N3", "--gres=gpu:8"],
                           f"echo started\nwhile [ ! -e {go} ]; do sleep 0.1; done\n")
    c.wait_running(job)
    for node in NODES:  # the same DBE on every node during the job: three epilogs at once
        c.scenario(node).write_text(HEALTHY + "gpu.0.ecc.volatile.uncorrected = 1\n")
    go.touch()
    c.cluster.wait_job(job, timeout=120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
            any(r["mode"] == "epilog" for r in history(c.state(n))) for n in NODES):
        time.sleep(0.2)
    drained = [n for n in NODES if c.drained(n)]
    assert len(drained) == 1, [(n, c.reason(n)) for n in NODES]
    assert c.reason(drained[0]).startswith("gpu-healthcheck: gpu0 ")
    for node in set(NODES) - set(drained):
        # not drained (Slurm 24.11 keeps the reason of an undone drain after RESUME)
        assert "refused" in logged(c.state(node)) and not c.drained(node)


# --- no drain/resume flap (issue 13) --------------------------------------------------------

def _node_act(c: GpuCluster, *extra: str) -> Dict:
    result = c.check("gpu-a", "--node", "--act", "--json", *extra)
    return json.loads(result.stdout)


@pytest.mark.parametrize("fault,check", [("gpu.4.memory.used_mib = 61440", "memory.leaked"),
                                         ("gpu.4.processes = 999999:1024", "processes.leftover")])
@pytest.mark.slurm
def test_memory_leaked_or_processes_leftover_a_prolog_only_fault_blocks_resume_while_present(c, fault, check):
    """The prolog drains for a fault that `--node` alone calls a warning (or info); the
    HealthCheckProgram must judge it as the prolog did and keep the node drained while it is
    there (before: "Verdict: WARN; resume", and the next job drained it again)."""
    c.scenario("gpu-a").write_text(HEALTHY + fault + "\n")
    assert prolog(c, env={"SLURM_JOB_GPUS": "4"}).returncode == 1
    assert c.reason("gpu-a").startswith(f"gpu-healthcheck: gpu4 pci={pci(4)} sn={serial(4)} {check}=")
    for _ in range(2):  # repeated HealthCheckProgram runs: no flap
        doc = _node_act(c)
        assert doc["verdict"] in ("warn", "pass") and doc["action"]["taken"] == "none"
        assert f"the cause is still there: {check} on GPU 4 would fail the prolog" in doc["action"]["detail"]
        assert c.drained("gpu-a")
    assert "stays drained" in logged(c.state("gpu-a"))
    c.scenario("gpu-a").write_text(HEALTHY)  # the admin reset the GPU / killed the process
    assert _node_act(c)["action"]["taken"] == "resume"
    assert not c.drained("gpu-a")


@pytest.mark.slurm
def test_a_lost_gpu_outside_gpus_keeps_the_node_drained_resume_needs_a_full_check(c):
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.5.lost = 1\n")
    assert _node_act(c)["action"]["taken"] == "drain"
    doc = _node_act(c, "--gpus", "0")
    assert doc["verdict"] == "pass" and doc["action"]["taken"] == "none"
    assert "needs a full check of every GPU" in doc["action"]["detail"]
    assert c.reason("gpu-a").startswith("gpu-healthcheck: gpu5 gpu.lost=GPU_IS_LOST node")
    c.scenario("gpu-a").write_text(HEALTHY)
    assert _node_act(c, "--gpus", "5")["action"]["taken"] == "none"  # still only a part
    assert _node_act(c)["action"]["taken"] == "resume"


@pytest.mark.slurm
def test_a_stale_pending_drain_is_dropped_once_the_admin_resumed_the_node(c, tmp_path):
    """scontrol failed, so the prolog kept its drain pending and exited 1 (Slurm drained the
    node "Prolog error").  The admin fixed the GPU and resumed the node.  The next job's prolog
    must not apply the old drain: it drops it (logged) and its own checks pass."""
    c.write_config("gpu-a", scontrol=str(tmp_path / "no-such-scontrol"))
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.0.ecc.volatile.uncorrected = 1\n")
    job = c.cluster.sbatch(["--gres=gpu:8", "-w", "gpu-a"], "echo ran on $SLURMD_NODENAME\n")
    # the prolog fails, then Slurm runs the epilog, which fails too; Slurm drains the node with
    # its own reason since ours could not be applied
    deadline = time.monotonic() + 60
    while not any(r.get("mode") == "epilog" and r.get("job_id") == job for r in history(c.state("gpu-a"))):
        assert time.monotonic() < deadline, history(c.state("gpu-a"))
        time.sleep(0.1)
    # and slurmctld has the epilog's exit status (the node no longer COMPLETING), so nothing
    # of the first job drains the node after the admin resumes it
    c.cluster.wait_node("gpu-a", lambda info: c._reason_of(info).startswith(("Prolog error", "Epilog error"))
                        and "COMPLETING" not in info.get("State", ""), 30)
    assert json.loads((c.state("gpu-a") / "pending-drain.json").read_text())["job_id"] == job
    c.cluster.run(["scancel", job], check=True)  # requeued: the user gives up on it
    c.scenario("gpu-a").write_text(HEALTHY)  # the admin resets the GPU ...
    c.write_config("gpu-a")  # ... scontrol works again ...
    c.cluster.resume("gpu-a")  # ... and resumes the node
    c.cluster.wait_node("gpu-a", lambda info: "DRAIN" not in info.get("State", ""), 30)
    job2 = c.cluster.sbatch(["--gres=gpu:8", "-w", "gpu-a"], "echo ran on $SLURMD_NODENAME\n")
    info = c.cluster.wait_job(job2, timeout=120)
    assert info["NodeList"] == "gpu-a" and int(info.get("Restarts", "0")) == 0
    assert not c.drained("gpu-a") and not (c.state("gpu-a") / "pending-drain.json").exists()
    assert "pending drain of gpu-a from" in logged(c.state("gpu-a")) and "dropped" in logged(c.state("gpu-a"))


# --- drain budget and report-only rollout (issue 13) ------------------------------------------

def _set_drain(c: GpuCluster, node: str, text: str) -> None:
    path = c.wd / "config" / f"{node}.toml"
    path.write_text(path.read_text().replace("[drain]\n", "[drain]\n" + text + "\n"))


@pytest.mark.slurm
def test_report_only_drains_and_resumes_nothing_and_logs_what_it_would_have_done(c):
    _set_drain(c, "gpu-a", "report_only = true")
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.2.ecc.volatile.uncorrected = 1\n")
    job = c.cluster.sbatch(["--gres=gpu:8", "-w", "gpu-a"], "echo ran on $SLURMD_NODENAME\n")
    info = c.cluster.wait_job(job, timeout=120)
    assert info["NodeList"] == "gpu-a" and int(info.get("Restarts", "0")) == 0  # the job ran
    doc = _node_act(c)
    assert doc["verdict"] == "fail" and doc["action"]["taken"] == "none" and doc["action"]["report_only"] is True
    assert doc["action"]["detail"].startswith("report_only: would drain gpu-a: gpu-healthcheck: gpu2 ")
    assert not c.drained("gpu-a") and c.reason("gpu-a") == ""
    text = logged(c.state("gpu-a"))
    assert f"report_only: would drain (and fail the prolog) gpu-a: gpu-healthcheck: gpu2 pci={pci(2)}" in text
    assert "report_only: would drain (and fail the epilog) gpu-a" in text
    # a node we drained before the rollout switched to report-only is not resumed either
    c.cluster.drain("gpu-a", "gpu-healthcheck: gpu2 ecc.volatile_uncorrected=1 node")
    c.scenario("gpu-a").write_text(HEALTHY)
    assert _node_act(c)["action"]["taken"] == "none" and c.drained("gpu-a")


@pytest.mark.slurm
def test_a_refused_drain_is_visible_in_cluster_and_the_metrics_until_a_full_check_passes(c):
    metrics = c.state("gpu-a").parent / "gpu-a.prom"
    for node in ("gpu-a", "gpu-b"):
        c.write_config(node, max_fraction=0.0)  # one node of the three
    path = c.wd / "config" / "gpu-a.toml"
    path.write_text(f'metrics_file = "{metrics}"\n' + path.read_text())
    c.scenario("gpu-b").write_text(HEALTHY + "gpu.1.lost = 1\n")
    assert c.check("gpu-b", "--node", "--act").returncode == 2 and c.drained("gpu-b")
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.3.ecc.volatile.uncorrected = 2\n")
    doc = _node_act(c)
    assert doc["action"]["refused"] is True and not c.drained("gpu-a")
    assert "1 of 3 GPU nodes already drained" in doc["action"]["detail"]
    view = json.loads(c.check("gpu-c", "--cluster", "--json").stdout)
    [row] = [r for r in view if r["node"] == "gpu-a"]
    assert row["refused"] is True and (row["gpu"], row["check"], row["value"], row["context"]) == (
        "3", "ecc.volatile_uncorrected", "2", "node")
    table = c.check("gpu-c", "--cluster").stdout
    assert "drains refused by drain.max_fraction" in table
    assert "gpu_healthcheck_drain_refusals_total 1" in metrics.read_text()
    c.scenario("gpu-a").write_text(HEALTHY)  # fixed: the note goes with the next full check
    _node_act(c)
    assert not any(r["node"] == "gpu-a" for r in json.loads(c.check("gpu-c", "--cluster", "--json").stdout))


# --- Xids that are dealt with stay dealt with (issue 13) -----------------------------------------

def _xid(stamp: float, xid: int = 48) -> str:
    return f"[{stamp:12.6f}] NVRM: Xid (PCI:0000:18:00): {xid}, pid=4242, name=python, Ch 00000008\n"


@pytest.mark.slurm
def test_xid_an_old_xid_drains_once_the_admins_resume_deals_with_it_and_a_new_xid_drains_again(c):
    """The field's worst false drain (azurehpc#648, DCGM#277, gpud#1072): before, the admin
    reset the GPU and resumed the node, and the next HealthCheckProgram run drained it again
    for the same old line, every run until a reboot."""
    kern = c.wd / "kern" / "gpu-a.log"
    kern.write_text(_xid(1234.5))
    assert _node_act(c)["action"]["taken"] == "drain"
    assert c.reason("gpu-a").startswith(f"gpu-healthcheck: gpu0 pci={pci(0)} sn={serial(0)} xid=48 node")
    c.cluster.resume("gpu-a")  # the admin reset the GPU and resumes the node
    for _ in range(3):
        doc = _node_act(c)
        assert doc["verdict"] == "pass" and doc["action"]["taken"] == "none"
        assert not c.drained("gpu-a")
    assert "was resumed by an admin after our drain" in logged(c.state("gpu-a"))
    with kern.open("a") as log:
        log.write(_xid(5000.0))  # the same GPU fails again
    assert _node_act(c)["action"]["taken"] == "drain"
    assert c.reason("gpu-a").startswith(f"gpu-healthcheck: gpu0 pci={pci(0)} sn={serial(0)} xid=48 node")


# --- shared GPUs: gres/mps and gres/shard (issue 13) ------------------------------------------

@pytest.fixture(scope="module")
def shared(tmp_path_factory, fakegpu):
    """A cluster with GresTypes=gpu,mps,shard: gpu-a shares its GPUs through MPS, gpu-b by shards."""
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("shared"), fakegpu,
                   shared_gres={"gpu-a": "mps:800", "gpu-b": "shard:16"})
    with c.cluster:
        yield c


@pytest.mark.slurm
@pytest.mark.parametrize("node,gres", [("gpu-a", "mps:50"), ("gpu-b", "shard:1")])
def test_processes_leftover_two_jobs_share_a_gpu_through_gres_mps_or_shard_and_both_prologs_pass(shared, tmp_path, node, gres):
    """Both jobs get SLURM_JOB_GPUS=0.  The second prolog sees the first job's process on GPU 0:
    slurmd says it is a live job's (scontrol listpids), so it is a co-tenant, not a leftover
    (before: processes.leftover=1 prolog drained a healthy node, and resume made it flap)."""
    c = shared
    go = tmp_path / "go"
    script = "echo started pid=$$ gpus=$SLURM_JOB_GPUS\nwhile [ ! -e {go} ]; do sleep 0.1; done\n".format(go=go)
    job1 = c.cluster.sbatch([f"--gres={gres}", "-w", node], script)
    c.wait_running(job1)
    out = c.cluster.job_output(job1)
    pid = int(out.split("pid=")[1].split()[0])
    # what NVML shows on a shared GPU: the first job's process holding memory
    c.scenario(node).write_text(HEALTHY + f"gpu.0.processes = {pid}:2048\ngpu.0.memory.used_mib = 2052\n")
    job2 = c.cluster.sbatch([f"--gres={gres}", "-w", node], script)
    c.wait_running(job2)
    assert int(c.cluster.job_info(job2).get("Restarts", "0")) == 0 and not c.drained(node)
    records = [r for r in history(c.state(node)) if r.get("job_id") == job2 and r.get("mode") == "prolog"]
    assert records and records[-1]["verdict"] == "pass"
    direct = c.check(node, "--prolog", "--json", env={"SLURM_JOB_ID": "78", "SLURM_JOB_GPUS": "0",
                                                      "SLURMD_NODENAME": node})
    assert direct.returncode == 0, direct.stdout
    [finding] = [f for f in json.loads(direct.stdout)["findings"] if f["check"] == "processes.leftover"]
    assert finding["severity"] == "info" and f"shared with live job(s) {job1} " in finding["message"]
    go.touch()
    for job in (job1, job2):
        c.cluster.wait_job(job, timeout=60)
    # once the first job is gone, the same process is a leftover again
    c.scenario(node).write_text(HEALTHY + "gpu.0.processes = 999999:2048\ngpu.0.memory.used_mib = 2052\n")
    result = c.check(node, "--prolog", "--json", env={"SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "0",
                                                       "SLURMD_NODENAME": node})
    assert result.returncode == 1 and "in no live job" in result.stdout
    c.scenario(node).write_text(HEALTHY)
    c.cluster.resume(node)


@pytest.mark.slurm
def test_xid_a_gpu_reset_without_init_lines_is_seen_by_its_volatile_counters_starting_over(c):
    """The admin resets the GPU (nvidia-smi -r) and leaves the resume to us: the volatile ECC
    counters start over, so the Xid that came with the DBE is dealt with, and our own drain
    resumes; a new Xid after that drains again."""
    kern = c.wd / "kern" / "gpu-a.log"
    kern.write_text(_xid(1234.5))
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.0.ecc.volatile.uncorrected = 1\n")
    assert _node_act(c)["action"]["taken"] == "drain"
    assert _node_act(c)["action"]["taken"] == "none" and c.drained("gpu-a")  # still there
    c.scenario("gpu-a").write_text(HEALTHY)  # reset: the volatile counters start over
    doc = _node_act(c)
    assert doc["verdict"] == "pass" and doc["action"]["taken"] == "resume", doc["action"]
    assert "were reset since our drain" in logged(c.state("gpu-a"))
    with kern.open("a") as log:
        log.write(_xid(6000.0))
    assert _node_act(c)["action"]["taken"] == "drain"
