"""The gang check (`gpu-healthcheck --gang`) on a real Slurm test cluster of 5 slurmd: a 4-node
batch job runs `srun --ntasks-per-node=1 gpu-healthcheck --gang` at its top; its nested srun
steps run the fake nccl-tests (tests/fakegpu/fabric.py) on the job's own nodes, and the scenario
(FAKEGPU_FABRIC) makes one node slow.  The SPANK plugin (allow_gang=yes) is the privileged side:
slurmstepd runs `--gang --act` as root when rank 0 of the step exits 2.

Every job is an ordinary user's, as on a real cluster (tests/lib/localuser.py): slurmctld lets
only a job's owner create a step in it, so root's re-measuring steps must run as her
(decide/gang.step_user); with root's own steps both doors ended "could not run; nothing
drained"."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.localuser import LocalUser, as_user, local_user, open_dir

pytestmark = pytest.mark.slurm

NODES = [f"gpu-{c}" for c in "abcde"]
GRES_TYPES = {"gpu-a": "h100", "gpu-b": "h100", "gpu-c": "a100", "gpu-d": "a100", "gpu-e": "a100"}
FABRIC = ('[internode]\nbusbw_floor_gbps = 100.0\ntasks_per_node = 2\ngang_timeout_s = 60\n'
          'gang_bytes = 268435456\n')
SCRIPT = """#!/bin/sh
echo started run=${{SLURM_RESTART_COUNT:-0}} nodes=$SLURM_JOB_NODELIST
srun --ntasks-per-node=1 {gang} --gang || exit 1
echo work done run=${{SLURM_RESTART_COUNT:-0}} nodes=$SLURM_JOB_NODELIST
"""


@pytest.fixture(scope="module")
def gang_cluster(fakegpu, isolation):
    require_slurm()
    # a work folder she can reach (pytest's tmp is 0700 above it): her sbatch and her steps,
    # and root's srun run as her, read slurm.conf, the munge socket and the scenario in there
    with open_dir("hc36-gang-", 0o711) as wd, local_user("hc36") as user:
        yield from _gang_cluster(wd, fakegpu, user)


def _gang_cluster(wd: Path, fakegpu: Path, user: LocalUser):
    # gpu-c (slow) is taken first, gpu-e (the spare) last: the 4-node job gets gpu-c, its
    # requeued run gpu-e in its place
    # gpu-a and gpu-b are H100 nodes, the rest A100 (slurm.conf Gres=gpu:TYPE:8, gres.conf Type=):
    # the per-model floors' case reads them back from slurmctld
    c = GpuCluster(wd, fakegpu, nodes=NODES, scripts=False, max_fraction=0.5,
                   weights={"gpu-a": 5, "gpu-b": 5, "gpu-c": 1, "gpu-d": 5, "gpu-e": 20},
                   plugstack="run=report allow_gang=yes", gres_types=GRES_TYPES)
    fabric = FABRIC + f'nccl_tests = "{fakegpu}"\n'  # root's config names the programs
    for node in NODES:
        path = wd / "config" / f"{node}.toml"
        path.write_text(path.read_text() + fabric)
    (wd / "fabric.scenario").write_text("node.gpu-c.busbw_gbps = 41.2\n")
    # slurmd's own environment: slurmstepd, and so the privileged side's srun steps, have it
    c.cluster.env["FAKEGPU_FABRIC"] = str(wd / "fabric.scenario")
    # the job's user runs gpu-healthcheck with a config of its own (any user may: it only reads)
    (wd / "user-state").mkdir()
    os.chown(wd / "user-state", user.pw_uid, user.pw_gid)
    (wd / "user.toml").write_text(f'scontrol = "{c.scontrol}"\njournal = false\nstate_dir = "{wd / "user-state"}"\n'
                                  + fabric)
    (wd / "user.toml").chmod(0o644)
    c.cluster.env["GPU_HEALTHCHECK_CONFIG"] = str(wd / "user.toml")
    # what the plugin execs as root: the node's config, and the scenario and this cluster's
    # slurm.conf for its srun steps (Slurm 24.11's slurmstepd keeps no environment to pass on)
    env = dict(c.node_env("$SLURMD_NODENAME"), FAKEGPU_FABRIC=str(wd / "fabric.scenario"),
               SLURM_CONF=str(c.cluster.conf_path),
               PATH=f"{wd / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    c.cluster.write_wrapper(c.exec_wrapper, str(wd / "bin" / "gpu-healthcheck"), env)
    c.user = user  # type: ignore[attr-defined]
    with c.cluster:
        yield c


def _sbatch(c: GpuCluster, args: List[str], script: str) -> str:
    """Submit `script` as the test's ordinary user; the job id."""
    path = c.wd / "scripts" / f"job-{len(list((c.wd / 'scripts').glob('job-*')))}.sh"
    path.parent.mkdir(exist_ok=True)
    path.write_text(script if script.startswith("#!") else "#!/bin/sh\n" + script)
    path.chmod(0o755)
    jobs = c.cluster.jobs_dir
    done = as_user(c.user, " ".join(["sbatch", "--parsable", f"--output={jobs}/slurm-%j.out",  # type: ignore[attr-defined]
                                     f"--chdir={jobs}", *args, str(path)]), env=c.cluster.env, cwd="/tmp")
    job = done.stdout.strip().split(";")[0]
    owner = c.cluster.job_info(job).get("UserId", "")
    assert owner == f"{c.user.name}({c.user.pw_uid})", owner  # type: ignore[attr-defined]
    return job


