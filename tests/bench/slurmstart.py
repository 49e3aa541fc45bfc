"""Benchmark: what the Slurm test harness (tests/lib/slurmcluster.py) costs a test, up and down.

    python3 -m tests.bench.slurmstart [--reps 3] [--nodes 1,3,8] [--job]

For each cluster size, REPS times: a SlurmCluster of that many nodes brought up (munged,
slurmctld, one slurmd per node, until every node is idle in sinfo), optionally one trivial
batch job run to COMPLETED (--job: the first job's scheduling and launch), then stopped with
its leftover scan.  Prints one row per size: the median and the maximum of each phase, in
seconds.  Needs root and
Slurm on PATH (inside tests/slurmroot/run for the other versions).  Not a pytest test: nothing
asserts on a figure; on a machine shared with other runs the figures vary with their load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from tests.lib.slurmcluster import SlurmCluster, slurm_missing_reason, slurm_version


def _one(workdir: Path, nodes: int, job: bool) -> Dict[str, float]:
    names = ["gpu-%02d" % i for i in range(nodes)]
    cluster = SlurmCluster(workdir, nodes=names)
    t0 = time.monotonic()
    cluster.start()
    up = time.monotonic() - t0
    row = {"up_s": up}
    try:
        if job:
            t1 = time.monotonic()
            cluster.wait_job(cluster.sbatch(["-N1"], "true\n"), timeout=120, interval=0.05)
            row["first_job_s"] = time.monotonic() - t1
    finally:
        t2 = time.monotonic()
        cluster.stop()
        row["down_s"] = time.monotonic() - t2
    return row


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.bench.slurmstart")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--nodes", default="1,3,8", help="cluster sizes, comma-separated")
    parser.add_argument("--job", action="store_true", help="also time one batch job to COMPLETED")
    args = parser.parse_args(argv)
    reason = slurm_missing_reason()
    if reason:
        print("slurmstart: %s" % reason, file=sys.stderr)
        return 2
    print("Slurm %s, %d reps; seconds as median/max" % (slurm_version(), args.reps))
    with tempfile.TemporaryDirectory(prefix="hc-slurmstart-") as tmp:
        for size in (int(n) for n in args.nodes.split(",")):
            rows = [_one(Path(tmp) / ("%d-%d" % (size, rep)), size, args.job)
                    for rep in range(args.reps)]
            print("nodes=%-3d %s" % (size, "  ".join(
                "%s %.2f/%.2f" % (key, statistics.median(r[key] for r in rows),
                                  max(r[key] for r in rows)) for key in rows[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
