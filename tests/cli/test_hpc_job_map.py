"""`hpc_job_mapping_dir`: --prolog and --epilog through the real CLI on the fake GPUs write and
remove dcgm-exporter's per-GPU job files (decide/jobmap.py, act/jobmap.py): the job's own GPUs
only, another job's line kept, nothing for a job that does not start, a directory others may
write refused, and concurrent prologs and epilogs on a shared GPU lose no line.  The real
Slurm run is tests/slurm/test_hpc_job_map_slurm.py."""

import json
import os
import stat
import subprocess
import sys

JOB = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "0,1"}


def gpu_files(directory):
    return {p.name: p.read_text() for p in directory.iterdir() if p.name.isdigit()}


def history_events(node):
    lines = (node.state_dir / "history.jsonl").read_text().splitlines()
    return [e for line in lines for e in json.loads(line).get("events", [])]


def test_hpc_job_map_prolog_writes_the_jobs_gpus_and_the_epilog_removes_them(node, tmp_path):
    jobmap = tmp_path / "run" / "dcgm-job-map"
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    done = node.run("--prolog", env=JOB)
    assert done.rc == 0, done.stderr
    assert gpu_files(jobmap) == {"0": "42\n", "1": "42\n"}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in jobmap.iterdir() if p.name.isdigit())
    assert stat.S_IMODE(jobmap.stat().st_mode) == 0o755
    assert [e["message"] for e in history_events(node) if e["kind"] == "jobmap"] == \
        [f"hpc_job_mapping_dir {jobmap}: job 42 added to GPU(s) 0,1"]
    done = node.run("--epilog", env=JOB)
    assert done.rc == 0, done.stderr
    assert gpu_files(jobmap) == {}
    assert not [p.name for p in jobmap.iterdir() if p.name.endswith(".tmp")]


def test_hpc_job_map_keeps_another_jobs_line_on_a_shared_gpu(node, tmp_path):
    jobmap = tmp_path / "jobmap"
    jobmap.mkdir(mode=0o755)
    (jobmap / "1").write_text("77\n")
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    assert node.run("--prolog", env=JOB).rc == 0
    assert gpu_files(jobmap) == {"0": "42\n", "1": "77\n42\n"}
    assert node.run("--epilog", env=JOB).rc == 0
    assert gpu_files(jobmap) == {"1": "77\n"}


def test_hpc_job_map_follows_the_gres_mapping_not_the_slurm_index(node, tmp_path):
    """gres index 0 is /dev/nvidia1 (NVML index 0 has minor 1): the file is NVML's index."""
    jobmap = tmp_path / "jobmap"
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    scenario = "gpus = 2\ngpu.0.minor_number = 1\ngpu.1.minor_number = 0\n"
    assert node.run("--prolog", scenario=scenario, env={**JOB, "SLURM_JOB_GPUS": "0"}).rc == 0
    assert gpu_files(jobmap) == {"1": "42\n"}


def test_hpc_job_map_writes_nothing_for_a_job_that_does_not_start(node, tmp_path):
    jobmap = tmp_path / "jobmap"
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    done = node.run("--prolog", scenario="gpus = 8\ngpu.1.cuda.alloc_error = 2\n", env=JOB)
    assert done.rc != 0
    assert not jobmap.exists() or gpu_files(jobmap) == {}


def test_hpc_job_map_unset_writes_nothing(node, tmp_path):
    assert node.run("--prolog", env=JOB).rc == 0
    assert not [p for p in tmp_path.rglob("*") if p.name == ".gpu-healthcheck.lock"]


def test_hpc_job_map_refuses_a_directory_others_may_write_and_never_fails_the_job(node, tmp_path):
    jobmap = tmp_path / "jobmap"
    jobmap.mkdir()
    jobmap.chmod(0o777)
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    done = node.run("--prolog", env=JOB)
    assert done.rc == 0
    assert f"hpc_job_mapping_dir: job 42 not written: {jobmap} may be written by others (mode 0777" in done.stderr
    assert gpu_files(jobmap) == {}


def test_hpc_job_map_never_copies_what_a_symlink_points_at(node, tmp_path):
    jobmap = tmp_path / "jobmap"
    jobmap.mkdir(mode=0o755)
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0\n")
    (jobmap / "0").symlink_to(secret)
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    done = node.run("--prolog", env=JOB)
    assert done.rc == 0 and "job 42 not written: cannot read" in done.stderr, done.stderr
    assert (jobmap / "0").is_symlink() and secret.read_text() == "root:x:0:0\n"


def test_hpc_job_map_concurrent_prologs_and_epilogs_on_a_shared_gpu_lose_no_line(node, tmp_path):
    """Six jobs on GPU 0 (gres/shard) start at once, then end at once."""
    jobmap = tmp_path / "jobmap"
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    jobs = [str(100 + i) for i in range(6)]

    def all_at_once(flag):
        procs = [subprocess.Popen([sys.executable, "-m", "healthcheck.cli", flag],
                                  env=node.env({**JOB, "SLURM_JOB_ID": j, "SLURM_JOB_GPUS": "0"}),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for j in jobs]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0 and "hpc_job_mapping_dir" not in err, err

    all_at_once("--prolog")
    assert sorted((jobmap / "0").read_text().splitlines()) == jobs
    all_at_once("--epilog")
    assert gpu_files(jobmap) == {}
    assert sorted(os.listdir(jobmap)) == [".gpu-healthcheck.lock"]


def test_hpc_job_map_writes_nothing_for_gpus_it_cannot_map_and_says_so(node, tmp_path):
    """SLURM_JOB_GPUS names a gres index gres.conf does not have: no GPU is guessed."""
    jobmap = tmp_path / "jobmap"
    node.write_config(f'hpc_job_mapping_dir = "{jobmap}"\njournal = false\n')
    done = node.run("--prolog", env={**JOB, "SLURM_JOB_GPUS": "9"})
    assert done.rc == 0, done.stderr
    assert f"hpc_job_mapping_dir {jobmap}: job 42 not written: its GPUs are not known (SLURM_JOB_GPUS=9" in done.stderr
    assert not jobmap.exists() or gpu_files(jobmap) == {}
