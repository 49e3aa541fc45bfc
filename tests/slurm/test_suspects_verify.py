"""What a suspect gets, on a real Slurm cluster with real accounting (slurmdbd on a MariaDB of
its own, tests/lib/slurmdbd.py) and simulated 8-GPU nodes (tests/lib/gpucluster.py): jobs of
three ordinary users (useradd) fail at once on the black hole gpu-b; `--suspects --act` names it
and drains it for verification (nothing under drain.report_only); `--repair` on gpu-b verifies it
at --level deep on its fake GPUs and resumes it; a second send waits for its cooldown; and once
its fake GPU has a fault the verification finds it, so it is not resumed.

The tests run in this order, on one cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.lib.gpucluster import GpuCluster
from tests.lib.repair import enable_repair, repair_events
from tests.lib.slurmcluster import _wait_until, requires_slurm
from tests.lib.slurmdbd import accounting_missing_reason, wait_registered
# its four ordinary users (useradd) are a module fixture: this module gets its own
from tests.slurm.test_suspects_slurm import SCRIPT, _ended_in_accounting, _submit, users  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
HOLE = "gpu-b"  # SCRIPT exits 1 there at once: what a job on a node with a lost GPU does
# small fake boards and a short load: the deep level's memory test and kernels run on the host
DEEP = "[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


@pytest.fixture(scope="module")
def cluster(users, fakegpu) -> Iterator[GpuCluster]:
    reason = accounting_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    wd = Path(tempfile.mkdtemp(prefix="hc-verify-"))
    wd.chmod(0o755)  # the users' sbatch reads slurm.conf and reaches munged's socket
    c = GpuCluster(wd, fakegpu, nodes=NODES, scripts=False, accounting=True)
    for node in NODES:
        enable_repair(c, node, extra=DEEP)
        c.scenario(node).write_text(c.scenario(node).read_text().replace("memory.total_mib = 1024",
                                                                            "memory.total_mib = 24"))
    try:
        with c.cluster:
            for path in (wd / "slurm", c.cluster.etc_dir):
                path.chmod(0o755)
            c.cluster.conf_path.chmod(0o644)
            wait_registered(c.cluster)
            jobs = []
            for _ in range(2):  # three users' jobs land on gpu-b and fail at once; the others run
                for uid in list(users.values())[:3]:
                    jobs.append(_submit(c.cluster, uid, HOLE, SCRIPT))
                    jobs.append(_submit(c.cluster, uid, "gpu-c", SCRIPT))
            _wait_until(lambda: _ended_in_accounting(c.cluster, jobs), 240, 1.0, "the jobs' ends in slurmdbd")
            yield c
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def _suspects(c: GpuCluster, tmp: Path, extra: str = "") -> "subprocess.CompletedProcess[str]":
    """`--suspects --act --json` on the admin host: its own state_dir (history: the cooldown)."""
    config = tmp / "admin.toml"
    config.write_text(f'state_dir = "{tmp / "admin"}"\nscontrol = "{c.scontrol}"\n'
                      f'[suspects]\nact = true\nsacct_timeout_s = 30.0\n{extra}')
    env = dict(c.cluster.env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "healthcheck.cli", "--suspects", "--act", "--since", "3h",
                           "--json", "--config", str(config)], capture_output=True, text=True, timeout=180, env=env)


def _drained(c: GpuCluster):
    return sorted(n for n, state in c.cluster.node_states().items() if "drain" in state)


@requires_slurm()
@pytest.mark.slurm
def test_verify_report_only_acts_on_nothing(cluster, tmp_path) -> None:
    done = _suspects(cluster, tmp_path, "[drain]\nreport_only = true\n")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert [(s["node"], s["kind"]) for s in doc["suspects"]] == [(HOLE, "black_hole")], doc["suspects"]
    assert doc["verification"] == {HOLE: "report_only"}
    assert _drained(cluster) == []


@requires_slurm()
@pytest.mark.slurm
def test_verify_a_black_hole_is_drained_for_verification_verified_at_the_deep_level_and_resumed(
        cluster, tmp_path) -> None:
    c = cluster
    done = _suspects(c, tmp_path)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["verification"] == {HOLE: "applied"}
    assert _drained(c) == [HOLE]
    reason = c.reason(HOLE)
    assert reason.startswith("gpu-healthcheck: suspect black_hole failed_fast=6 users=3 "), reason
    [line] = [json.loads(x) for x in (tmp_path / "admin" / "history.jsonl").read_text().splitlines()]
    assert line["suspects"][0]["verification"] == "applied" and line["action"]["taken"] == "drain"
    done = c.check(HOLE, "--repair", "--json", timeout=300)
    assert json.loads(done.stdout)["action"]["taken"] == "resume", done.stdout[-3000:] + done.stderr[-3000:]
    assert not c.drained(HOLE), c.reason(HOLE)
    steps = [e["message"] for e in repair_events(c, HOLE)]
    assert any("proving it with --level deep" in m for m in steps), steps
    assert any("verification at --level deep passes and it is no lemon: resumed" in m for m in steps), steps
    # its evidence is still in the window: within suspects.verify_cooldown_s it is not sent again
    again = _suspects(c, tmp_path)
    assert json.loads(again.stdout)["verification"] == {HOLE: "cooldown"}, again.stderr
    assert _drained(c) == []


@requires_slurm()
@pytest.mark.slurm
def test_verify_a_suspect_whose_gpu_has_a_fault_is_not_resumed(cluster, tmp_path) -> None:
    c = cluster
    with c.scenario(HOLE).open("a") as scenario:  # a stuck bit only the deep memory test sees
        scenario.write("gpu.5.mem.stuck_bits = 0x200043:3\n")
    done = _suspects(c, tmp_path, "verify_cooldown_s = 0\n")
    assert json.loads(done.stdout)["verification"] == {HOLE: "applied"}, done.stderr
    done = c.check(HOLE, "--repair", "--json", timeout=300)
    assert json.loads(done.stdout)["action"]["taken"] != "resume", done.stdout[-3000:]
    assert c.drained(HOLE)
    reason = c.reason(HOLE)
    assert " deep.memory=" in reason and "rma" in reason.split(), reason
    assert any("the verification found a fault" in e["message"] for e in repair_events(c, HOLE))
