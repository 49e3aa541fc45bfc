"""decide.repair after `scontrol reboot`: where our reboot stands as slurmctld shows the node,
which claims hold the repair budget, and why an ordinary passing run does not resume a node
whose reboot is ours.  The node lines are what 22.05 and 24.11 printed in the test cluster."""

from __future__ import annotations

from healthcheck.act.scontrol import parse_node_line
from healthcheck.config import RepairConfig
from healthcheck.decide import repair as rd
from healthcheck.decide.verdict import NodeState, may_resume
from healthcheck.model import Action, Finding, GpuSnapshot, Severity

OURS = "gpu-healthcheck: gpu3 gpu.lost=GPU_IS_LOST node (+1 more)"
CLAIM = rd.mark_text(rd.REBOOTING, range(8), "2026-12-01T21:01:38+00:00")
CFG = RepairConfig(enabled=True, cooldown_s=0, window_s=7 * 86400, max_attempts=2, max_concurrent=1)


def node(state="IDLE+DRAIN", reason=OURS + " : reboot issued", comment=CLAIM,
         boot="2026-12-01T21:01:39", name="gpu-a"):
    return NodeState(name=name, state=state, reason=reason, comment=comment, boot_time=boot)


def progress(this):
    return rd.reboot_progress(this, rd.parse_mark(this.comment))


def test_repair_reboot_pending_while_slurmctld_shows_a_reboot_flag():
    # requested (waiting for idle) and issued (RebootProgram ran, boot not registered yet)
    assert progress(node(state="IDLE+DRAIN+REBOOT_REQUESTED", boot="2026-12-01T17:51:23")) == rd.PENDING
    assert progress(node(state="DOWN+DRAIN+REBOOT_ISSUED", boot="2026-12-01T17:51:23")) == rd.PENDING
    assert rd.reboot_flags("DOWN*+DRAIN+REBOOT_ISSUED") == ["REBOOT_ISSUED"]


def test_repair_reboot_booted_once_the_flags_are_gone_and_boottime_is_after_the_claim(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    assert progress(node()) == rd.BOOTED
    assert progress(node(boot=None)) == rd.BOOTED  # no BootTime shown: the flags decide
    # flags gone but no newer boot: someone cancelled it (scontrol cancel_reboot)
    assert progress(node(boot="2026-12-01T17:51:23")) == rd.CANCELLED
    # a validation cut short is validated again
    validating = rd.mark_text(rd.VALIDATING, range(8), "2026-12-01T21:01:38+00:00")
    assert progress(node(comment=validating, boot="2026-12-01T17:51:23")) == rd.BOOTED


def test_repair_reboot_timed_out_is_recognised_by_slurmctlds_words_and_our_mark():
    down = node(state="DOWN", reason=OURS + " : reboot issued : reboot timed out")
    assert progress(down) == rd.TIMED_OUT
    marked = rd.mark_text(rd.REBOOT_TIMED_OUT, range(8), "2026-12-01T21:01:38+00:00")
    assert progress(node(state="IDLE+DRAIN", comment=marked)) == rd.TIMED_OUT


def test_repair_reboot_timed_out_claim_frees_the_repair_budget():
    dead = node(state="DOWN", reason=OURS + " : reboot issued : reboot timed out")
    booting = node(state="DOWN+DRAIN+REBOOT_ISSUED", name="gpu-c")
    assert rd.active_claim(dead) is None and rd.active_claim(booting) is not None
    this = node(name="gpu-b", comment=None, reason="gpu-healthcheck: gpu2 ecc.volatile_uncorrected=1 node")
    assert rd.repairs_beyond_budget([dead, this], 1) == []
    dbe = [Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=2, value=1, action=Action.RESET)]
    gpus = [GpuSnapshot(index=i, serial=f"SN{i}") for i in range(4)]
    plan = rd.decide_repair(this, [dead, this, booting], dbe, gpus, {}, 0.0, CFG, False)
    assert plan.action == rd.NONE and plan.why.startswith("repair budget spent: gpu-c "), plan
    only_dead = rd.decide_repair(this, [dead, this], dbe, gpus, {}, 0.0, CFG, False)
    assert only_dead.action == rd.RESET, only_dead


def test_repair_reboot_claim_holds_the_ordinary_resume_until_the_repair_step_validates():
    held = may_resume(node(), [], [])
    assert held is not None and "reboot of ours" in held
    timed_out = rd.mark_text(rd.REBOOT_TIMED_OUT, range(8), "2026-12-01T21:01:38+00:00")
    assert may_resume(node(comment=timed_out), [], []) is not None
    validating = rd.mark_text(rd.VALIDATING, range(8), "2026-12-01T21:01:38+00:00")
    assert may_resume(node(comment=validating), [], []) is None
    assert may_resume(node(comment=None), [], []) is None


def test_repair_reboot_boottime_read_from_scontrol_22_05_and_24_11_lines():
    line = ("NodeName=gpu-a Arch=x86_64 CoresPerSocket=16 CPUAlloc=0 CPUEfctv=16 CPUTot=16 "
            "Gres=gpu:8 NodeAddr=127.0.0.1 State=IDLE+DRAIN ThreadsPerCore=1 "
            "BootTime=2026-12-01T21:01:39 SlurmdStartTime=2026-12-01T21:01:40 "
            "LastBusyTime=2026-12-01T21:01:40 CfgTRES=cpu=16,gres/gpu=8 AllocTRES= "
            f"Reason={OURS} : reboot issued [root@2026-12-01T21:01:38] Comment={CLAIM}")
    parsed = parse_node_line(line)
    assert parsed is not None
    assert parsed.boot_time == "2026-12-01T21:01:39"
    assert parsed.reason == OURS + " : reboot issued" and parsed.comment == CLAIM
    assert parse_node_line("NodeName=gpu-a State=IDLE BootTime=None").boot_time is None
