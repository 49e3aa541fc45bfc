"""deploy/slurm/gpu-healthcheck-sweep (what gpu-healthcheck-sweep.timer runs) with --internode, the
shipped script itself in a child process, with stand-ins for the programs it calls: scontrol
(real `scontrol -o show nodes` lines of Slurm 22.05, tests/fixtures/scontrol-show-nodes, with
gpu-a and gpu-c idle), squeue, sbatch, and a gpu-healthcheck whose --internode-sweep drains gpu-c
(as the real one does, through what scontrol shows next) and exits as it is told.  Every call
is logged in order, so the tests see that the internode sweep ends before the deep part asks
Slurm anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.lib.fakenode import ROOT

SCRIPT = ROOT / "deploy" / "slurm" / "gpu-healthcheck-sweep"
SHOW_NODES = ROOT / "tests" / "fixtures" / "scontrol-show-nodes" / "slurm-22.05.txt"

SCONTROL = """#!{python}
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
open(os.path.join(here, "calls.log"), "a").write("scontrol " + " ".join(sys.argv[1:]) + "\\n")
for line in open({fixture!r}).read().splitlines():
    if line.startswith("NodeName=gpu-a "):
        line = line.replace("State=IDLE+DRAIN ", "State=IDLE ")  # gpu-a idle too
    if line.startswith("NodeName=gpu-c ") and os.path.exists(os.path.join(here, "drained-gpu-c")):
        line = line.replace("State=IDLE ", "State=IDLE+DRAIN ")
    print(line)
