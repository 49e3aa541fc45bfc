"""Tests of the real local Slurm harness (tests/lib/slurmcluster.py).

The @pytest.mark.slurm tests start real clusters (munged, slurmctld, 3 slurmd)
and are skipped, with the reason, only where Slurm/munge are not installed or
we are not root.  CI installs them: apt-get install -y slurmctld slurmd
slurm-client munge.

Timings measured here are printed (run with -s to see them) and attached as
junit properties: cluster start, requeue delay after a prolog failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lib.slurmcluster import JobError, SlurmCluster, TAG_VAR, slurm_missing_reason

NODES = ["gpu-a", "gpu-b", "gpu-c"]
_MISSING = slurm_missing_reason()
needs_slurm = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

# Records every call, using absolute paths only: slurmd runs it without PATH.
# Control files in the record dir (per node, per context):
#   fail-<context>-<node>   exit 1
#   drain-<context>-<node>  scontrol drain with our reason, then exit 1
#   hang-<context>-<node>   wait as long as the file exists
RECORDER = r"""#!/bin/sh
D=@DIR@
ctx=${SLURM_SCRIPT_CONTEXT:-unknown}
echo "${SLURMD_NODENAME:--} ${SLURM_JOB_ID:--} ${SLURM_JOB_GPUS:--} ${CUDA_VISIBLE_DEVICES:--}" >> "$D/$ctx.log"
/usr/bin/env > "$D/env.$ctx.$SLURM_JOB_ID.$SLURMD_NODENAME"
while [ -e "$D/hang-$ctx-$SLURMD_NODENAME" ]; do /bin/sleep 0.1; done
if [ -e "$D/drain-$ctx-$SLURMD_NODENAME" ]; then
    /usr/bin/scontrol update NodeName="$SLURMD_NODENAME" State=DRAIN \
        Reason="gpu-healthcheck: test" >> "$D/scontrol.log" 2>&1
    echo "scontrol rc=$?" >> "$D/scontrol.log"
    exit 1
fi
if [ -e "$D/fail-$ctx-$SLURMD_NODENAME" ]; then
    exit 1
fi
exit 0
"""

# A job that runs until the release file exists.
HOLD_JOB = """echo "$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_JOB_GPUS" > {rec}/job.$SLURM_JOB_ID
while [ ! -e {release} ]; do sleep 0.1; done
"""


class Env:
    """What a test gets: the record dir and helpers to build clusters."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.rec = tmp_path / "rec"
        self.rec.mkdir()
        self.recorder = tmp_path / "recorder.sh"
        self.recorder.write_text(RECORDER.replace("@DIR@", str(self.rec)))
        self.recorder.chmod(0o755)
        self.clusters = []

    def cluster(self, name="c", wrap=True, wrapper_env=None, **kw) -> SlurmCluster:
        """A started cluster whose Prolog and Epilog are the recorder, behind a
        write_wrapper() wrapper (wrap=True) or called directly (wrap=False)."""
        c = SlurmCluster(self.tmp / name, nodes=kw.pop("nodes", NODES), **kw)
        if wrap:
            prog = c.write_wrapper(self.tmp / ("%s-wrapper.sh" % name), str(self.recorder),
                                   wrapper_env or {})
        else:
            prog = self.recorder
        c.prolog = c.epilog = str(prog)
        self.clusters.append(c)
        c.start()
        print("\n[timing] cluster %s (%d nodes) started in %.2fs"
              % (name, len(c.nodes), c.start_seconds))
        return c

    def records(self, ctx="prolog_slurmd"):
        """[(node, job, gpus, cvd)] from the recorder log."""
        p = self.rec / ("%s.log" % ctx)
        if not p.exists():
            return []
        return [tuple(line.split()) for line in p.read_text().splitlines() if line.strip()]

    def env_of(self, ctx, job, node):
        p = self.rec / ("env.%s.%s.%s" % (ctx, job, node))
        out = {}
        for line in p.read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
        return out


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    for c in e.clusters:
        c.stop()
        assert c.leftover_processes() == {}