def _output(c: GpuCluster, job: str) -> str:
    return c.cluster.job_output(job)


def _wait_drained(c: GpuCluster, node: str, job: str, timeout: float = 90) -> str:
    """Until `node` carries our fabric reason; else fail with what the job printed and the
    slurmd logs' tails."""
    try:
        return c.wait_reason(node, prefix="gpu-healthcheck: fabric", timeout=timeout)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n--- job {job}: {c.cluster.job_info(job)}\n--- output:\n{_output(c, job)}"
                             f"\n--- logs:\n{c.cluster.log_tails(4000)}") from None


def test_gang_in_a_4_node_job_drains_the_slow_node_and_the_requeued_job_completes_elsewhere(gang_cluster) -> None:
    c = gang_cluster
    job = _sbatch(c, ["-N4", "--requeue", "--open-mode=append"],
                           SCRIPT.format(gang=c.wd / "bin" / "gpu-healthcheck"))
    try:
        reason = _wait_drained(c, "gpu-c", job)
        assert reason.startswith("gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-"), reason
        assert reason.endswith(f" all_reduce_perf gang job={job}")
        info = c.cluster.wait_job(job, states=("COMPLETED",), timeout=90)
        assert "gpu-c" not in info["NodeList"] and int(info["Restarts"]) >= 1, info
        out = _output(c, job)
        # the job's output names the node, its partners and the figure (user side, then root's)
        assert "gpu-healthcheck: gang: gpu-c is bad: busbw=41.2<100 with every partner (gpu-" in out, out
        assert "busbw 41.2 GB/s; drained; requeuing the job" in out, out
        assert "work done run=1" in out and "work done run=0" not in out, out
        assert [n for n in NODES if c.drained(n)] == ["gpu-c"]
        history = (c.state("gpu-a") / "history.jsonl").read_text().splitlines()
        assert any('"mode":"gang"' in line and '"node":"gpu-c"' in line for line in history)
    finally:
        if c.drained("gpu-c"):
            c.cluster.resume("gpu-c")


def test_gang_a_lying_task_cannot_drain_a_healthy_node(gang_cluster) -> None:
    """A user's own 'gpu-healthcheck' prints a fake finding naming gpu-b and exits 2: the
    privileged side measures again, finds every node healthy, and drains nothing."""
    c = gang_cluster
    liar = c.wd / "liar" / "gpu-healthcheck"
    liar.parent.mkdir(exist_ok=True)
    liar.write_text("#!/bin/sh\n[ \"$SLURM_PROCID\" = 0 ] || exit 0\n"
                    "echo 'gpu-healthcheck: gang: gpu-b is bad: busbw=1.0<100 with every partner'\nexit 2\n")
    liar.chmod(0o755)
    (c.wd / "fabric.scenario").write_text("")  # every node healthy
    try:
        job = _sbatch(c, ["-N4", "--requeue"], SCRIPT.format(gang=liar))
        info = c.cluster.wait_job(job, states=("FAILED", "COMPLETED"), timeout=120)
        out = _output(c, job)
        assert info["JobState"] == "FAILED" and info["Restarts"] == "0", (info, out)
        assert "4 nodes passed" in out, out  # root's own measurement, into the job's output
        assert not any(c.drained(n) for n in NODES), [c.reason(n) for n in NODES]
    finally:
        (c.wd / "fabric.scenario").write_text("node.gpu-c.busbw_gbps = 41.2\n")