"""
LOGGED = """#!/bin/sh
echo "{name} $*" >> "{bin}/calls.log"
{body}
"""
# --internode-sweep: drains gpu-c and exits with the status in $BIN/fabric-status; with
# $BIN/fabric-hangs it runs until SIGTERM, which it logs (the real one cancels its jobs there)
HEALTHCHECK = """
trap 'echo "gpu-healthcheck SIGTERM" >> "{bin}/calls.log"; exit 3' TERM
if [ -e "{bin}/fabric-hangs" ]; then while :; do sleep 0.1; done; fi
touch "{bin}/drained-gpu-c"
echo "NODE   OUTCOME  BUSBW"
echo "gpu-c  bad      41.2"
exit "$(cat "{bin}/fabric-status")"
"""


def stand_ins(tmp_path: Path, fabric_status: int = 2) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL.format(python=sys.executable, fixture=str(SHOW_NODES)))
    (bin_dir / "squeue").write_text(LOGGED.format(name="squeue", bin=bin_dir, body="exit 0"))
    (bin_dir / "sbatch").write_text(LOGGED.format(name="sbatch", bin=bin_dir,
                                                  body='echo "Submitted batch job 7"'))
    (bin_dir / "gpu-healthcheck").write_text(LOGGED.format(name="gpu-healthcheck", bin=bin_dir,
                                                           body=HEALTHCHECK.format(bin=bin_dir)))
    for f in ("scontrol", "squeue", "sbatch", "gpu-healthcheck"):
        (bin_dir / f).chmod(0o755)
    (bin_dir / "fabric-status").write_text(f"{fabric_status}\n")
    return bin_dir


def sweep(bin_dir: Path, *args: str, exe: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--partition", "gpu", "--scontrol", str(bin_dir / "scontrol"),
                           "--squeue", str(bin_dir / "squeue"), "--sbatch", str(bin_dir / "sbatch"),
                           "--exec", exe or str(bin_dir / "gpu-healthcheck"), *args],
                          capture_output=True, text=True, timeout=120,
                          # the script runs commands/idlesweep.py of this checkout's package
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def calls(bin_dir: Path) -> List[str]:
    log = bin_dir / "calls.log"
    return [line.split()[0] + (" " + line.split()[1] if line.split()[0] == "gpu-healthcheck" else "")
            for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("status,words", [
    (0, "internode sweep: exit 0: no bad node"),
    (2, "internode sweep: exit 2: bad node(s) found, drained"),
    (3, "internode sweep: exit 3: could not run (its message above says why); nothing drained"),
])
def test_sweep_timer_fabric_first_then_the_deep_jobs_on_what_is_still_idle(tmp_path: Path, status: int,
                                                                           words: str) -> None:
    bin_dir = stand_ins(tmp_path, status)
    done = sweep(bin_dir, "--internode")
    assert done.returncode == 0, done.stdout + done.stderr  # 2 and 3 are outcomes, not errors of the timer
    assert words in done.stdout
    log = (bin_dir / "calls.log").read_text().splitlines()
    assert log[0] == "gpu-healthcheck --internode-sweep --act --partition gpu"
    # the internode sweep ended before the deep part asked Slurm anything
    assert calls(bin_dir) == ["gpu-healthcheck --internode-sweep", "scontrol", "squeue", "sbatch"]
    # its table came out before our line about it, and gpu-c, which it drained, got no deep job
    assert done.stdout.index("gpu-c  bad      41.2") < done.stdout.index(words)
    [submitted] = [line for line in log if line.startswith("sbatch ")]
    assert " -w gpu-a " in submitted and "--level deep" in submitted
    assert "gpu-a: Submitted batch job 7" in done.stdout


def test_sweep_timer_without_fabric_runs_no_fabric_sweep(tmp_path: Path) -> None:
    bin_dir = stand_ins(tmp_path)
    done = sweep(bin_dir)
    assert done.returncode == 0, done.stderr
    assert calls(bin_dir) == ["scontrol", "squeue", "sbatch", "sbatch"]  # gpu-a and gpu-c, nothing drained
    assert "internode" not in done.stdout


def test_sweep_timer_fabric_crash_is_an_error_but_the_deep_part_still_runs(tmp_path: Path) -> None:
    bin_dir = stand_ins(tmp_path, fabric_status=1)
    done = sweep(bin_dir, "--internode")
    assert done.returncode == 1
    assert "internode sweep: exit 1: not one of its statuses (0, 2, 3)" in done.stderr
    assert calls(bin_dir)[-1] == "sbatch" and "gpu-a: Submitted batch job 7" in done.stdout


def test_sweep_timer_fabric_past_its_deadline_is_stopped_and_the_deep_part_runs(tmp_path: Path) -> None:
    bin_dir = stand_ins(tmp_path)
    (bin_dir / "fabric-hangs").write_text("")
    done = sweep(bin_dir, "--internode", "--internode-timeout", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "internode sweep: passed its deadline of 1 s and was stopped (SIGTERM" in done.stderr
    assert calls(bin_dir) == ["gpu-healthcheck --internode-sweep", "gpu-healthcheck SIGTERM", "scontrol", "squeue",
                              "sbatch", "sbatch"]  # it drained nothing: both nodes get their deep job


def test_sweep_timer_fabric_program_missing_is_named_and_the_deep_part_runs(tmp_path: Path) -> None:
    bin_dir = stand_ins(tmp_path)
    done = sweep(bin_dir, "--internode", exe=str(tmp_path / "nowhere" / "gpu-healthcheck"))
    assert done.returncode == 1
    assert f"internode sweep: cannot run {tmp_path / 'nowhere' / 'gpu-healthcheck'}: No such file" in done.stderr
    assert calls(bin_dir) == ["scontrol", "squeue", "sbatch", "sbatch"]


def test_sweep_timer_dry_run_prints_the_fabric_sweep_and_runs_nothing(tmp_path: Path) -> None:
    bin_dir = stand_ins(tmp_path)
    done = sweep(bin_dir, "--internode", "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{bin_dir / 'gpu-healthcheck'} --internode-sweep --act --partition gpu"
    assert [line.split(" -w ")[1].split()[0] for line in lines[1:]] == ["gpu-a", "gpu-c"]
    assert calls(bin_dir) == ["scontrol", "squeue"]


OLD_OPTION_NOTES = ["gpu-healthcheck-sweep: --fabric is deprecated, use --internode (the same option)",
                    "gpu-healthcheck-sweep: --fabric-timeout is deprecated, use --internode-timeout (the same option)"]


@pytest.mark.parametrize("hangs", [False, True])
def test_sweep_timer_old_options_run_the_same_sweep_and_say_so_on_stderr(tmp_path: Path, hangs: bool) -> None:
    """--fabric and --fabric-timeout: the old names of --internode and --internode-timeout."""
    runs = {}
    for name, options in (("new", ["--internode", "--internode-timeout", "1"]),
                          ("old", ["--fabric", "--fabric-timeout", "1"])):
        (tmp_path / name).mkdir()
        bin_dir = stand_ins(tmp_path / name)
        if hangs:
            (bin_dir / "fabric-hangs").write_text("")
        runs[name] = (sweep(bin_dir, *options), calls(bin_dir))
    (new, new_calls), (old, old_calls) = runs["new"], runs["old"]
    assert (old.returncode, old.stdout.replace("/old/", "/new/"), old_calls) == (new.returncode, new.stdout, new_calls)
    assert old.stderr.splitlines()[:2] == OLD_OPTION_NOTES, old.stderr
    assert old.stderr.splitlines()[2:] == new.stderr.splitlines() and "deprecated" not in new.stderr
