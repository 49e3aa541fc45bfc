"""Benchmark: a kernel log flooded with Xid 31 (a page fault any user's program can cause).

    python3 -m tests.bench.xidflood [--lines 200000] [--repo CHECKOUT] [--reps 3]

Writes LINES `NVRM: Xid ... 31` lines (spread over 8 GPUs) into a temp node's kernel_log and
runs the whole CLI `--node --json` on the fake GPUs.  Prints wall time (median), peak RSS of
the main process (VmHWM), the JSON report's size, its Xid findings, and the log events the run
would send to the journal (one per finding in --node mode, plus the summary).  --repo measures
another checkout (e.g. `git archive <old commit> | tar -x -C DIR`) for a before/after.
Not a pytest test: nothing asserts on a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import List, Optional

from .harness import ROOT, SimNode

LINE = ("[{t:.6f}] NVRM: Xid (PCI:0000:{bus:02x}:00): 31, pid={pid}, name=a.out, Ch 00000008, "
        "intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n")


def write_flood(path: Path, lines: int) -> None:
    with path.open("w") as handle:
        for i in range(lines):
            # the fake's GPU i sits at bus 0x18 + 0x10 * i (tests/fakegpu/README.md)
            handle.write(LINE.format(t=100 + i / 1000, bus=0x18 + 0x10 * (i % 8), pid=1000 + i))


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repo", type=Path, default=ROOT, help="checkout to measure (default: this one)")
    args = ap.parse_args(argv)
    node = SimNode()
    try:
        write_flood(node.kernel_log, args.lines)
        env = node.env()
        env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(ROOT), str(args.repo.resolve()))
        samples = [node.run([sys.executable, "-m", "healthcheck.cli", "--node", "--json"], env,
                            cwd=args.repo) for _ in range(args.reps)]
        last = samples[-1]
        report = json.loads(last.stdout)
        xids = [f for f in report["findings"] if f["check"] == "xid"]
        rss = [s.rss_main_kib or s.rss_tree_kib for s in samples]
        print(f"xid flood: {args.lines} lines, {node.kernel_log.stat().st_size / 1e6:.1f} MB kernel log, "
              f"checkout {args.repo}")
        print(f"  wall s (median of {args.reps}): {statistics.median(s.wall_s for s in samples):.2f}")
        print(f"  peak RSS MiB:                 {max(rss) / 1024:.1f}")
        print(f"  JSON report bytes:            {len(last.stdout.encode())}")
        print(f"  Xid findings:                 {len(xids)}")
        print(f"  journal entries (--node):     {len(report['findings']) + 1}")
        print(f"  exit status:                  {sorted({s.rc for s in samples})}")
    finally:
        node.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