def test_gang_one_node_does_nothing(gang_cluster) -> None:
    c = gang_cluster
    job = _sbatch(c, ["-N1", "-w", "gpu-c"], SCRIPT.format(gang=c.wd / "bin" / "gpu-healthcheck"))
    c.cluster.wait_job(job, states=("COMPLETED",), timeout=60)
    out = _output(c, job)
    assert f"gpu-healthcheck: gang: job {job} has one node: nothing to check" in out, out
    assert "work done run=0" in out and not c.drained("gpu-c")


def test_gang_spank_option_checks_before_the_script_and_requeues_without_the_slow_node(gang_cluster) -> None:
    c = gang_cluster
    job = _sbatch(c, ["-N4", "--requeue", "--open-mode=append", "--gpu-healthcheck=gang"],
                           "#!/bin/sh\necho work done run=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST\n")
    try:
        assert _wait_drained(c, "gpu-c", job).endswith(f"gang job={job}")
        info = c.cluster.wait_job(job, states=("COMPLETED",), timeout=90)
        assert "gpu-c" not in info["NodeList"], info
        out = _output(c, job)
        assert "work done run=1" in out, out  # the requeued run, without the slow node
        # the batch node the check ran on is not drained for a task it could not kill
        assert [n for n in NODES if c.drained(n)] == ["gpu-c"], [c.reason(n) for n in NODES]
    finally:
        if c.drained("gpu-c"):
            c.cluster.resume("gpu-c")


def test_gang_three_nodes_with_the_slow_one_in_the_only_pair_drain_it(gang_cluster) -> None:
    """A 3-node job of gpu-a, gpu-c (slow) and gpu-d: the pair (gpu-a, gpu-c) fails and gpu-d is
    the odd one out, so no pair passed; each node in doubt then runs with gpu-d, and gpu-c, failing
    with gpu-a and gpu-d, is drained (--no-requeue: the job then ends at `|| exit 1`; the
    requeue is the 4-node case's)."""
    c = gang_cluster
    if c.drained("gpu-c"):  # an earlier case's drain (its requeued job may have drained it again)
        c.cluster.resume("gpu-c")
    c.cluster.wait_node("gpu-c", lambda info: "DRAIN" not in info.get("State", ""), 30)
    job = _sbatch(c, ["-N3", "-x", "gpu-b,gpu-e", "--no-requeue"],
                           SCRIPT.format(gang=c.wd / "bin" / "gpu-healthcheck"))
    try:
        # this job's drain, not an earlier case's
        c.cluster.wait_node("gpu-c", lambda info: f" job={job}" in (info.get("Reason") or ""), 90)
        reason = _wait_drained(c, "gpu-c", job)
        assert reason.startswith("gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-a,gpu-d "), reason
        info = c.cluster.wait_job(job, states=("FAILED", "COMPLETED"), timeout=90)
        out = _output(c, job)
        assert info["JobState"] == "FAILED" and info["NodeList"] == "gpu-a,gpu-c,gpu-d", (info, out)
        assert "gpu-healthcheck: gang: gpu-c is bad: busbw=41.2<100 with every partner (gpu-a,gpu-d)" in out, out
        assert "work done" not in out, out
        assert [n for n in NODES if c.drained(n)] == ["gpu-c"]
    finally:
        if c.drained("gpu-c"):
            c.cluster.resume("gpu-c")


