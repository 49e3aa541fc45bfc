"""The repair budget's claim on the real test Slurm: a run killed mid-reset holds the budget only
until its claim's own expiry, and counts its attempt; a hung nvidia-smi cannot keep the run past
slurmd's kill; a ledger that cannot be written refuses the reset; a claim slurmctld applies late
cannot let two nodes reset at once; a node resumed (and given a job) right after the claim is
left alone; the site's text in the node's Comment stays."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from healthcheck.decide.repair import parse_mark, stamp_epoch
from tests.lib.gpucluster import pci
from tests.lib.repair import (WAIT_FOR_GO, comment, drain_with_dbe, enable_repair, hooked_scontrol,
                              ledger_file, repair_events, wait_for, was_reset)

pytestmark = pytest.mark.slurm

HANGING = re.compile(r"# fakegpu nvidia-smi (.+) hanging for \S+ s \(pid (\d+)\)")


def hung_smi(c, node):
    """The pids of the fake nvidia-smi calls hanging on `node` (each noted in its scenario)."""
    return [int(m.group(2)) for m in HANGING.finditer(c.scenario(node).read_text())]


def end(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def ledger(c, node, gpu=2):
    path = ledger_file(c, node, gpu)
    return json.loads(path.read_text())["attempts"] if path.exists() else []


def test_a_repair_killed_mid_reset_counts_and_holds_the_budget_only_until_its_claim_expires(repair_cluster):
    c = repair_cluster
    enable_repair(c, "gpu-a", top="act_budget_s = 20\n")
    drain_with_dbe(c, "gpu-a")
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("nvidia_smi.reset_hang_s = 3600\n")
    # slurmd's HealthCheckProgram limit: the run's process group gets SIGKILL mid-reset
    run = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--node", "--act"],
                           env=c.check_env("gpu-a"), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: hung_smi(c, "gpu-a"), "the reset to hang")
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        end(hung_smi(c, "gpu-a"))
    # the attempt counts: the ledger had it before the reset began
    [attempt] = ledger(c, "gpu-a")
    assert (attempt["action"], attempt["outcome"], attempt["gpu"]) == ("reset", "started", 2), attempt
    mark = parse_mark(comment(c, "gpu-a"))
    assert mark and mark["state"] == "resetting" and not mark["asking"] and mark["until"], comment(c, "gpu-a")
    until = stamp_epoch(mark["until"], utc=True)
    assert until is not None

    # gpu-b waits while the claim may still stand, then repairs once it has expired
    drain_with_dbe(c, "gpu-b")
    if time.time() < until:
        c.check("gpu-b", "--repair")
        assert not was_reset(c, "gpu-b")
        assert any("repair budget spent: gpu-a" in e["message"] for e in repair_events(c, "gpu-b"))
    wait_for(lambda: time.time() > until + 1, "gpu-a's claim to expire", timeout=120)
    rows = {r["node"]: r for r in json.loads(c.check("gpu-a", "--cluster", "--json").stdout)}
    assert rows["gpu-a"]["repair"] == "drained", rows["gpu-a"]  # no longer "resetting"
    done = c.check("gpu-b", "--repair")
    assert was_reset(c, "gpu-b"), done.stdout + done.stderr
    assert not c.drained("gpu-b")

    # gpu-a's own next run clears its stale claim and counts the killed reset as an attempt.  Its
    # budget is one no host's probe reaches: a probe cut short by a loaded host would leave the
    # reset unvalidated (trust.md), an outcome of the host's speed, not of the claim
    c.scenario("gpu-a").write_text(c.scenario("gpu-a").read_text().replace("nvidia_smi.reset_hang_s = 3600", ""))
    config = c.wd / "config" / "gpu-a.toml"
    text = config.read_text()
    assert "act_budget_s = 20\n" in text, text
    config.write_text(text.replace("act_budget_s = 20\n", "act_budget_s = 3600\n"))
    done = c.check("gpu-a", "--node", "--act", timeout=900)
    steps = [e for e in repair_events(c, "gpu-a")]
    stale = [e["message"] for e in steps if "stale repair claim" in e["message"]]
    assert stale and "its reset counts as an attempt" in stale[0], [e["message"] for e in steps]
    first, second = ledger(c, "gpu-a")
    assert first["outcome"] == "killed" and second["outcome"] == "resumed", (first, second)
    assert not c.drained("gpu-a") and comment(c, "gpu-a") == "", done.stdout + done.stderr


def test_a_hung_nvidia_smi_pm_1_cannot_keep_health_check_program_past_slurmds_kill(repair_cluster):
    c = repair_cluster
    enable_repair(c, "gpu-a", top="act_budget_s = 20\n")
    drain_with_dbe(c, "gpu-a")
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("nvidia_smi.pm_on_hang_s = 3600\n")
    try:
        # slurmd kills HealthCheckProgram at 60 s: the run must have ended, and said so, by then
        c.check("gpu-a", "--node", "--act", timeout=60)
    finally:
        end(hung_smi(c, "gpu-a"))
    messages = [e["message"] for e in repair_events(c, "gpu-a")]
    left_off = [m for m in messages if "is left OFF" in m]
    assert left_off and "no answer within" in left_off[0], messages
    [attempt] = ledger(c, "gpu-a")
    # the validation after the reset may be cut short by act_budget_s on a loaded machine: then
    # it is unvalidated (never still_failing, never an RMA step), as trust.md says
    assert (attempt["outcome"] in ("resumed", "passed", "reset")
            or attempt["outcome"].startswith(("still_failing", "unvalidated"))), attempt
    assert comment(c, "gpu-a") == ""  # the claim released before the run ended


def test_a_ledger_that_cannot_be_written_refuses_the_reset(repair_cluster):
    c = repair_cluster
    drain_with_dbe(c, "gpu-a")
    ledgers = c.state("gpu-a") / "repair"
    ledgers.mkdir(parents=True, mode=0o700, exist_ok=True)
    # the ledger directory read-only (a full or read-only /var): read, but never written
    script = (f'mount --bind "{ledgers}" "{ledgers}" && mount -o remount,bind,ro "{ledgers}" && '
              f'exec "{sys.executable}" -m healthcheck.cli --repair')
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], env=c.check_env("gpu-a"),
                          capture_output=True, text=True, timeout=120)
    assert not was_reset(c, "gpu-a"), done.stdout + done.stderr
    messages = [e["message"] for e in repair_events(c, "gpu-a")]
    assert any("cannot write the repair ledger" in m and "no reset" in m for m in messages), messages
    assert c.drained("gpu-a") and comment(c, "gpu-a") == ""


def test_max_concurrent_one_holds_when_slurmctld_applies_a_claim_late(repair_cluster, tmp_path):
    c = repair_cluster
    gate = hooked_scontrol(c, "scontrol-gate")
    # long scontrol deadlines: the gate holds calls for seconds
    for node in ("gpu-a", "gpu-b"):
        enable_repair(c, node, scontrol=gate, top="act_budget_s = 300\nscontrol_timeout_s = 45\n")
        drain_with_dbe(c, node)
    blocked, go = tmp_path / "b-blocked", tmp_path / "a-may-release"
    # gpu-b's claim reaches slurmctld only once gpu-a has reset; gpu-a's release waits for gpu-b
    (c.wd / "bin" / "scontrol-gate.pre").write_text(
        f'case "$*" in\n'
        f'  *NodeName=gpu-b*"Comment="*"gpu-healthcheck: repair"*)\n'
        f'    touch "{blocked}"; n=0\n'
        f'    while ! grep -q "fakegpu nvidia-smi --gpu-reset" "{c.scenario("gpu-a")}" && [ $n -lt 1200 ]; do\n'
        f'      sleep 0.05; n=$((n+1)); done ;;\n'
        f'  *NodeName=gpu-a*"Comment="*"gpu-healthcheck: repair"*) ;;\n'
        f'  *NodeName=gpu-a*"Comment="*)\n'
        f'    n=0; while [ ! -e "{go}" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done ;;\n'
        f'esac\n')
    b = c.start_check("gpu-b", "--repair")
    wait_for(blocked.exists, "gpu-b's claim to be held up")
    # gpu-b's claim is stamped (by its clock) a second before gpu-a's
    second = int(time.time())
    wait_for(lambda: int(time.time()) > second, "the next second")
    a = c.start_check("gpu-a", "--repair")
    b_out = b.communicate(timeout=180)
    go.touch()
    a_out = a.communicate(timeout=180)
    reset = [n for n in ("gpu-a", "gpu-b") if was_reset(c, n)]
    assert reset == ["gpu-a"], (reset, a_out, b_out)
    messages = [e["message"] for e in repair_events(c, "gpu-b")]
    assert any("stepped back: gpu-a" in m for m in messages), messages
    assert comment(c, "gpu-a") == "" and comment(c, "gpu-b") == ""


def test_a_node_resumed_with_a_job_started_right_after_the_claim_is_not_reset(repair_cluster, tmp_path):
    c = repair_cluster
    hook = hooked_scontrol(c, "scontrol-hook")
    enable_repair(c, "gpu-a", scontrol=hook, top="act_budget_s = 300\nscontrol_timeout_s = 45\n")
    healthy = c.scenario("gpu-a").read_text()
    drain_with_dbe(c, "gpu-a")
    claimed, proceed, once = tmp_path / "claimed", tmp_path / "proceed", tmp_path / "once"
    once.touch()
    # right after the first claim is in: an admin resets GPU 2 by hand, resumes the node, and a
    # job starts on it (the test does that while the run waits here)
    (c.wd / "bin" / "scontrol-hook.post").write_text(
        f'case "$*" in\n'
        f'  *NodeName=gpu-a*"Comment="*"gpu-healthcheck: repair"*)\n'
        f'    if rm "{once}" 2>/dev/null; then touch "{claimed}"; n=0\n'
        f'      while [ ! -e "{proceed}" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done; fi ;;\n'
        f'esac\n')
    run = c.start_check("gpu-a", "--node", "--act")
    wait_for(claimed.exists, "the claim")
    c.scenario("gpu-a").write_text(healthy)
    c.cluster.run(["scontrol", "update", "NodeName=gpu-a", "State=RESUME"], check=True)
    go = tmp_path / "go"
    job = c.cluster.sbatch(["--gres=gpu:8", "-w", "gpu-a"], WAIT_FOR_GO.format(go=go))
    c.wait_running(job)
    proceed.touch()
    out = run.communicate(timeout=180)
    assert not was_reset(c, "gpu-a"), out
    messages = [e["message"] for e in repair_events(c, "gpu-a")]
    assert any("backed off: after the claim" in m for m in messages), (messages, out)
    assert comment(c, "gpu-a") == ""
    go.touch()
    c.cluster.wait_job(job, timeout=60)


def test_the_repair_claim_goes_beside_the_sites_comment_and_only_ours_is_removed(repair_cluster):
    c = repair_cluster
    log = hooked_scontrol(c, "scontrol-log")
    enable_repair(c, "gpu-a", scontrol=log)
    drain_with_dbe(c, "gpu-a")
    c.cluster.run(["scontrol", "update", "NodeName=gpu-a", "Comment=ticket 4711"], check=True)
    done = c.check("gpu-a", "--node", "--act")
    assert was_reset(c, "gpu-a") and not c.drained("gpu-a"), done.stdout + done.stderr
    calls = (c.wd / "bin" / "scontrol-log.calls").read_text().splitlines()
    written = [line.split("Comment=", 1)[1] for line in calls if "NodeName=gpu-a Comment=" in line]
    held = [w for w in written if "repair resetting" in w and "asking" not in w]
    assert held and held[0].startswith("ticket 4711 | gpu-healthcheck: repair resetting gpus=2 at="), written
    assert comment(c, "gpu-a") == "ticket 4711"
    assert pci(2)  # the GPU the claim named is the one the DBE drained
