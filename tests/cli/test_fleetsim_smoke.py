"""tests/bench/fleetsim.py still runs (a small fleet, no cost run): the figures themselves are
printed by the bench, never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fleetsim_bench_runs_and_prints_its_figures() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.bench.fleetsim", "--nodes", "64", "--days", "2",
                           "--lemons", "1", "--holes", "1", "--no-cost"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "precision" in done.stdout and "recall" in done.stdout
    assert "black hole" in done.stdout and "lemon" in done.stdout