def test_gang_per_model_floors_come_from_the_jobs_nodes_gres(gang_cluster) -> None:
    """The job's user sets [internode] floors: h100 360, a100 30.  gpu-b runs at 300 GB/s: a job of
    the two H100 nodes fails their floor (two nodes: no node named, nothing drained), a job of an
    H100 and an A100 node is held to the A100's floor and passes."""
    c = gang_cluster
    user = c.wd / "user.toml"
    floors = c.wd / "floors.toml"
    floors.write_text(user.read_text() + 'floors = ["h100:busbw_gbps=360", "A100:busbw_gbps=30"]\n')
    floors.chmod(0o644)
    scenario = c.wd / "fabric.scenario"
    scenario.write_text(scenario.read_text() + "node.gpu-b.busbw_gbps = 300\n")
    script = SCRIPT.format(gang=c.wd / "bin" / "gpu-healthcheck").replace(
        "#!/bin/sh\n", f"#!/bin/sh\nexport GPU_HEALTHCHECK_CONFIG={floors}\n", 1)
    try:
        h100s = _sbatch(c, ["-N2", "-w", "gpu-a,gpu-b"], script)
        mixed = _sbatch(c, ["-N2", "-w", "gpu-b,gpu-d"], script)
        info = c.cluster.wait_job(h100s, states=("FAILED", "COMPLETED"), timeout=120)
        out = _output(c, h100s)
        assert info["JobState"] == "FAILED", (info, out)
        assert f"gang: job {h100s}: 2 nodes failed: busbw=300.0<360" in out, out
        assert "suspects: gpu-a,gpu-b; nothing drained" in out, out
        info = c.cluster.wait_job(mixed, states=("FAILED", "COMPLETED"), timeout=120)
        out = _output(c, mixed)
        assert info["JobState"] == "COMPLETED" and f"gang: job {mixed}: 2 nodes passed, busbw 300.0 GB/s" in out, out
        assert not any(c.drained(n) for n in NODES), [c.reason(n) for n in NODES]
    finally:
        scenario.write_text("node.gpu-c.busbw_gbps = 41.2\n")


def test_gang_two_gpu_models_drains_only_the_slow_node_never_the_healthy_a100(gang_cluster) -> None:
    """H100 nodes at 380 GB/s (gpu-a) and A100 nodes at 200 (gpu-c, gpu-d, gpu-e), root's
    floors per model as docs/network.md advises (h100 360, a100 150), and gpu-b, an H100 node,
    slow at 90.  Her 4-node job over both models fails; of its pairs, the A100 pair and the
    mixed pairs at 200 meet the lower model's floor and median, so only gpu-b is drained, never
    a healthy A100 node for a figure an H100 partner could reach and it could not."""
    c = gang_cluster
    configs = {n: c.wd / "config" / f"{n}.toml" for n in NODES}
    kept = {n: path.read_text() for n, path in configs.items()}
    for node, path in configs.items():  # root's config: the privileged side's floors
        path.write_text(kept[node] + 'floors = ["h100:busbw_gbps=360", "a100:busbw_gbps=150"]\n')
    scenario = c.wd / "fabric.scenario"
    scenario.write_text("node.gpu-b.busbw_gbps = 90\n"
                        + "".join(f"node.{n}.busbw_gbps = 200\n" for n in ("gpu-c", "gpu-d", "gpu-e")))
    try:
        for node in NODES:  # an earlier case's drain (its requeued job may have drained again)
            if c.drained(node):
                c.cluster.resume(node)
        job = _sbatch(c, ["-N4", "-w", "gpu-a,gpu-b,gpu-c,gpu-d", "--no-requeue"],
                      SCRIPT.format(gang=c.wd / "bin" / "gpu-healthcheck"))
        c.cluster.wait_node("gpu-b", lambda info: f" job={job}" in (info.get("Reason") or ""), 120)
        reason = _wait_drained(c, "gpu-b", job)
        # held to the lower model's floor (a100 150) with A100 partners, which met it
        assert reason.startswith("gpu-healthcheck: fabric busbw=90.0<150 partners=gpu-"), reason
        assert reason.endswith(f" all_reduce_perf gang job={job}"), reason
        info = c.cluster.wait_job(job, states=("FAILED", "COMPLETED"), timeout=90)
        out = _output(c, job)
        assert info["JobState"] == "FAILED", (info, out)
        assert "gpu-healthcheck: gang: gpu-b is bad: busbw=90.0<150 with every partner (gpu-" in out, out
        assert "work done" not in out, out
        assert [n for n in NODES if c.drained(n)] == ["gpu-b"], [c.reason(n) for n in NODES]
    finally:
        for node, path in configs.items():
            path.write_text(kept[node])
        scenario.write_text("node.gpu-c.busbw_gbps = 41.2\n")
        if c.drained("gpu-b"):
            c.cluster.resume("gpu-b")
