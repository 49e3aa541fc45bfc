"""Benchmark: a simulated fleet's Slurm accounting through `--suspects`' rules.

    python3 -m tests.bench.fleetsim [--nodes 1024,10000] [--days 14] [--jobs 0] [--lemons 8]
                                    [--holes 3] [--seed 1] [--cost-jobs 1000000] [--no-cost]

For each fleet size it writes `sacct --parsable2` text for N nodes over D days:
- jobs of 1 to 512 nodes (75 % one node, 17 % 2-8, 6 % 9-64, 2 % 65-512) on contiguous nodes
  (a scheduler packs neighbours), from 300 users, each failing for their own reasons at one of
  the base rates in NOTES.md (0.155, 0.305, 0.397, 0.429: Helios, Philly, Kalos, Seren);
- K lemons, each failing any job it is in with an extra chance (--lemon-extra, 50 %);
- H black holes: for two hours from a random moment each takes a job every 3 minutes, all of
  which fail within 2 s (the 554 jobs in 1 h 46 min of pytorch/ci-infra#1058, at this rate);
- a spiteful user who pins 200 failing jobs to one healthy node.

It prints precision and recall of the named nodes (black holes and lemons) against the planted
ones, whether the spiteful user's node was named, and the failures each planted node caused
before it was first named (the rules run again at checkpoints over the jobs ended by then:
every day, or every 3.5 days above 2,000 nodes; a black hole's rule every 10 minutes).  Then the cost: 10,000 nodes and --cost-jobs
jobs read from the file and analysed (read/sacct.py + decide/suspects.py) in a child process,
wall time, CPU time and peak RSS (VmHWM).  Nothing is asserted: figures are printed (docs/suspects.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Set, Tuple

from healthcheck.configsections import SuspectsConfig
from healthcheck.fleetmodel import Job

BASE_RATES = (0.155, 0.305, 0.397, 0.429)
HEADER = "JobIDRaw|User|State|ExitCode|Start|End|NNodes|NodeList|Partition"
T0 = 1_796_000_000.0  # 2026-11-29
DAY = 86400.0


class Fleet:
    def __init__(self, nodes: int, days: float, jobs: int, lemons: int, holes: int, seed: int,
                 extra: float = 0.5) -> None:
        self.rng = random.Random(seed)
        self.extra = extra
        self.names = [f"gpu-{i:05d}" for i in range(nodes)]
        self.days = days
        self.jobs = jobs or int(nodes * days * 7)  # ~7 allocations per node-day
        picks = self.rng.sample(range(nodes), lemons + holes + 1)
        self.lemons = {self.names[i] for i in picks[:lemons]}
        self.holes = {self.names[i]: T0 + self.rng.uniform(0.3, 0.8) * days * DAY
                      for i in picks[lemons:lemons + holes]}
        self.spite = self.names[picks[-1]]
        self.user_rate = [self.rng.choice(BASE_RATES) for _ in range(300)]

    def _size(self) -> int:
        r = self.rng.random()
        n = 1 if r < 0.75 else self.rng.randint(2, 8) if r < 0.92 else \
            self.rng.randint(9, 64) if r < 0.98 else self.rng.randint(65, 512)
        return min(n, len(self.names))

    def generate(self) -> List[Job]:
        rng, out = self.rng, []
        end_t = T0 + self.days * DAY
        for i in range(self.jobs):
            size = self._size()
            first = rng.randrange(len(self.names) - size + 1)
            nodes = tuple(self.names[first:first + size])
            user = rng.randrange(300)
            start = rng.uniform(T0, end_t - 600)
            length = min(end_t - start, rng.expovariate(1 / 5400.0) + 60)
            failed = rng.random() < self.user_rate[user]
            for node in nodes:
                if node in self.lemons and rng.random() < self.extra:
                    failed = True
                onset = self.holes.get(node)
                if onset is not None and onset <= start < onset + 7200:
                    failed, length = True, 2.0
            out.append(Job(str(i + 1), f"user{user:03d}", "FAILED" if failed else "COMPLETED",
                           "1:0" if failed else "0:0", start, start + length, nodes))
        n = len(out)
        for node, onset in self.holes.items():  # fed every 3 minutes while it is a hole
            for k in range(40):
                start = onset + k * 180.0
                out.append(Job(str(n := n + 1), f"user{rng.randrange(300):03d}", "FAILED", "1:0",
                               start, start + 2.0, (node,)))
        for k in range(200):
            start = T0 + self.days * DAY / 8 + (k * 5400.0) % (self.days * DAY * 0.75)
            out.append(Job(str(n := n + 1), "spite", "FAILED", "1:0", start, start + 5.0, (self.spite,)))
        return out


def write_sacct(jobs: List[Job], path: Path) -> None:
    from ClusterShell.NodeSet import NodeSet

    import datetime

    def stamp(t: float) -> str:
        return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")

    with open(path, "w") as f:
        f.write(HEADER + "\n")
        for j in jobs:
            nodelist = j.nodes[0] if len(j.nodes) == 1 else str(NodeSet.fromlist(j.nodes))
            f.write(f"{j.job_id}|{j.user}|{j.state}|{j.exit_code}|{stamp(j.start)}|{stamp(j.end)}|"
                    f"{len(j.nodes)}|{nodelist}|gpu\n")


def analyse(jobs: List[Job], until: float) -> Set[str]:
    from healthcheck.decide.suspects import find_suspects

    return {s.node for s in find_suspects(jobs, [], SuspectsConfig(), until)}


def detection(fleet: Fleet, jobs: List[Job], every_s: float) -> Tuple[Dict[str, int], Set[str]]:
    """Failures each planted node was in before the first checkpoint that named it (-1: never).
    Lemons: the whole rule set every `every_s`.  Black holes: their rule every 10 minutes from
    the onset, over the jobs of the day before (all its share test looks at)."""
    from healthcheck.decide.suspects import black_holes

    first: Dict[str, float] = {}
    ordered = sorted(jobs, key=lambda j: j.end)
    end_t = T0 + fleet.days * DAY
    named: Set[str] = set()
    t = T0 + every_s
    while t <= end_t + 1:
        named = analyse([j for j in ordered if j.end <= t], t)
        for node in named & fleet.lemons:
            first.setdefault(node, t)
        t += every_s
    cfg = SuspectsConfig()
    for node, onset in fleet.holes.items():
        near = [j for j in ordered if onset - DAY <= j.end <= onset + 4 * 3600]
        for k in range(1, 25):
            t = onset + k * 600.0
            if node in {s.node for s in black_holes([j for j in near if j.end <= t], cfg)}:
                first[node] = t
                break
    before = {}
    for node in sorted(set(fleet.lemons) | set(fleet.holes)):
        since = fleet.holes.get(node, T0)
        before[node] = -1 if node not in first else sum(
            1 for j in jobs if j.failed and node in j.nodes and since <= j.start and j.end <= first[node])
    return before, named


def run_size(nodes: int, args: argparse.Namespace) -> None:
    fleet = Fleet(nodes, args.days, args.jobs, args.lemons, args.holes, args.seed, args.lemon_extra)
    jobs = fleet.generate()
    every = DAY if nodes <= 2000 else 3.5 * DAY
    before, named = detection(fleet, jobs, every)
    bad = set(fleet.lemons) | set(fleet.holes)
    tp = len(named & bad)
    print(f"{nodes} nodes, {len(jobs)} jobs over {args.days:g} days, {len(fleet.lemons)} lemons "
          f"(+{args.lemon_extra:.0%} failures), "
          f"{len(fleet.holes)} black holes, checkpoints every {every / 3600:g} h")
    print(f"  named {len(named)}: precision {tp / len(named) if named else float('nan'):.2f}, "
          f"recall {tp / len(bad):.2f}; the spiteful user's node {'NAMED' if fleet.spite in named else 'not named'}")
    for node in sorted(bad):
        kind = "black hole" if node in fleet.holes else "lemon"
        got = before[node]
        print(f"  {kind:10s} {node}: " + ("never named" if got < 0 else f"{got} failed jobs before it was named"))


def cost(args: argparse.Namespace) -> None:
    fleet = Fleet(10000, args.days, args.cost_jobs, args.lemons, args.holes, args.seed)
    jobs = fleet.generate()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sacct.txt"
        write_sacct(jobs, path)
        size = path.stat().st_size
        del jobs
        child = subprocess.run([sys.executable, "-m", "tests.bench.fleetsim", "--analyse-file", str(path),
                                "--until", str(T0 + args.days * DAY)], capture_output=True, text=True, check=True)
        got = json.loads(child.stdout)
    print(f"cost: 10000 nodes, {args.cost_jobs} jobs ({size / 2**20:.0f} MiB of sacct text): read "
          f"{got['read_s']:.1f} s + analysed {got['analyse_s']:.1f} s = {got['read_s'] + got['analyse_s']:.1f} s, "
          f"peak RSS {got['rss_mib']:.0f} MiB, {got['named']} named (target: 10 s, 1024 MiB); "
          f"{got['cpu_s']:.1f} s of CPU, load average {got['load']:.1f} on {os.cpu_count()} CPUs "
          "(a loaded host stretches the wall time, not the CPU time)")


def analyse_file(path: str, until: float) -> None:
    from healthcheck.read.sacct import read_sacct_file

    t0, c0 = time.perf_counter(), time.process_time()
    acct = read_sacct_file(path)
    t1, c1 = time.perf_counter(), time.process_time()
    named = analyse(list(acct.jobs), until)
    t2, c2 = time.perf_counter(), time.process_time()
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    print(json.dumps({"read_s": t1 - t0, "analyse_s": t2 - t1, "cpu_s": c2 - c0, "rss_mib": rss,
                      "named": len(named), "load": os.getloadavg()[0]}))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.bench.fleetsim")
    parser.add_argument("--nodes", default="1024,10000")
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--jobs", type=int, default=0, help="jobs per fleet (0: ~7 per node-day)")
    parser.add_argument("--lemons", type=int, default=8)
    parser.add_argument("--holes", type=int, default=3)
    parser.add_argument("--lemon-extra", type=float, default=0.5, help="a lemon's extra failure chance per job")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cost-jobs", type=int, default=1_000_000)
    parser.add_argument("--no-cost", action="store_true")
    parser.add_argument("--analyse-file", help=argparse.SUPPRESS)
    parser.add_argument("--until", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.analyse_file:
        analyse_file(args.analyse_file, args.until)
        return 0
    for n in (int(x) for x in args.nodes.split(",") if x):
        run_size(n, args)
    if not args.no_cost:
        cost(args)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main(sys.argv[1:]))
