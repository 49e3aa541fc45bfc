"""Benchmark: ORNL Titan's six-year GPU failure history through `--replay-failures`.

    python3 -m tests.bench.titanreplay GC_FULL_CSV [--keep EVENTS_CSV]

GC_FULL_CSV is `data/gc_full.csv` of github.com/olcf/TitanGPULife (the data of Ostrouchov et
al., "GPU Lifetimes on Titan Supercomputer: Survival Analysis and Reliability", SC '20): one row
per stay of a GPU serial at a node location (`SN,location,insert,remove,duration,out,event`),
where `event` is DBE (a double-bit ECC error) or OTB (off the bus) when the stay ended in a
failure.  The repository carries no licence, only a request to cite the paper, so the data is
not copied into this project: fetch it and pass its path.

Each failed stay becomes one `time,node,serial,kind` event (time = `remove`, kind `dbe` or
`otb`), and the installed CLI's `--replay-failures --json` runs over them.  Prints the events,
the replay's table and its wall time.  Nothing is asserted: the figures go in docs/suspects.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

from .harness import ROOT

KINDS = {"DBE": "dbe", "OTB": "otb"}


def titan_events(gc_full: Path) -> List[Tuple[str, str, str, str]]:
    """The failed stays of gc_full.csv as replay events, in time order."""
    events = []
    with gc_full.open(newline="") as handle:
        for row in csv.DictReader(handle):
            kind = KINDS.get(row.get("event") or "")
            if kind is None:
                continue
            stamp = row["remove"].replace(" ", "T") + "Z"
            events.append((stamp, row["location"], row["SN"], kind))
    events.sort()
    return events


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gc_full", type=Path, help="data/gc_full.csv of olcf/TitanGPULife")
    parser.add_argument("--keep", type=Path, help="also write the events CSV here")
    args = parser.parse_args(argv)
    events = titan_events(args.gc_full)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "titan-events.csv"
        with path.open("w") as out:
            out.write("time,node,serial,kind\n")
            out.writelines(",".join(event) + "\n" for event in events)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from healthcheck.cli import entry; sys.exit(entry())",
             "--replay-failures", str(path), "--json"],
            capture_output=True, text=True, cwd=ROOT, check=False)
        wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        return done.returncode
    result = json.loads(done.stdout)
    print(f"{result['events']} events ({sum(e[3] == 'dbe' for e in events)} dbe, "
          f"{sum(e[3] == 'otb' for e in events)} otb) from {args.gc_full}; replay {wall:.2f} s")
    print(f"{'rule':<14}{'default':<9}{'flags':>7}{'hits':>7}{'precision':>11}{'recall':>8}"
          f"{'node-days':>11}")
    for rule in result["rules"] + [dict(result["naive"], name="naive", default=False)]:
        precision = "-" if rule["precision"] is None else f"{rule['precision']:.2f}"
        print(f"{rule['name']:<14}{'yes' if rule['default'] else 'no':<9}{rule['flags']:>7}"
              f"{rule['hits']:>7}{precision:>11}{rule['recall']:>8.3f}"
              f"{rule['suspect_node_days']:>11.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
