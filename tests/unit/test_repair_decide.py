"""decide.repair: which drained node is repaired, how, within which budget, and when it is rma."""

from __future__ import annotations

from healthcheck.config import RepairConfig
from healthcheck.decide import repair as rd
from healthcheck.decide.verdict import NodeState, drain_reason, is_rma, parse_reason
from healthcheck.model import Action, Finding, GpuSnapshot, Mode, Severity

OURS = "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=SN2 ecc.volatile_uncorrected=1 epilog job=7"
DBE = Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=2, value=1, action=Action.RESET)
XID79 = Finding("xid", Severity.FAIL, "off the bus", gpu=1, value=79, action=Action.REBOOT)
CFG = RepairConfig(enabled=True, cooldown_s=3600, window_s=7 * 86400, max_attempts=2, max_concurrent=1)
NOW = 1_800_000_000.0


def gpus(n: int = 4):
    return [GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}", pci_bus_id=f"00000000:{i:02X}:00.0")
            for i in range(n)]


def node(name="gpu-a", state="IDLE+DRAIN", reason=OURS, comment=None):
    return NodeState(name=name, state=state, reason=reason, comment=comment)


def decide(this=None, cluster=(), findings=(DBE,), attempts=None, nvswitch=False, config=CFG):
    this = this or node()
    return rd.decide_repair(this, [this, *cluster], list(findings), gpus(), attempts or {}, NOW,
                            config, nvswitch)


def attempt(at, node_name="gpu-a", gpu=2):
    return rd.Attempt(at=at, action="reset", trigger="ecc.volatile_uncorrected=1",
                      outcome="still_failing: ecc.volatile_uncorrected", node=node_name, gpu=gpu)


def test_repair_resets_only_the_gpu_the_finding_names():
    plan = decide()
    assert (plan.action, plan.gpus) == (rd.RESET, (2,))


def test_repair_reboots_for_xid_79_and_on_an_nvswitch_system_instead_of_resetting():
    assert decide(findings=[XID79]).action == rd.REBOOT
    plan = decide(nvswitch=True)
    assert plan.action == rd.REBOOT and "NOTES.md" in plan.why


def test_repair_never_on_an_admin_drained_node_an_rma_node_or_a_node_in_service():
    assert decide(node(reason="memtest by admin")).action == rd.NONE
    rma = OURS.replace("=1 epilog", "=1 rma epilog")
    assert decide(node(reason=rma)).action == rd.NONE
    assert decide(node(state="IDLE", reason=None)).action == rd.NONE


def test_repair_never_while_a_job_runs():
    for state in ("MIXED+DRAIN", "ALLOCATED+DRAIN", "IDLE+COMPLETING+DRAIN"):
        plan = decide(node(state=state))
        assert plan.action == rd.NONE and plan.state == "waiting_for_idle", state


def test_repair_is_not_tried_for_a_finding_that_calls_for_rma_or_only_a_drain():
    rma = Finding("remap.failure", Severity.FAIL, "x", gpu=2, value=True, action=Action.RMA)
    drain = Finding("thermal.slowdown", Severity.FAIL, "x", gpu=2, value=90, action=Action.DRAIN)
    assert decide(findings=[rma]).action == rd.NONE
    assert decide(findings=[DBE, drain]).action == rd.NONE
    assert decide(findings=[]).action == rd.NONE


def test_repair_cooldown_per_node():
    key = rd.ledger_key(gpus()[2])
    assert decide(attempts={key: [attempt(NOW - 60)]}).state == "cooldown"
    assert decide(attempts={key: [attempt(NOW - 7200)]}).action == rd.RESET
    # another node's attempt on a GPU of the same serial does not cool this node down
    assert decide(attempts={key: [attempt(NOW - 60, node_name="gpu-z")]}).action == rd.RESET


