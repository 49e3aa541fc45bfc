"""The repair loop's verification of a suspect, in a child process on fake GPUs: the node
pipeline (commands/node.run, as `--repair` runs it) reads 2 fake GPUs at the quick level, finds
the node drained for verification, claims the repair budget, reads them again at --level deep
(the fake libcuda runs the deep kernels), and resumes, holds a lemon, or keeps the node for the
fault the deep level found.  slurmctld is tests/lib/slurmdoor.py's in-process door (its state is
printed back); tests/slurm/test_suspects_verify.py runs the same on the real Slurm."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict

from healthcheck.act import ledger
from healthcheck.decide import repair as rd

SUSPECT = "gpu-healthcheck: suspect black_hole failed_fast=6 users=3 within=60s jobs=41,42,43"
SCENARIO = "gpus = 2\ngpu.*.memory.total_mib = 24\ngpu.*.fabric.state = not_supported\n"
CONFIG = "[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n[repair]\ncooldown_s = 0\n"
CHILD = """
import json, os, sys
from healthcheck.act.slurm import Slurm
from healthcheck.commands.node import run
from healthcheck.config import parse_config
from healthcheck.decide.verdict import NodeState
from healthcheck.model import Mode, RunRequest
from tests.lib.slurmdoor import FakeDoor

path = os.environ["GPU_HEALTHCHECK_CONFIG"]
config = parse_config(open(path).read(), path)
door = FakeDoor([NodeState("gpu-a", "IDLE+DRAIN", reason=sys.argv[1], comment="ticket 42"),
                 NodeState("gpu-b", "IDLE")])
out = run(RunRequest(mode=Mode.NODE, environ=os.environ, act=True, repair=True), config, "gpu-a",
          slurm=Slurm(config, os.environ, ctl=door, sleep=lambda s: None))
print(json.dumps({"node": door.nodes["gpu-a"]._asdict(), "action": out.report["action"],
                  "steps": [e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") for e in out.events if e.kind == "repair"],
                  "messages": [e.message for e in out.events if e.kind == "repair"],
                  "findings": [f["check"] for f in out.report["findings"] if f["severity"] == "fail"],
                  "reservations": sorted(door.reservations)}))
"""


def _repair(node, reason: str = SUSPECT, extra: str = "", faults: str = "") -> Dict[str, Any]:
    node.write_config(CONFIG + extra)
    node.scenario.write_text(SCENARIO + faults)
    done = subprocess.run([sys.executable, "-c", CHILD, reason], env=node.env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_healthy_suspect_is_verified_at_the_deep_level_and_resumed_its_comment_kept(node):
    doc = _repair(node)
    assert doc["node"]["state"] == "IDLE" and doc["action"]["taken"] == "resume", doc
    assert doc["steps"][-3:] == ["claimed", "verifying", "verified"], doc["steps"]
    assert any("--level deep" in m for m in doc["messages"]), doc["messages"]
    # the claim is gone from the Comment, the site's part stays; the budget's slot is released
    assert doc["node"]["comment"] == "ticket 42" and doc["reservations"] == []


def test_a_suspect_with_five_repairs_in_seven_days_passes_and_is_held_as_a_lemon(node):
    now = time.time()
    for day in range(5):
        ledger.append_attempt(str(node.state_dir), rd.node_ledger("gpu-a"), rd.Attempt(
            at=now - (day + 1) * 86400, action="reboot", trigger="xid=79", outcome="resumed", node="gpu-a", gpu=-1))
    doc = _repair(node)
    reason = doc["node"]["reason"]
    assert reason.startswith("gpu-healthcheck: lemon remediations=5/7d suspect=black_hole failed_fast=6"), doc
    assert "DRAIN" in doc["node"]["state"] and doc["steps"][-1] == "lemon", doc["steps"]
    assert doc["node"]["comment"] == "ticket 42"


def test_a_fault_the_deep_level_finds_keeps_the_suspect_drained_for_it(node):
    doc = _repair(node, faults="gpu.1.mem.stuck_bits = 0x200043:3\n")
    assert "deep.memory" in doc["findings"], doc
    assert "DRAIN" in doc["node"]["state"] and doc["action"]["taken"] != "resume", doc
    assert " deep.memory=" in doc["node"]["reason"], doc["node"]["reason"]
    assert doc["steps"][-1] == "suspect_fault", doc["steps"]


def test_report_only_verifies_nothing(node):
    doc = _repair(node, extra="[drain]\nreport_only = true\n")
    assert doc["node"]["reason"] == SUSPECT and "DRAIN" in doc["node"]["state"]
    assert doc["steps"] == ["would_verify"] and doc["node"]["comment"] == "ticket 42", doc


def test_with_fabric_retest_a_verified_suspect_waits_for_the_fabric_sweeps_re_test(node):
    doc = _repair(node, extra="[suspects]\ninternode_retest = true\n")
    assert doc["node"]["reason"] == "gpu-healthcheck: fabric suspect=black_hole partners=- verification", doc
    assert "DRAIN" in doc["node"]["state"] and doc["steps"][-1] == "fabric_retest", doc["steps"]
    assert doc["node"]["comment"].startswith("ticket 42 | gpu-healthcheck: repair fabric_retest at="), doc
    assert doc["reservations"] == []
