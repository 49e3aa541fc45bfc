"""How long the test harness's Slurm accounting takes to start: MariaDB (mariadb-install-db on a
fresh datadir, mariadbd answering, the database and its user made) and slurmdbd (started, the
cluster's record added, sacctmgr answering), as tests/lib/slurmdbd.py does for every cluster
made with accounting=True (tests/slurm/test_suspects_slurm.py).

    python3 -m tests.bench.slurmdbd [--reps N] [--disk] [--log]
    tests/slurmroot/run --slurm 26.05 python -m tests.bench.slurmdbd     # another Slurm and MariaDB

Each repetition starts a one-node cluster (munged, MariaDB, slurmdbd, slurmctld, slurmd) in a
temporary directory and stops it.  --disk adds, to each repetition, a start with the workdir in
/var/tmp and MariaDB's datadir on its file system instead of a tmpfs, for comparison; --log
prints slurmdbd's log of the last start.  Needs root (as the Slurm tests); runs in the tests'
private namespaces (tests/lib/hermetic.py).  Printed, never asserted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

from tests.lib import hermetic
from tests.lib.slurmcluster import SlurmCluster, SlurmClusterError, slurm_missing_reason, slurm_version
from tests.lib.slurmdbd import accounting_missing_reason, dbd_log


class Start(NamedTuple):
    mariadb: float    # mariadb-install-db, mariadbd answering, the database and its user
    slurmdbd: float   # slurmdbd started until sacctmgr answers
    cluster: float    # the whole one-node cluster with accounting
    fs: str           # the datadir's file system
    log: str          # slurmdbd's log


def fs_type(path: Path) -> str:
    """The file system type of the mount `path` lies on (/proc/self/mountinfo, longest match)."""
    best, kind = "", "?"
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            after = fields[fields.index("-") + 1]
            if (str(path) == point or str(path).startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, after
    return kind


def one_start(disk: bool) -> Start:
    # --disk: /var/tmp, since /tmp is itself a tmpfs in the roots of tests/slurmroot
    wd = Path(tempfile.mkdtemp(prefix="hc-bench-slurmdbd-", dir="/var/tmp" if disk else None))
    try:
        c = SlurmCluster(wd, nodes=["gpu-a"], gpus_per_node=1, accounting=True)
        c.accounting_tmpfs = not disk
        with c:
            return Start(c.accounting_seconds["mariadb"], c.accounting_seconds["slurmdbd"], c.start_seconds or 0.0,
                         fs_type(wd / "mariadb" / "data"), dbd_log(c))
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def report(runs: List[Start]) -> None:
    print(f"  MariaDB's datadir on {runs[-1].fs}, {len(runs)} starts (median, min-max, seconds):")
    for what, values in (("MariaDB: install, start, database and user", [r.mariadb for r in runs]),
                         ("slurmdbd: start until sacctmgr answers", [r.slurmdbd for r in runs]),
                         ("MariaDB + slurmdbd", [r.mariadb + r.slurmdbd for r in runs]),
                         ("whole one-node cluster with accounting", [r.cluster for r in runs])):
        print(f"    {what:<45} {statistics.median(values):6.2f}  ({min(values):.2f}-{max(values):.2f})")
    errors = [line for line in runs[-1].log.splitlines() if "error" in line or "fatal" in line]
    print(f"    slurmdbd log lines with error/fatal (last start): {len(errors)}")
    for line in errors:
        print(f"      {line}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.bench.slurmdbd", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--disk", action="store_true",
                        help="also start each repetition with MariaDB's datadir on disk, right after the tmpfs one")
    parser.add_argument("--log", action="store_true", help="print slurmdbd's log of the last start")
    args = parser.parse_args(argv)
    missing = slurm_missing_reason() or accounting_missing_reason()
    if missing:
        print(f"bench slurmdbd: {missing}", file=sys.stderr)
        return 2
    hermetic.isolate()
    kinds = (False, True) if args.disk else (False,)
    runs: Dict[bool, List[Start]] = {disk: [] for disk in kinds}
    for _ in range(args.reps):
        for disk in kinds:  # interleaved, so that both see the same load of the machine
            try:
                runs[disk].append(one_start(disk))
            except SlurmClusterError as exc:
                print(f"bench slurmdbd: the cluster did not start: {exc}", file=sys.stderr)
                return 1
    print(f"Slurm {slurm_version()}:")
    for disk in kinds:
        report(runs[disk])
    if args.log:
        print(runs[kinds[-1]][-1].log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