def test_repair_max_attempts_within_the_window_marks_rma_and_old_ones_do_not_count():
    key = rd.ledger_key(gpus()[2])
    plan = decide(attempts={key: [attempt(NOW - 9000), attempt(NOW - 8000)]})
    assert (plan.action, plan.rma_gpu, plan.attempts) == (rd.RMA, 2, 2)
    old = NOW - 8 * 86400
    assert decide(attempts={key: [attempt(old), attempt(old + 1)]}).action == rd.RESET
    assert rd.after_attempt(2, CFG, passed=False) == rd.RMA
    assert rd.after_attempt(1, CFG, passed=False) == "stay_drained"
    assert rd.after_attempt(2, CFG, passed=True) == "resume"


def test_repair_budget_counts_the_other_nodes_claims_and_ranks_concurrent_claims_alike():
    busy = node("gpu-b", comment=rd.mark_text(rd.RESETTING, [1], "2026-01-01T00:00:00Z"))
    assert decide(cluster=[busy]).state == "waiting_for_budget"
    assert decide(cluster=[busy], config=CFG._replace(max_concurrent=2)).action == rd.RESET
    done = node("gpu-b", comment="gpu-healthcheck: drain refused ...")
    assert decide(cluster=[done]).action == rd.RESET
    # alike on every node, and by no node's clock: claims held first, then those asking, by
    # name (gpu-c's earlier time is its own clock's word, or a claim slurmctld applied late)
    a = node("gpu-a", comment=rd.mark_text(rd.RESETTING, [2], "2026-01-01T00:00:01Z"))
    b = node("gpu-b", comment=rd.mark_text(rd.REBOOTING, [], "2026-01-01T00:00:01Z"))
    c = node("gpu-c", comment=rd.mark_text(rd.RESETTING, [0], "2026-01-01T00:00:00Z"))
    assert rd.repairs_beyond_budget([a, b, c], 1) == ["gpu-b", "gpu-c"]
    assert rd.repairs_beyond_budget([b, a, c], 2) == ["gpu-c"]
    asking = node("gpu-0", comment=rd.mark_text(rd.RESETTING, [0], "2025-01-01T00:00:00Z", asking=True))
    assert rd.repairs_beyond_budget([asking, c], 1) == ["gpu-0"]


def test_repair_rma_reason_names_gpu_pci_serial_and_attempts_in_the_pinned_format():
    reason = drain_reason([rd.rma_finding(2, 2, DBE)], gpus(), Mode.NODE, None)
    assert reason == "gpu-healthcheck: gpu2 pci=00000000:02:00.0 sn=SN2 repair.attempts=2 rma node"
    assert is_rma(reason)
    fields = parse_reason(reason) or {}
    assert fields.get("context") == "node"


def test_repair_ledger_key_is_the_serial_else_the_uuid_and_safe_as_a_file_name():
    # the serial (escaped: '_' and two hex digits per byte) and the PCI address
    assert rd.ledger_key(GpuSnapshot(index=0, uuid="GPU-x", serial="1650 522/00")) == "1650_20522_2F00@~nopci"
    assert rd.ledger_key(GpuSnapshot(index=0, uuid="GPU-abc", serial=None)) == "~uuid-GPU-abc@~nopci"


def test_repair_metrics_count_attempts_successes_and_rma_by_action():
    from healthcheck.act.metrics import count_actions
    from healthcheck.model import LogEvent

    def ev(step, action):
        return LogEvent("repair", 5, "x", {"GPU_HEALTHCHECK_REPAIR_STEP": step,
                                           "GPU_HEALTHCHECK_REPAIR_ACTION": action})
    counts = count_actions([ev("claimed", "reset"), ev("reset", "reset"), ev("resumed", "reset"),
                            ev("reboot", "reboot"), ev("rma", "rma"), ev("skipped", "")])
    assert (counts["repairs_attempted_reset"], counts["repairs_succeeded_reset"],
            counts["repairs_attempted_reboot"], counts["repairs_succeeded_reboot"],
            counts["gpus_marked_rma"]) == (1, 1, 1, 0, 1)
