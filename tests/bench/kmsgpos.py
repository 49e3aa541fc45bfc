"""Benchmark: what the prolog's kernel-log position costs on /dev/kmsg (issue 22 item 9).

    python3 -m tests.bench.kmsgpos [--reps 20] [--real-kmsg]

Rows, each the median of REPS in-process calls (microseconds), with the buffer's record count:
- "clocks": CLOCK_MONOTONIC and the wall clock alone (the position before item 9);
- "scan": read every record for the last seq (`kernel_log_marker = false`; read-only);
- "marker": seek to the end, write one marker record, read it back (the default).  It WRITES
  REPS records into this machine's kernel log, so it runs only with --real-kmsg.
Per-record cost of the scan = scan time / records: a node's 1-4 MiB buffer holds 5,000-30,000
records.  Not a pytest test: nothing asserts on a figure.  Run outside the test session (which
hides /dev/kmsg), as root for the marker row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List

DEVICE = "/dev/kmsg"


def _median_us(call: Callable[[], object], reps: int) -> float:
    call()  # warm-up: imports, page cache
    times: List[float] = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.bench.kmsgpos")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--real-kmsg", action="store_true",
                        help="also time the marker (writes REPS+1 records into the kernel log)")
    args = parser.parse_args(argv)
    from healthcheck.read.kmsg import position_and_why, read_records

    records = sum(1 for _ in read_records(DEVICE))
    rows: Dict[str, float] = {
        "clocks": _median_us(lambda: (time.monotonic(), time.time()), args.reps),
        "scan": _median_us(lambda: position_and_why(DEVICE, marker=False), args.reps),
    }
    if args.real_kmsg:
        found = []
        rows["marker"] = _median_us(lambda: found.append(position_and_why(DEVICE, True, "bench")[0].method),
                                    args.reps)
        rows["marker_found"] = sum(1 for m in found if m == "marker") / len(found)
    result = {"records": records, "us": {k: round(v, 1) for k, v in rows.items()},
              "scan_us_per_record": round(rows["scan"] / max(records, 1), 3)}
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
