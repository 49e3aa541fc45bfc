"""Issue 23's story, as it is told: a job array's task dies of a DBE on gpu-a, our epilog drains
gpu-a, the array's next task waits (it may only run there), the repair resets GPU 2, proves it
healthy and resumes gpu-a, and the next task of the same array runs on gpu-a, on the real test
Slurm with nobody acting."""

from __future__ import annotations

import time

import pytest

from tests.lib.gpucluster import pci, serial

pytestmark = pytest.mark.slurm

TASKS = """#!/bin/sh
if [ "$SLURM_ARRAY_TASK_ID" = 0 ]; then
    echo started
    while [ ! -e {go} ]; do sleep 0.1; done
fi
echo "task $SLURM_ARRAY_TASK_ID ran on $SLURMD_NODENAME"
"""


def _wait_output(path, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = path.read_text() if path.exists() else ""
        if text in out:
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: {text!r} never printed; it holds {out!r}")
        time.sleep(0.05)


def test_repair_the_array_task_after_a_dbe_runs_on_gpu_a_once_the_repair_resumed_it(repair_cluster, tmp_path):
    c = repair_cluster
    go, out = tmp_path / "go", tmp_path / "out"
    out.mkdir()
    # one task at a time (%1), and only on gpu-a: task 1 can run nowhere else
    array = c.cluster.sbatch(["--array=0-1%1", "--gres=gpu:8", "-w", "gpu-a", "-J", "train",
                              f"--output={out}/task-%a.out"], TASKS.format(go=go))
    c.cluster.wait_job(f"{array}_0", states=("RUNNING",), timeout=60)
    _wait_output(out / "task-0.out", "started")
    with c.scenario("gpu-a").open("a") as scenario:  # the DBE happens during task 0
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n")
    go.touch()
    c.cluster.wait_job(f"{array}_0", timeout=60)
    reason = c.wait_reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: gpu2 pci={pci(2)} sn={serial(2)} ecc.volatile_uncorrected=1 "
                             f"epilog job="), reason
    # gpu-a is drained: the next task waits for it
    assert c.cluster.job_info(f"{array}_1").get("JobState") == "PENDING"
    assert not (out / "task-1.out").exists()
    done = c.check("gpu-a", "--node", "--act")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not c.drained("gpu-a"), c.reason("gpu-a")
    task = c.cluster.wait_job(f"{array}_1", timeout=90)
    assert task["NodeList"] == "gpu-a"
    assert "task 1 ran on gpu-a" in (out / "task-1.out").read_text()
