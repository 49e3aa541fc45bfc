"""--suspects on a real Slurm cluster with real accounting: slurmdbd on a MariaDB of its own
(tests/lib/slurmdbd.py), jobs of ordinary users made with useradd (as tests/slurm/test_trust.py).

The broken node is a node on which every job fails at once (its script exits 1 there: what a
job on a node with a lost GPU does); the spiteful user pins failing jobs to a healthy node.
The tests run in this order: the last one stops slurmdbd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from tests.lib.slurmcluster import SlurmCluster, _wait_until, requires_slurm
from tests.lib.slurmdbd import accounting_missing_reason, stop_slurmdbd, wait_registered

ROOT = Path(__file__).resolve().parents[2]
NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "gpu-f", "gpu-g", "gpu-h", "gpu-i", "gpu-j"]
EIGHT = [n for n in NODES if n not in ("gpu-b", "gpu-d")]  # the lemon test's nodes
LEMON = "gpu-f"
# Each job lives 2 s at least: a job that ends within a second of its start can reach slurmdbd
# (22.05) before its start record, as a bare "allocation" of uid 0 with no eligible time.
SCRIPT = '#!/bin/sh\nsleep 2\n[ "$SLURMD_NODENAME" = gpu-b ] && exit 1\nsleep 1\n'
SPITE = "#!/bin/sh\nsleep 2\nexit 1\n"


@pytest.fixture(scope="module")
def users(isolation) -> Iterator[Dict[str, int]]:
    """Four real unprivileged accounts (the session's /etc is private: tests/lib/hermetic.py)."""
    names = [f"hc37{uuid.uuid4().hex[:6]}{i}" for i in range(4)]
    made: Dict[str, int] = {}
    try:
        for name in names:
            subprocess.run(["useradd", "-l", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
            with open("/etc/passwd") as handle:
                [entry] = [line.split(":") for line in handle if line.startswith(name + ":")]
            made[name] = int(entry[2])
        yield made
    finally:
        for name in names:
            subprocess.run(["userdel", name], check=False)


@pytest.fixture(scope="module")
def cluster(users) -> Iterator[SlurmCluster]:
    reason = accounting_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    wd = Path(tempfile.mkdtemp(prefix="hc-suspects-"))
    wd.chmod(0o755)  # the users' sbatch reads slurm.conf and reaches munged's socket
    c = SlurmCluster(wd, nodes=NODES, gpus_per_node=1, cpus_per_node=4, accounting=True)
    try:
        with c:
            (wd / "etc").chmod(0o755)
            c.conf_path.chmod(0o644)
            wait_registered(c)
            yield c
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def _submit(c: SlurmCluster, uid: int, node: str, script: str) -> str:
    nodes = node.split(",")
    done = subprocess.run(["sbatch", "--parsable", "-w", node, "-N", str(len(nodes)), "-n", str(len(nodes)),
                           "--chdir=/tmp", "--output=/dev/null",
                           "--wrap", script.split("\n", 1)[1].replace("\n", "; ").rstrip("; ")],
                          user=uid, group=uid, extra_groups=[], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "SLURM_CONF": str(c.conf_path)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _ended_in_accounting(c: SlurmCluster, jobs: List[str]) -> bool:
    out = c.run(["sacct", "-a", "-X", "-n", "-P", "-j", ",".join(jobs), "--format=JobIDRaw,State,End"]).stdout
    ended = {line.split("|")[0] for line in out.splitlines() if line.count("|") == 2
             and line.split("|")[2] not in ("Unknown", "")}
    return set(jobs) <= ended


def _suspects(c: SlurmCluster, tmp: Path, extra: str = "") -> "subprocess.CompletedProcess[str]":
    config = tmp / "config.toml"
    config.write_text(f'state_dir = "{tmp / "state"}"\n[suspects]\nsacct_timeout_s = 30.0\n{extra}')
    env = dict(c.env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "healthcheck.cli", "--suspects", "--since", "3h", "--json",
                           "--config", str(config)], capture_output=True, text=True, timeout=120, env=env)


@requires_slurm()
@pytest.mark.slurm
def test_suspects_a_black_hole_is_named_after_a_few_failures_and_a_spiteful_user_names_nothing(
        cluster, users, tmp_path) -> None:
    uids = list(users.values())
    jobs = []
    for round_ in range(2):  # three users' jobs land on gpu-b and fail at once; the others run
        for uid in uids[:3]:
            jobs.append(_submit(cluster, uid, "gpu-b", SCRIPT))
            jobs.append(_submit(cluster, uid, NODES[2 * (round_ % 2)], SCRIPT))
    for _ in range(8):  # one user pins failing jobs to the healthy gpu-d
        jobs.append(_submit(cluster, uids[3], "gpu-d", SPITE))
    _wait_until(lambda: _ended_in_accounting(cluster, jobs), 240, 1.0, "the jobs' ends in slurmdbd")
    done = _suspects(cluster, tmp_path)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["accounting"]["unknown"] is None and doc["accounting"]["jobs"] >= len(jobs)
    assert [(s["node"], s["kind"]) for s in doc["suspects"]] == [("gpu-b", "black_hole")], doc["suspects"]
    evidence = doc["suspects"][0]["evidence"]
    assert evidence["failed_fast"] == 6 and evidence["users"] == 3
    assert not [n for n, state in cluster.node_states().items() if "drain" in state]


@requires_slurm()
@pytest.mark.slurm
def test_suspects_a_lemon_among_eight_nodes_is_found_from_2_and_4_node_jobs_without_its_partners(
        cluster, users, tmp_path) -> None:
    """Jobs of 2 and 4 nodes on sets drawn from eight nodes, by three users: a job with the lemon
    in it fails 4 times in 5, any other 1 in 8 (the users' own failures).  The jobs come seconds
    apart, so each is its own trial here (incident_gap_s = 1; a site's hour would make each
    user's jobs on a node one burst)."""
    import random

    rng = random.Random(37)
    uids = list(users.values())[:3]
    jobs = []
    for i in range(64):
        where = sorted(rng.sample(EIGHT, rng.choice((2, 4))))
        fails = rng.random() < (0.8 if LEMON in where else 0.125)
        jobs.append(_submit(cluster, uids[i % 3], ",".join(where), "#!/bin/sh\nsleep 2\n" + ("exit 1" if fails else "true")))
    _wait_until(lambda: _ended_in_accounting(cluster, jobs), 480, 1.0, "the jobs' ends in slurmdbd")
    # and a job is "fast" below 1 s: these all live 2 s, so the lemon is judged as a lemon (with
    # the default 60 s its jobs that fail within seconds would name it a black hole first)
    done = _suspects(cluster, tmp_path, "incident_gap_s = 1.0\nblack_hole_s = 1.0\n")
    doc = json.loads(done.stdout)
    lemons = [s["node"] for s in doc["suspects"] if s["kind"] == "lemon"]
    assert lemons == [LEMON], doc["suspects"]
    evidence = [s for s in doc["suspects"] if s["kind"] == "lemon"][0]["evidence"]
    assert evidence["users_in_excess"] >= 2 and evidence["p_value"] < 0.001
    assert not [n for n, state in cluster.node_states().items() if "drain" in state]


@requires_slurm()
@pytest.mark.slurm
def test_suspects_accounting_down_is_unknown_and_nothing_is_drained(cluster, tmp_path) -> None:
    stop_slurmdbd(cluster)
    started = time.monotonic()
    done = _suspects(cluster, tmp_path)
    assert done.returncode == 3, (done.stdout, done.stderr)
    doc = json.loads(done.stdout)
    assert doc["suspects"] == [] and doc["accounting"]["unknown"].startswith("accounting unknown: ")
    assert "no node is named" in done.stderr
    assert time.monotonic() - started < 100  # the deadline held
    assert not [n for n, state in cluster.node_states().items() if "drain" in state]
