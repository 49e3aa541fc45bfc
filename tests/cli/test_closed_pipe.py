"""A reader that leaves early (`gpu-healthcheck --check-config | head -3`) is quiet for every
command: no BrokenPipeError traceback, and the exit status is the one the command has with a
reader that stays (EPIPE never changes a verdict, a prolog's fate or a config's validity).

Each test runs the real CLI twice on the fake GPUs: once with stdout read to the end, once
with stdout a pipe whose reading end is already closed, so the first write gets EPIPE.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

from tests.conftest import Node

JOB = {"SLURM_JOB_ID": "41", "SLURMD_NODENAME": "gpu-x", "SLURM_JOB_GPUS": "0,1"}
XID = "[ 100.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"


def _closed_pipe(node: Node, args: Tuple[str, ...], env: Optional[Dict[str, str]]) -> Tuple[int, str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has left before the first write
    try:
        done = subprocess.run([sys.executable, "-m", "healthcheck.cli", *args], env=node.env(env),
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


def _same_status_and_quiet(node: Node, *args: str, env: Optional[Dict[str, str]] = None) -> int:
    read = node.run(*args, env=env)
    assert read.stdout, f"{args} prints nothing: the test would prove nothing"
    rc, stderr = _closed_pipe(node, args, env)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert rc == read.rc, (rc, read.rc, stderr)
    return rc


def test_closed_pipe_version(node):
    assert _same_status_and_quiet(node, "--version") == 0


def test_closed_pipe_list_checks(node):
    assert _same_status_and_quiet(node, "--list-checks") == 0
    assert _same_status_and_quiet(node, "--list-checks", "--json") == 0


def test_closed_pipe_check_config_valid_and_invalid(node):
    assert _same_status_and_quiet(node, "--check-config") == 0
    node.write_config("expected_gpus = -1\n")  # invalid: its status 1 must survive EPIPE
    assert _same_status_and_quiet(node, "--check-config") == 3


def test_closed_pipe_history(node):
    node.run("--node")  # one verdict to show
    assert _same_status_and_quiet(node, "--history") == 0
    assert _same_status_and_quiet(node, "--history", "5", "--json") == 0


def test_closed_pipe_cluster(node):
    # the node fixture's scontrol path: a stand-in printing one drained node (22.05's format)
    scontrol = node.tmp / "no-scontrol"
    scontrol.write_text("#!/bin/sh\necho 'NodeName=gpu-a State=IDLE+DRAIN Gres=gpu:8 "
                        "Reason=gpu-healthcheck: gpu2 ecc.volatile_uncorrected=3 epilog job=12 "
                        "[root@2026-11-29T19:01:02]'\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    assert _same_status_and_quiet(node, "--cluster") == 0
    assert _same_status_and_quiet(node, "--cluster", "--json") == 0


def test_closed_pipe_node_table_and_json_keep_the_verdict(node):
    node.scenario.write_text("gpus = 8\ngpu.2.ecc.volatile.uncorrected = 1\n")
    assert _same_status_and_quiet(node, "--node") == 2
    assert _same_status_and_quiet(node, "--node", "--json") == 2


def test_closed_pipe_prolog_and_epilog_json_keep_the_jobs_fate(node):
    assert _same_status_and_quiet(node, "--prolog", "--json", env=JOB) == 0
    assert _same_status_and_quiet(node, "--epilog", "--json", env=JOB) == 0


def test_closed_pipe_job_report(node):
    node.scenario.write_text("gpus = 8\ngpu.1.ecc.volatile.uncorrected = 2\n")
    env = {**JOB, "GPU_HEALTHCHECK_REPORT": "task-exit"}
    assert _same_status_and_quiet(node, "--job-report", env=env) == 2


def test_closed_pipe_ack(node):
    node.kernel_log.write_text(XID)
    node.scenario.write_text("gpus = 8\ngpu.0.pci.bus_id = 00000000:3B:00.0\n")
    rc = _same_status_and_quiet(node, "--ack")
    assert rc == 0
