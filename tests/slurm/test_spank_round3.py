"""The SPANK plugin and the prolog on the real Slurm cluster, round three of the trust issue:
a job's own plugstack cannot buy the full test (job_levels), the task-exit report runs once
per node and step with a clean environment, and the plugin's deadline reaches gpu-healthcheck,
whose own bounds shrink to end before it.  Every job is an ordinary user's, made for the test."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.lib.gpucluster import HEALTHY, GpuCluster, pci, require_slurm, serial, spank_plugin
from tests.slurm.test_spank import SMALL, WAIT_FOR_GO, _history, _job_gpus

pytestmark = pytest.mark.slurm


def test_spank_a_users_own_plugstack_cannot_buy_the_full_test_past_allow_full_no(open_wd, fakegpu, job_user):
    """allow_full=no, our Prolog= script: a user points sbatch at a slurm.conf of their own
    whose plugstack.conf loads our plugin with allow_full=yes.  The job's prolog environment
    then says full; the script honours only job_levels (default quick)."""
    require_slurm()
    c = GpuCluster(open_wd, fakegpu, scripts=True, plugstack="allow_full=no run=report", job_user=job_user)
    with c.cluster:
        c.scenario("gpu-c").write_text(SMALL)
        own = open_wd / "users-own"  # hers: she writes it
        own.mkdir()
        os.chown(own, job_user.pw_uid, job_user.pw_gid)
        (own / "plugstack.conf").write_text(
            f"required {spank_plugin()} exec={c.exec_wrapper} allow_full=yes run=report\n")
        conf = c.cluster.conf_path.read_text()
        conf = re.sub(r"(?m)^PlugStackConfig=.*$", f"PlugStackConfig={own / 'plugstack.conf'}", conf)
        (own / "slurm.conf").write_text(conf)
        for path in own.iterdir():
            os.chown(path, job_user.pw_uid, job_user.pw_gid)
        env = dict(c.cluster.env, SLURM_CONF=str(own / "slurm.conf"))
        done = subprocess.run(["sbatch", "--parsable", "--gres=gpu:2", "-w", "gpu-c",
                               "--gpu-healthcheck=full", "-o", str(c.cluster.jobs_dir / "slurm-%j.out"),
                               "--wrap", "echo gpus=$SLURM_JOB_GPUS"],
                              env=env, capture_output=True, text=True, timeout=30,
                              cwd=str(c.cluster.jobs_dir), user=job_user.pw_uid,
                              group=job_user.pw_gid, extra_groups=[])
        assert done.returncode == 0, done.stderr  # the user's own plugstack allows it
        job = done.stdout.strip().split(";")[0]
        c.cluster.wait_job(job, timeout=120)
        [prolog] = [r for r in _history(c, "gpu-c", job) if r["mode"] == "prolog"]
        assert prolog["level"] == "quick", prolog
        assert all(p["bytes_tested"] <= 256 * 2**20 for p in prolog["probes"])


def test_spank_task_exit_report_runs_once_per_node_and_step_with_a_clean_environment(open_wd, fakegpu, job_user):
    """16 tasks of one srun step fail after a DBE on the job's GPU: one report (one line), not
    16, and it runs without the job's LD_PRELOAD, PYTHONPATH and other variables."""
    require_slurm()
    c = GpuCluster(open_wd, fakegpu, scripts=False, job_user=job_user)
    envs = open_wd / "report-envs"
    envs.mkdir()
    envs.chmod(0o1777)  # the report runs as the job's user
    recording = open_wd / "exec-recording"
    recording.write_text("#!/bin/sh\n"
                         f'[ "$1" = --job-report ] && env > "{envs}/$SLURM_JOB_ID.$SLURM_STEP_ID.$$"\n'
                         f'exec {c.exec_wrapper} "$@"\n')
    recording.chmod(0o755)
    c.write_plugstack(f"exec={recording} run=prolog,epilog,report")
    with c.cluster:
        go = open_wd / "go"
        job = c.cluster.sbatch(
            ["-n", "16", "--gres=gpu:1", "-w", "gpu-a",
             "--export=ALL,LD_PRELOAD=libc.so.6,PYTHONPATH=/nonexistent/job-pythonpath,HC_JOB_MARKER=job"],
            WAIT_FOR_GO.format(go=go) + "srun -n 16 sh -c 'exit 3'\necho srun exited $?\n")
        c.wait_running(job)
        [gpu] = _job_gpus(c, job)
        with c.scenario("gpu-a").open("a") as scenario:
            scenario.write(f"gpu.{gpu}.ecc.volatile.uncorrected = 2\n")
        go.touch()
        c.cluster.wait_job(job, timeout=120)
        output = c.cluster.job_output(job)
        # the step failed, as its tasks did: 22.05's srun exits 3; 24.11's prints "srun: tasks:
        # Unknown error <a different number each run>" and exits 112 for 16 tasks failing at once
        # (the plugin's task_exit returns 0 whatever happens), so only "non-zero" is Slurm's to
        # promise here
        exited = re.search(r"srun exited (\d+)\n$", output)
        assert exited and exited.group(1) != "0", output
        line = (f"gpu-healthcheck: gpu-a GPU {gpu} ({pci(gpu)}, SN {serial(gpu)}): 2 volatile "
                f"uncorrected ECC errors")
        assert output.count(line) == 1 and output.count("gpu-healthcheck:") == 1, output
        recorded = sorted(envs.iterdir())
        assert len(recorded) == 1, [p.name for p in recorded]
        env = dict(l.split("=", 1) for l in recorded[0].read_text().splitlines() if "=" in l)
        for name in ("LD_PRELOAD", "PYTHONPATH", "HC_JOB_MARKER"):
            assert name not in env, (name, env.get(name))
        assert env["SLURM_JOB_ID"] == job and env["GPU_HEALTHCHECK_REPORT"] == "task-exit"
        assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        assert env.get("SLURM_JOB_GPUS") == str(gpu)


def test_spank_the_plugins_deadline_reaches_gpu_healthcheck_whose_probe_shrinks_to_fit(open_wd, fakegpu, job_user):
    """timeout=12 and a CUDA probe that hangs (probe.timeout_s = 20): the prolog is told its
    deadline, caps the probe to what is left after the drain's calls, judges the hang and drains
    the node before the plugin's SIGTERM, instead of being killed with nothing judged."""
    require_slurm()
    c = GpuCluster(open_wd, fakegpu, scripts=False, plugstack="timeout=12 run=prolog,epilog,report",
                   job_user=job_user)
    with c.cluster:
        c.scenario("gpu-a").write_text(HEALTHY + "gpu.*.cuda.hang_s = 60\n")
        job = c.cluster.sbatch(["--gres=gpu:1"], "echo ran\n")  # gpu-a first: its weight is lowest
        reason = c.wait_reason("gpu-a", timeout=90)
        assert "cuda.probe" in reason and f"prolog job={job}" in reason, reason
        from tests.lib.slurmcluster import _wait_until

        def prologs():
            return [r for r in _history(c, "gpu-a", job) if r["mode"] == "prolog"]

        _wait_until(prologs, 30, what="the prolog's history line (written after the drain)")
        [prolog] = prologs()
        assert not prolog.get("terminated"), prolog
        assert prolog["action"]["taken"] == "drain"
        log = (c.cluster.log_dir / "slurmd-gpu-a.log").read_text(errors="replace")
        assert "passed its deadline of 12 s" not in log
