"""tests/fuzz/run itself, for 2 s per target, so the fuzz harness cannot rot."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.lib.fakenode import ROOT

FUZZ_RUN = ROOT / "tests" / "fuzz" / "run"


def test_fuzz_harness_runs_every_target_clean():
    """tests/fuzz/run, 2 s per target: every target starts, runs its seeds and finds nothing."""
    pytest.importorskip("atheris")  # CI installs it (.ci/run)
    env = dict(os.environ, FUZZ_SECONDS="2")
    proc = subprocess.run([sys.executable, str(FUZZ_RUN)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = [line for line in proc.stdout.splitlines() if line.startswith("fuzz ")]
    targets = sorted(p.stem[len("fuzz_"):] for p in FUZZ_RUN.parent.glob("fuzz_*.py"))
    assert sorted(line.split()[1] for line in summary) == targets, proc.stdout  # every target ran
    assert all(line.endswith(" ok") for line in summary), proc.stdout
