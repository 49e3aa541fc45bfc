"""`make demo`: the incident, replayed on a local 3-node Slurm cluster with simulated 8-GPU nodes.

    python3 -m tests.lib.demo [--workdir DIR] [--keep]

Act 1: a job array of 8-GPU tasks.  While task 0 runs on gpu-a, GPU 2 of gpu-a develops an
uncorrectable ECC error (the incident).  The epilog drains gpu-a with a reason naming the GPU,
and task 1 runs on a healthy node.
Act 2: gpu-c still holds 60 GiB on GPU 4 from a context that outlived its job (the incident's
"CUDA out of memory" at start-up).  A job that prefers gpu-c is drained away by the prolog and
requeued onto a healthy node by Slurm, without anyone acting; its AdminComment names the GPU.

Everything runs under a temporary directory and is stopped on exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from tests.lib import hermetic
from tests.lib.fakenode import ensure_fakegpu
from tests.lib.gpucluster import HEALTHY, GpuCluster
from tests.lib.slurmcluster import slurm_missing_reason


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def show(lines: str) -> None:
    for line in lines.rstrip().splitlines():
        print(f"   {line}", flush=True)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.2)


def act_one(c: GpuCluster, wd: Path) -> str:
    say("Act 1: a job array of 8-GPU training tasks; gpu-a is preferred (lowest Weight)")
    go = wd / "go-task0"
    script = (f'if [ "$SLURM_ARRAY_TASK_ID" = 0 ]; then while [ ! -e {go} ]; do sleep 0.2; done; fi\n'
              'echo "task $SLURM_ARRAY_TASK_ID ran on $SLURMD_NODENAME with GPUs $SLURM_JOB_GPUS"\n')
    array = c.cluster.sbatch(["--array=0-1%1", "--gres=gpu:8", "-J", "train-13b"], "echo started\n" + script)
    task0 = f"{array}_0"
    wait_for(lambda: c.cluster.job_info(task0).get("JobState") == "RUNNING"
             and "started" in _out(c, task0), 60, "task 0 to start")
    show(f"task 0 ({task0}) runs on {c.cluster.job_info(task0)['NodeList']}")
    say("Mid-job, GPU 2 of gpu-a reports an uncorrectable ECC error (cudaErrorECCUncorrectable)")
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\ngpu.2.ecc.aggregate.uncorrected = 1\n")
    go.touch()
    wait_for(lambda: c.reason("gpu-a").startswith("gpu-healthcheck:"), 60, "the epilog to drain gpu-a")
    say("The epilog drained gpu-a:  sinfo -R -o \"%100E %12U %19H %N\"")
    sinfo = c.cluster.sinfo_reasons()
    show(sinfo)
    task1 = f"{array}_1"
    wait_for(lambda: c.cluster.job_info(task1).get("JobState") == "COMPLETED", 120, "task 1 to finish")
    say("The next task of the array ran on a healthy node")
    show(_out(c, task1).replace("started\n", ""))
    # The epilog writes its history line after the drain has been re-read against the budget
    # (about a second later): the next task can finish before that.
    wait_for(lambda: bool(_epilog_records(c)), 60, "the epilog's history line on gpu-a")
    say("gpu-a's history ties the failure to host, GPU, PCI bus, serial and job:  gpu-healthcheck --history 2")
    show(c.check("gpu-a", "--history", "2").stdout)
    epilog = _epilog_records(c)[-1]
    show(json.dumps({k: epilog.get(k) for k in ("node", "mode", "job_id", "verdict")}
                    | {"finding": (epilog.get("findings") or [{}])[0]}, indent=1))
    return sinfo


def _epilog_records(c: GpuCluster) -> list:
    path = c.state("gpu-a") / "history.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if '"epilog"' in line]


def act_two(c: GpuCluster) -> None:
    say("Act 2: gpu-c (preferred now) still holds 60 GiB on GPU 4 from a context that outlived its job")
    c.scenario("gpu-c").write_text(HEALTHY + "gpu.4.memory.used_mib = 61440\ngpu.4.cuda.alloc_error = 2\n")
    job = c.cluster.sbatch(["--gres=gpu:8", "-J", "resume-13b"], "echo ran on $SLURMD_NODENAME\n")
    wait_for(lambda: c.reason("gpu-c").startswith("gpu-healthcheck:"), 60, "the prolog to drain gpu-c")
    say("The prolog drained gpu-c before the job could start there")
    show(c.cluster.sinfo_reasons())
    say("Slurm requeued the job (not held: nohold_on_prolog_fail); waiting for it to finish elsewhere")
    info = c.cluster.wait_job(job, timeout=240)
    show(f"job {job}: {info['JobState']} on {info['NodeList']} after {info.get('Restarts', '?')} requeue(s)")
    say(f"The job's own record names the node and GPU:  scontrol show job {job} | grep AdminComment")
    show(f"AdminComment={c.cluster.job_info(job).get('AdminComment', '')}")
    say("The admin's view:  gpu-healthcheck --cluster")
    show(c.check("gpu-c", "--cluster").stdout)


def _out(c: GpuCluster, job: str) -> str:
    jobid = c.cluster.job_info(job).get("JobId", job)
    for name in (f"slurm-{jobid}.out", f"slurm-{job}.out"):
        path = c.cluster.jobs_dir / name
        if path.exists():
            return path.read_text()
    return ""


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="keep everything here (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="do not delete the work directory")
    args = parser.parse_args(argv)
    missing = slurm_missing_reason()
    if missing:
        print(f"demo: {missing}; run `make demo` (it installs the Debian packages)", file=sys.stderr)
        return 2
    try:
        # The demo's cluster has its own munge socket, key, ports and state directories; in
        # the tests' private namespaces as well, a host's own munged/slurmctld/state can be
        # neither reached nor touched even by mistake (tests/lib/hermetic.py).
        hermetic.isolate()
    except (hermetic.IsolationError, OSError) as exc:
        print(f"demo: running without private namespaces ({exc})", file=sys.stderr)
    fake = ensure_fakegpu()
    wd = Path(args.workdir or tempfile.mkdtemp(prefix="gpu-healthcheck-demo-"))
    wd.mkdir(parents=True, exist_ok=True)
    os.chmod(wd, 0o755)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    started = time.monotonic()
    try:
        # gpu-a, then gpu-c, then gpu-b: the jobs go where the faults are
        c = GpuCluster(wd, fake, weights={"gpu-a": 1, "gpu-c": 5, "gpu-b": 10})
        say(f"Starting munge, slurmctld and 3 slurmd (gpu-a, gpu-b, gpu-c: 8 simulated GPUs each) in {wd}")
        with c.cluster:
            show(c.cluster.run(["sinfo", "-N", "-o", "%N %T %G %w"]).stdout)
            act_one(c, wd)
            act_two(c)
        say(f"Done in {time.monotonic() - started:.0f} s; the cluster is stopped")
        return 0
    except KeyboardInterrupt:
        print("\ndemo: interrupted; the cluster is stopped", file=sys.stderr)
        return 130
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(wd, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