def _gpu_set(s):
    """'0,1' / '0-3' / '4-7,9' -> {ints}."""
    out = set()
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out |= set(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.1)


# ------------------------------------------------------------- real Slurm tests

@pytest.mark.slurm
@needs_slurm
def test_cluster_up_job_completes(env, record_property):
    c = env.cluster(wrapper_env={"REC_TAG": "tag-$SLURMD_NODENAME",
                                 "REC_LITERAL": 'x "y" $$z'})
    record_property("cluster_start_s", round(c.start_seconds, 2))
    assert c.node_states() == {n: "idle" for n in NODES}
    info = c.node_info("gpu-b")
    assert info["NodeName"] == "gpu-b" and info["State"] == "IDLE"
    assert info["Gres"] == "gpu:8" and info["CPUTot"] == "16"
    t0 = time.monotonic()
    job = c.sbatch(["-J", "hello world"], "echo hello from $SLURMD_NODENAME\n")
    done = c.wait_job(job, timeout=60)
    print("[timing] submit->COMPLETED %.2fs" % (time.monotonic() - t0))
    assert done["JobName"] == "hello world"
    assert done["ExitCode"] == "0:0"
    node = done["NodeList"]
    assert node in NODES
    assert c.job_output(job).strip() == "hello from %s" % node
    # the wrapper's variables reached the prolog, expanded per node
    penv = c_env = env.env_of("prolog_slurmd", job, node)
    assert penv["REC_TAG"] == "tag-" + node
    assert penv["REC_LITERAL"] == 'x "y" $z'
    assert penv["SLURM_CONF"] == str(c.conf_path)
    # and the epilog ran too
    _wait(lambda: any(r[1] == job for r in env.records("epilog_slurmd")), 30, "epilog")
    eenv = env.env_of("epilog_slurmd", job, node)
    assert eenv["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
    assert c_env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"
    assert "hc-test" in c.run(["scontrol", "show", "config"]).stdout
    assert c.sinfo_reasons().split("\n")[0].split()[0] == "REASON"
    logs = c.logs()
    assert "slurmctld" in logs and "slurmd-gpu-a" in logs and logs["slurmctld"]


@pytest.mark.slurm
@needs_slurm
def test_prolog_has_no_path_and_sees_gpus(env):
    c = env.cluster(wrap=False)
    job = c.sbatch(["--gres=gpu:2"], "echo $SLURM_JOB_GPUS\n")
    info = c.wait_job(job, timeout=60)
    node = info["NodeList"]
    penv = env.env_of("prolog_slurmd", job, node)
    assert "PATH" not in penv, penv
    # slurmd does put its own config path in (22.05: SLURM_CONF), so scontrol in a
    # prolog reaches the right cluster even without a wrapper
    assert penv["SLURM_CONF"] == str(c.conf_path)
    print("[info] prolog environment keys: %s" % " ".join(sorted(penv)))
    assert TAG_VAR not in penv  # fresh environment: nothing of slurmd's leaks in
    assert penv["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"
    assert penv["SLURMD_NODENAME"] == node
    assert penv["SLURM_JOB_ID"] == job
    gpus = _gpu_set(penv["SLURM_JOB_GPUS"])
    assert len(gpus) == 2 and gpus <= set(range(8)), penv["SLURM_JOB_GPUS"]
    assert _gpu_set(penv["CUDA_VISIBLE_DEVICES"]) == gpus
    rec = [r for r in env.records() if r[1] == job]
    assert rec and rec[0][0] == node and _gpu_set(rec[0][2]) == gpus
    # the job itself sees the same indices
    assert _gpu_set(c.job_output(job).strip()) == gpus


@pytest.mark.slurm
@needs_slurm
def test_prolog_failure_drains_and_requeues_without_hold(env, record_property):
    c = env.cluster(node_weights={"gpu-a": 1, "gpu-b": 10, "gpu-c": 20})
    (env.rec / "fail-prolog_slurmd-gpu-a").touch()
    t0 = time.monotonic()
    job = c.sbatch(["--gres=gpu:1"], "echo ran on $SLURMD_NODENAME\n")
    # first attempt lands on gpu-a (lowest weight), its prolog fails
    c.wait_node("gpu-a", lambda n: "DRAIN" in n["State"], timeout=60)
    t_drain = time.monotonic() - t0
    pending = c.wait_job(job, states={"PENDING"}, timeout=30)
    print("[info] after the prolog failure: JobState=%s Reason=%s Restarts=%s EligibleTime=%s "
          "SubmitTime=%s" % (pending["JobState"], pending["Reason"], pending["Restarts"],
                            pending.get("EligibleTime"), pending["SubmitTime"]))
    assert "held" not in pending["Reason"].lower() and pending["Priority"] != "0"
    info = c.wait_job(job, timeout=240)  # raises at once if the job is held
    t_done = time.monotonic() - t0
    print("[timing] prolog failure: drained after %.2fs, requeued job COMPLETED after %.2fs"
          % (t_drain, t_done))
    record_property("prolog_fail_drain_s", round(t_drain, 2))
    record_property("requeue_complete_s", round(t_done, 2))
    assert info["NodeList"] == "gpu-b", info
    assert int(info["Restarts"]) >= 1
    assert c.job_output(job).strip() == "ran on gpu-b"
    nodes_tried = [r[0] for r in env.records() if r[1] == job]
    assert nodes_tried[0] == "gpu-a" and nodes_tried[-1] == "gpu-b", nodes_tried
    assert c.node_reason("gpu-a") == "Prolog error"
    assert "Prolog error" in c.sinfo_reasons()
    n = c.node_info("gpu-a")
    assert "DRAIN" in n["State"] and n["Reason"].startswith("Prolog error [")
    c.resume("gpu-a")
    c.wait_node("gpu-a", lambda n: n["State"] == "IDLE", timeout=30)


@pytest.mark.slurm
@needs_slurm
def test_own_drain_reason_survives_prolog_failure(env):
    c = env.cluster(node_weights={"gpu-a": 1, "gpu-b": 10, "gpu-c": 20})
    (env.rec / "drain-prolog_slurmd-gpu-a").touch()
    job = c.sbatch([], "true\n")
    info = c.wait_job(job, timeout=240)
    assert info["NodeList"] != "gpu-a"
    assert "scontrol rc=0" in (env.rec / "scontrol.log").read_text()
    n = c.wait_node("gpu-a", lambda n: "DRAIN" in n["State"], timeout=30)
    assert c.node_reason("gpu-a") == "gpu-healthcheck: test", n
    reasons = c.sinfo_reasons()
    line = [l for l in reasons.splitlines() if l.rstrip().endswith("gpu-a")]
    assert line and line[0].startswith("gpu-healthcheck: test "), reasons
    assert "Prolog error" not in reasons


@pytest.mark.slurm
@needs_slurm
def test_two_half_node_jobs_share_a_node(env):
    c = env.cluster()
    release = env.tmp / "release"
    script = HOLD_JOB.format(rec=env.rec, release=release)
    jobs = [c.sbatch(["--gres=gpu:4", "-w", "gpu-a"], script) for _ in range(2)]
    infos = [c.wait_job(j, states={"RUNNING"}, timeout=60) for j in jobs]
    # both RUNNING at the same time, on the same node
    assert all(c.job_info(j)["JobState"] == "RUNNING" for j in jobs)
    assert [i["NodeList"] for i in infos] == ["gpu-a", "gpu-a"]
    sets = []
    for j in jobs:
        _wait(lambda: (env.rec / ("job." + j)).exists(), 30, "job %s output" % j)
        node, _, gpus = (env.rec / ("job." + j)).read_text().split()
        prolog_gpus = [r[2] for r in env.records() if r[1] == j][0]
        assert node == "gpu-a" and _gpu_set(gpus) == _gpu_set(prolog_gpus)
        sets.append(_gpu_set(gpus))
    assert len(sets[0]) == len(sets[1]) == 4
    assert not sets[0] & sets[1] and sets[0] | sets[1] == set(range(8))
    release.touch()
    for j in jobs:
        c.wait_job(j, timeout=60)


@pytest.mark.slurm
@needs_slurm
def test_eight_single_gpu_jobs_at_once(env):
    c = env.cluster()
    release = env.tmp / "release"
    script = HOLD_JOB.format(rec=env.rec, release=release)
    jobs = [c.sbatch(["--gres=gpu:1", "-w", "gpu-b"], script) for _ in range(8)]

    def all_running():
        r = c.run(["squeue", "-h", "-o", "%i %T %N"])
        rows = [l.split() for l in r.stdout.splitlines()]
        return len(rows) == 8 and all(x[1] == "RUNNING" and x[2] == "gpu-b" for x in rows)
    _wait(all_running, 60, "8 jobs RUNNING at once on gpu-b")
    _wait(lambda: all((env.rec / ("job." + j)).exists() for j in jobs), 30, "8 job scripts")
    gpus = [_gpu_set([r[2] for r in env.records() if r[1] == j][0]) for j in jobs]
    assert sorted(min(g) for g in gpus) == list(range(8))
    assert c.node_info("gpu-b")["State"] in ("ALLOCATED", "MIXED")
    release.touch()
    for j in jobs:
        c.wait_job(j, timeout=60)


@pytest.mark.slurm
@needs_slurm
def test_teardown_leaves_nothing(env):
    c = env.cluster(name="t1")
    release = env.tmp / "never"
    job = c.sbatch([], HOLD_JOB.format(rec=env.rec, release=release))
    c.wait_job(job, states={"RUNNING"}, timeout=60)
    _wait(lambda: (env.rec / ("job." + job)).exists(), 30, "job start")
    procs = c.our_processes()
    names = " ".join(procs.values())
    for daemon in ("munged", "slurmctld", "slurmd", "slurmstepd"):
        assert daemon in names, procs
    t0 = time.monotonic()
    c.stop()
    print("[timing] stop with a running job: %.2fs" % (time.monotonic() - t0))
    assert c.leftover_processes() == {}
    for pid in procs:
        assert not _alive(pid), (pid, procs[pid])
    wd = str(c.workdir)
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = Path("/proc/%s/cmdline" % p).read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            assert wd not in cmd or int(p) == os.getpid(), cmd
    # a second cluster in the same session starts on fresh ports and dirs; stop it
    # while its prolog hangs (the prolog runs in its own process group)
    c2 = env.cluster(name="t2", prolog_epilog_timeout=300)
    assert c2.ctld_port != c.ctld_port and c2.cluster_id != c.cluster_id
    for n in NODES:
        (env.rec / ("hang-prolog_slurmd-" + n)).touch()
    before = len(env.records())  # job ids restart at 1 in the new cluster
    job = c2.sbatch([], "true\n")
    _wait(lambda: len(env.records()) > before, 30, "prolog of job %s" % job)
    hanging = c2.our_processes()
    assert any("recorder.sh" in cmd for cmd in hanging.values()), hanging
    t0 = time.monotonic()
    c2.stop()
    print("[timing] stop with a hanging prolog: %.2fs" % (time.monotonic() - t0))
    assert c2.leftover_processes() == {}
    for pid in hanging:
        assert not _alive(pid), (pid, hanging[pid])


def _alive(pid):
    try:
        stat = Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.mark.slurm
@needs_slurm
def test_start_failure_reports_logs(tmp_path):
    # without config_overrides a node declared bigger than this machine registers
    # INVAL: start must fail at once with the reason and the daemon logs, and
    # leave nothing behind
    c = SlurmCluster(tmp_path / "bad", nodes=["gpu-a"], start_timeout=20,
                     cpus_per_node=4096, real_memory=1 << 30,
                     extra_conf=["SlurmdParameters=shutdown_on_reboot"])
    with pytest.raises(Exception) as ei:
        c.start()
    msg = str(ei.value)
    assert "INVAL" in msg and "Low CPUs" in msg
    assert "----- slurmctld" in msg and "----- slurmd-gpu-a" in msg  # log tails
    assert c.leftover_processes() == {}


@pytest.mark.slurm
@needs_slurm
def test_without_nohold_the_job_is_held(env):
    # control experiment: Slurm's default holds a job whose prolog failed, and
    # wait_job reports that at once instead of waiting for its deadline
    c = env.cluster(node_weights={"gpu-a": 1, "gpu-b": 10, "gpu-c": 20},
                    extra_conf=["SchedulerParameters=batch_sched_delay=0,sched_interval=2"])
    (env.rec / "fail-prolog_slurmd-gpu-a").touch()
    job = c.sbatch([], "true\n")
    with pytest.raises(JobError) as ei:
        c.wait_job(job, timeout=60)
    info = ei.value.info
    print("[info] default (hold) after prolog failure: JobState=%s Reason=%s Priority=%s"
          % (info.get("JobState"), info.get("Reason"), info.get("Priority")))
    assert info["JobState"] == "PENDING"
    assert "held" in info["Reason"].lower() or info["Priority"] == "0"
    assert c.node_reason("gpu-a") == "Prolog error"


@pytest.mark.slurm
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, for a mount namespace of its own")
def test_another_roots_slurmstepd_under_the_same_path_is_not_ours(tmp_path):
    """The Slurm matrix runs each version in a mount namespace with a fresh /tmp, so two
    versions running the same test at once share tmp_path; one's teardown once SIGKILLed the
    other's job (26.05: RaisedSignal:9).  A slurmstepd whose cwd shows our workdir's path on
    another filesystem is not ours; one in the workdir itself is."""
    c = SlurmCluster(tmp_path / "cluster")
    spool = c.workdir / "spool"
    spool.mkdir(parents=True)
    theirs = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "--", "bash", "-c",
         f'mount -t tmpfs tmpfs "{c.workdir}" && mkdir "{spool}" && cd "{spool}" && '
         'exec -a slurmstepd sleep 600'],
        start_new_session=True)
    ours = subprocess.Popen(["bash", "-c", "exec -a slurmstepd sleep 600"], cwd=str(spool),
                            start_new_session=True)
    try:
        # both in their places: the path shows the same, the other one's tmpfs mounted
        _wait(lambda: all(Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"slurmstepd")
                          and os.readlink(f"/proc/{p.pid}/cwd") == str(spool) for p in (theirs, ours)),
              30, "both slurmstepds in place")
        found = c.our_processes()
        assert ours.pid in found and theirs.pid not in found, found
    finally:
        for p in (theirs, ours):
            p.kill()
            p.wait(timeout=10)


@pytest.mark.slurm
@needs_slurm
def test_the_harness_bench_runs_and_prints_a_row_per_size():
    """tests/bench/slurmstart.py still runs (it prints what bringing a cluster up and down costs;
    nothing here looks at a figure)."""
    done = subprocess.run([sys.executable, "-m", "tests.bench.slurmstart", "--reps", "1", "--nodes", "1,2",
                           "--job"], cwd=str(Path(__file__).resolve().parents[2]), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("nodes=")]
    assert [r[0] for r in rows] == ["nodes=1", "nodes=2"], done.stdout
    assert all(r[1::2] == ["up_s", "first_job_s", "down_s"] for r in rows), done.stdout
