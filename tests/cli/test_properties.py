"""tests/fuzz/run itself, for 2 s per target, so the fuzz harness cannot rot; and a host that
stalls the fuzzer is not a finding (libFuzzer times inputs by the wall clock)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.lib.fakenode import ROOT

FUZZ_RUN = ROOT / "tests" / "fuzz" / "run"


def _run_module():
    loader = importlib.machinery.SourceFileLoader("fuzz_run", str(FUZZ_RUN))
    spec = importlib.util.spec_from_loader("fuzz_run", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_fuzz_harness_runs_every_target_clean():
    """tests/fuzz/run, 1 s per target: every target starts, runs its seeds and finds nothing
    (.ci/run fuzzes each for 10 s; `FUZZ_SECONDS=60 tests/fuzz/run` fuzzes for longer)."""
    pytest.importorskip("atheris")  # CI installs it (.ci/run)
    env = dict(os.environ, FUZZ_SECONDS="1")
    proc = subprocess.run([sys.executable, str(FUZZ_RUN)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = [line for line in proc.stdout.splitlines() if line.startswith("fuzz ")]
    targets = sorted(p.stem[len("fuzz_"):] for p in FUZZ_RUN.parent.glob("fuzz_*.py"))
    assert sorted(line.split()[1] for line in summary) == targets, proc.stdout  # every target ran
    assert all(line.endswith(" ok") for line in summary), proc.stdout


def test_a_slow_unit_is_a_note_and_a_crash_or_leak_a_finding():
    """libFuzzer's own words: a slow unit (the 12 s host stall that failed CI) passes with a
    note; an exception, a leak or a non-zero exit without a known marker is a finding."""
    judge = _run_module().judge
    slow = "#4096\tpulse  cov: 812 ft: 1903 corp: 96/2113b\nSlowest unit: 12 s:\nartifact_prefix='w/'; Test unit written to w/slow-unit-3f2a\n"
    assert judge(slow, 0, ["slow-unit-3f2a"]) == (None, [
        "note: slow unit (12 s by the wall clock; a host stall or a slow input, not a finding)"])
    assert judge(slow + " === Uncaught Python exception: ===\n", 1, ["crash-1"])[0] == "exception"
    assert judge("==7==ERROR: LeakSanitizer: detected memory leaks\n", 1, ["leak-9"])[0] == "leak"
    assert judge("==7== ERROR: libFuzzer: timeout after 3 seconds\n", 70, ["timeout-5"])[0] == "timeout"
    assert judge("", 0, ["crash-1"])[0] == "rc=0"
    assert judge("", -9, [])[0] == "rc=-9"


def _fuzzing_target(run: subprocess.Popen, name: str, deadline: float) -> psutil.Process:
    """The target process once libFuzzer is past its seeds and mutating."""
    while time.monotonic() < deadline:
        for child in psutil.Process(run.pid).children(recursive=True):
            try:
                if any(arg.endswith(f"fuzz_{name}.py") for arg in child.cmdline()):
                    log = Path(child.cwd()) / name / "log"
                    if log.exists() and "INITED" in log.read_text(errors="replace"):
                        return child
            except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
                continue
        assert run.poll() is None, "tests/fuzz/run ended before its target started fuzzing"
        time.sleep(0.1)
    raise AssertionError(f"fuzz_{name}.py did not start fuzzing in time")


def test_a_host_stall_while_fuzzing_is_reported_not_a_finding():
    """The fuzzer stopped (SIGSTOP) for 3 s, twice, as a loaded host stalls it: an input it was
    running outlasts -timeout=2 by the wall clock.  The input, run again, does not hang, so the
    run passes, and says so."""
    pytest.importorskip("atheris")
    env = dict(os.environ, FUZZ_SECONDS="20")
    run = subprocess.Popen([sys.executable, str(FUZZ_RUN), "kernlog"], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        target = _fuzzing_target(run, "kernlog", time.monotonic() + 300)
        for _ in range(2):
            try:
                target.suspend()
                time.sleep(3)  # the stall itself, not a wait for a condition
                target.resume()
            except psutil.NoSuchProcess:
                break  # libFuzzer stopped at the first stall's timeout
            time.sleep(0.5)
        out, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, out
    [summary] = [line for line in out.splitlines() if line.startswith("fuzz ")]
    assert summary.split()[1] == "kernlog" and summary.endswith(" ok"), out
