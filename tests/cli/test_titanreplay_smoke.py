"""tests/bench/titanreplay.py turns Titan's gc_full.csv layout into replay events and runs the
real CLI over them.  The file here is written by the test in that layout (Titan's data carries
no licence and is not in the tree): a serial that fails twice at one node within a week makes
the default rules flag, and the stays that did not fail are no events."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_titan_layout_becomes_events_and_the_replay_table_is_printed(tmp_path: Path) -> None:
    rows = ["SN,location,insert,remove,duration,out,event"]
    # One serial fails five times in five days at c1-0c0s0n0: the lemon rule's default (5 in 7 d).
    for day in range(1, 6):
        rows.append(f"0320117100219,c1-0c0s0n0,2017-04-0{day} 00:00:00,2017-04-0{day} 12:00:00,43200,FALSE,"
                    f"{'DBE' if day % 2 else 'OTB'}")
    rows.append("0320117100219,c1-0c0s0n0,2017-04-07 00:00:00,2017-04-07 12:00:00,43200,TRUE,DBE")
    rows.append("0320117100060,c11-2c1s4n1,2017-04-09 21:36:19,2019-08-01 20:07:33,72916274,FALSE,")
    gc_full = tmp_path / "gc_full.csv"
    gc_full.write_text("\n".join(rows) + "\n")
    events = tmp_path / "events.csv"
    done = subprocess.run([sys.executable, "-m", "tests.bench.titanreplay", str(gc_full), "--keep", str(events)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("6 events (4 dbe, 2 otb)"), done.stdout
    lines = events.read_text().splitlines()
    assert lines[0] == "time,node,serial,kind"
    assert lines[1] == "2017-04-01T12:00:00Z,c1-0c0s0n0,0320117100219,dbe"
    lemon = next(line.split() for line in done.stdout.splitlines() if line.startswith("lemon "))
    assert lemon[1] == "yes" and int(lemon[2]) == 1 and int(lemon[3]) == 1, done.stdout
