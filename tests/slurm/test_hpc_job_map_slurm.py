"""`hpc_job_mapping_dir` on a real Slurm cluster: slurmd's Prolog and Epilog (our prolog/ and
epilog/ scripts) write an ordinary user's job into dcgm-exporter's per-GPU job files while the
job runs, and take it out when it ends (decide/jobmap.py has dcgm-exporter's format)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Dict

import pytest

from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.localuser import as_user, local_user, open_dir

pytestmark = pytest.mark.slurm


def gpu_files(directory: Path) -> Dict[str, str]:
    return {p.name: p.read_text() for p in directory.iterdir() if p.name.isdigit()} if directory.exists() else {}


def test_hpc_job_map_holds_her_job_on_its_gpus_while_it_runs_and_not_after(fakegpu, isolation):
    require_slurm()
    # a work folder she can reach (pytest's tmp is 0700 above it): her sbatch reads slurm.conf
    # and the munge socket in there, and her job waits for the go file
    with open_dir("hc38-jobmap-", 0o711) as wd, local_user("hc38") as user:
        c = GpuCluster(wd, fakegpu)
        jobmap = wd / "dcgm-job-map"
        for node in c.nodes:  # a top-level key goes before the config's first [section]
            path = wd / "config" / f"{node}.toml"
            path.write_text(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n' + path.read_text())
        script = wd / "job.sh"
        script.write_text(f"#!/bin/sh\necho started gpus=$SLURM_JOB_GPUS\nwhile [ ! -e {wd}/go ]; do sleep 0.1; done\n")
        script.chmod(0o755)
        with c.cluster:
            jobs = c.cluster.jobs_dir
            done = as_user(user, f"sbatch --parsable --gres=gpu:2 --output={jobs}/slurm-%j.out "
                                 f"--chdir={jobs} {script}", env=c.cluster.env, cwd="/tmp")
            job = done.stdout.strip().split(";")[0]
            assert c.cluster.job_info(job)["UserId"] == f"{user.name}({user.pw_uid})"
            assert c.wait_running(job)["NodeList"] == "gpu-a"  # its script printed its GPUs
            given = re.search(r"gpus=(\S+)", c.cluster.job_output(job)).group(1)
            # gres.conf lists /dev/nvidia0-7 in order: gres index i is NVML index i
            assert gpu_files(jobmap) == {gpu: f"{job}\n" for gpu in given.split(",")}, given
            assert len(given.split(",")) == 2
            # dcgm-exporter need not run as root: she (any user) reads the files
            listed = as_user(user, f"cat {' '.join(str(jobmap / g) for g in given.split(','))}")
            assert listed.stdout == f"{job}\n" * 2
            (wd / "go").touch()
            c.cluster.wait_job(job, timeout=60)
            # the epilog has run once the job is COMPLETED (slurmctld waits for it)
            deadline = time.monotonic() + 30
            while gpu_files(jobmap) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert gpu_files(jobmap) == {}
            assert sorted(p.name for p in jobmap.iterdir()) == [".gpu-healthcheck.lock"]
