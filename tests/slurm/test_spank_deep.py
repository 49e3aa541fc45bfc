"""The SPANK plugin's allow_deep= on the real test cluster: --gpu-healthcheck=deep is refused
unless plugstack.conf says allow_deep=yes (the default is no: minutes of on-device tests in a
job start), and with it the plugin's prolog runs `--level deep` on the job's GPUs.  Every job is an
ordinary user's, made for the test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.localuser import LocalUser

pytestmark = pytest.mark.slurm

# Small fake boards and small bandwidth buffers: the fake runs the deep kernels on the host
# (tests/cli/test_deep_level.py uses the same figures).
DEEP_SCENARIO = "gpus = 8\ngpu.*.memory.total_mib = 24\n"
DEEP_CONFIG = "[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


def _slurmd_log(c: GpuCluster, node: str) -> str:
    return (c.cluster.log_dir / f"slurmd-{node}.log").read_text(errors="replace")


def test_spank_deep_is_refused_by_default_and_the_job_is_told(open_wd: Path, fakegpu: Path,
                                                              job_user: LocalUser) -> None:
    require_slurm()
    c = GpuCluster(open_wd, fakegpu, scripts=False, plugstack="run=prolog,epilog,report",
                   job_user=job_user)
    with c.cluster:
        assert re.search(r"gpu_healthcheck: exec=\S+ level=quick allow_full=yes .* allow_deep=no",
                         _slurmd_log(c, "gpu-a"))
        assert "--gpu-healthcheck=quick|full|deep" in c.cluster.run(["sbatch", "--help"], as_job_user=True).stdout
        r = c.cluster.run(["sbatch", "--gres=gpu:1", "--gpu-healthcheck=deep", "--wrap", "true"],
                          as_job_user=True)
        assert r.returncode != 0
        assert ("--gpu-healthcheck=deep is disabled on this cluster (allow_deep=no in "
                "plugstack.conf); use --gpu-healthcheck=quick or leave it out") in r.stderr
        r = c.cluster.run(["sbatch", "--gres=gpu:1", "--gpu-healthcheck=fast", "--wrap", "true"],
                          as_job_user=True)
        assert r.returncode != 0 and "--gpu-healthcheck takes quick or full, not 'fast'" in r.stderr
        # full stays allowed: allow_deep= gates deep alone
        job = c.cluster.sbatch(["--gres=gpu:1", "--gpu-healthcheck=full"], "echo ok\n")
        c.cluster.wait_job(job, timeout=120)
        assert c.cluster.job_output(job) == "ok\n"
        # level=deep as the plugin's default is refused by name: deep never runs in every job start
        c.write_plugstack("level=deep run=prolog,epilog,report")
        job = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-a"], "echo ok\n")
        c.cluster.wait_job(job, timeout=120)
        assert c.cluster.job_output(job) == "ok\n"
        from tests.lib.slurmcluster import _wait_until

        _wait_until(lambda: "argument 'level=deep' ignored: level= takes quick or full (deep only "
                            "as a job's ask, with allow_deep=yes)" in _slurmd_log(c, "gpu-a"),
                    60, what="the refused level=deep in slurmd-gpu-a.log")


def test_spank_deep_with_allow_deep_yes_passes_level_deep_to_the_prolog(open_wd: Path, fakegpu: Path,
                                                                         job_user: LocalUser) -> None:
    require_slurm()
    c = GpuCluster(open_wd, fakegpu, scripts=False,
                   plugstack="allow_deep=yes run=prolog,epilog,report", job_user=job_user)
    with c.cluster:
        c.scenario("gpu-c").write_text(DEEP_SCENARIO)
        config = c.wd / "config" / "gpu-c.toml"
        config.write_text(config.read_text() + DEEP_CONFIG)
        reports = c.wd / "reports"
        reports.mkdir()
        json_exec = c.cluster.write_wrapper(c.wd / "exec-json", "/bin/sh", args=(
            "-c", f'exec {c.exec_wrapper} "$@" --json > {reports}/$SLURM_JOB_ID$1.json', "sh"))
        c.write_plugstack(f"exec={json_exec} allow_deep=yes run=prolog,epilog,report")
        r = c.cluster.run(["sbatch", "--gres=gpu:1", "--gpu-healthcheck=fast", "--wrap", "true"],
                          as_job_user=True)
        assert r.returncode != 0 and "takes quick or full or deep, not 'fast'" in r.stderr
        job = c.cluster.sbatch(["--gres=gpu:2", "-w", "gpu-c", "--gpu-healthcheck=deep"],
                               "echo gpus=$SLURM_JOB_GPUS\n")
        c.cluster.wait_job(job, timeout=240)
        gpus = sorted(int(i) for i in re.search(r"gpus=([\d,]+)",
                                                c.cluster.job_output(job)).group(1).split(","))
        report = json.loads((reports / f"{job}--prolog.json").read_text())
        assert report["level"] == "deep" and report["verdict"] == "pass", report["findings"]
        assert sorted(r["gpu"] for r in report["deep"]["gpus"]) == gpus
        assert all(r["status"] == "ok" and r["memory_bytes"] > 0 for r in report["deep"]["gpus"])
