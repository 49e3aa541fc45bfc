"""Benchmark: the fabric sweep at 1,024 and 10,000 nodes, through stand-in sbatch and squeue.

    python3 -m tests.bench.fabricsweep [--nodes 1024 10000] [--group]

The sweep's own round loop (decide/sweep.py's planner, act/sweeprun.py's runner writing each
job's script and reading its output file) runs unchanged; only the door to Slurm's job
commands is an in-process stand-in: `submit` reads the job's --nodelist and writes, into the
job's --output file, the output the job would print (nccl-tests' table with the bus bandwidth a
model of the cluster gives: one node slow in every collective, or with --group one that is slow
only in groups of more than two), and `states` says every job has ended.  Modelled wall time:
each round lasts one job (JOB_S: srun start, NCCL init, 1-4 GiB all_reduce) plus the scheduler's
start of the round's jobs (SCHED_S).  Prints rounds, jobs submitted, modelled wall time, whether
the bad node was found and nothing else drained, and gcm's N(N-1)/2 all-pairs job count.
Not a pytest test: nothing asserts on a figure.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from healthcheck.act.sweeprun import Setup, SlurmRunner
from healthcheck.decide.internodejob import JobSpec
from healthcheck.decide.sweep import BAD, SweepPlanner, Thresholds

JOB_S = 45.0  # one pair job: srun start, NCCL init, all_reduce -b 1G -e 4G on 8 GPUs a node
SCHED_S = 10.0  # slurmctld starting a round of jobs (sched_interval, prologs)
HEALTHY, SLOW = 380.0, 41.2


def table(busbw: float, nodes: Sequence[str], per_node: int = 8) -> str:
    # rank 0's one line per rank of the communicator, as nccl-tests built with MPI prints them:
    # the proof that the collective spanned its nodes (decide/internodejob.span_problem)
    ranks = "".join(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {node:>10} device {r % per_node:2d} "
                    f"[0x{r:02x}] NVIDIA H100 80GB HBM3\n"
                    for r, node in enumerate(n for n in nodes for _ in range(per_node)))
    return ("== gpu-healthcheck collective begin\n" + ranks +
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
            f"  4294967296    1073741824     float     sum      -1  22000.0  195.00 {busbw:7.2f}      0  22000.0  195.00 {busbw:7.2f}      0\n"
            f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {busbw:g} \n#\n"
            "== gpu-healthcheck collective rc=0\n== gpu-healthcheck end\n")


class StandInJobs:
    """sbatch/squeue/scancel in process: each job 'runs' at submit and has ended at once."""

    def __init__(self, bad: str, at_scale: bool) -> None:
        self.bad, self.at_scale = bad, at_scale
        self.submitted = 0
        self.ids: Dict[str, str] = {}

    def submit(self, args: Sequence[str], script: str) -> str:
        opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
        nodes = opts["nodelist"].split(",")
        slow = self.bad in nodes and (not self.at_scale or len(nodes) > 2)
        with open(opts["output"], "w") as out:
            out.write(table(SLOW if slow else HEALTHY, nodes))
        self.submitted += 1
        return str(self.submitted)

    def states(self, job_ids: Sequence[str]) -> Dict[str, str]:
        return {j: "COMPLETED" for j in job_ids}

    def cancel(self, job_ids: Sequence[str]) -> Optional[str]:
        return None


def simulate(n: int, at_scale: bool) -> Dict[str, object]:
    nodes = [f"gpu{i:05d}" for i in range(n)]
    bad = nodes[n // 3]
    door = StandInJobs(bad, at_scale)
    spec = JobSpec("all_reduce_perf", ("-b", "1G", "-e", "4G"), (), 8, 600.0)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as out:
        runner = SlurmRunner(door, spec, Setup("bench", out, None, None), sleep=lambda s: None)  # type: ignore[arg-type]
        planner = SweepPlanner(nodes, Thresholds(floor_gbps=100.0), partners=2,
                               group_size=n if at_scale else 0)
        while True:
            jobs = planner.next_jobs()
            if not jobs:
                break
            planner.record(runner.run(jobs))
    outcome = planner.outcome()
    return {"nodes": n, "kind": "slow only at scale" if at_scale else "slow in every pair",
            "rounds": outcome.rounds, "bound": 3 + math.ceil(math.log2(n)), "jobs": door.submitted,
            "modelled_s": outcome.rounds * (JOB_S + SCHED_S), "found": outcome.of(BAD) == [bad],
            "gcm_pairs": n * (n - 1) // 2, "cpu_s": time.monotonic() - started}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.bench.fabricsweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1024, 10000])
    args = parser.parse_args(argv)
    print(f"{'nodes':>6}  {'bad node':<19} {'rounds':>6} {'bound':>5} {'jobs':>6} {'modelled':>9}  "
          f"{'found':<5} {'gcm all-pairs jobs':>18} {'bench cpu':>9}")
    for n in args.nodes:
        for at_scale in (False, True):
            r = simulate(n, at_scale)
            print(f"{r['nodes']:>6}  {r['kind']:<19} {r['rounds']:>6} {r['bound']:>5} {r['jobs']:>6} "
                  f"{r['modelled_s'] / 60:>7.1f} m  {str(r['found']):<5} {r['gcm_pairs']:>18,} "
                  f"{r['cpu_s']:>7.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(main())
