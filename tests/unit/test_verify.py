"""decide.verify (and its part in decide.repair, decide.verdict, decide.levels): what a suspect
gets.  A suspect is drained for verification, verified by the repair loop at the deep level under
its claim, cooldown and budget, then resumed, held as a lemon, or left for the fabric re-test."""

from __future__ import annotations

from healthcheck.config import RepairConfig
from healthcheck.configsections import SuspectsConfig
from healthcheck.decide import repair as rd
from healthcheck.decide import verify as dv
from healthcheck.decide.fabricretest import fabric_trigger
from healthcheck.decide.levels import drain_level, validation_level
from healthcheck.decide.verdict import (LEMON_HOLD, MAX_REASON_BYTES, SUSPECT_HOLD, NodeState, is_ours, may_resume,
                                        parse_reason)
from healthcheck.fleetmodel import Suspect
from healthcheck.model import Action, Finding, GpuSnapshot, Severity

NOW = 1_800_000_000.0
DAY = 86400.0
CFG = RepairConfig(enabled=True, cooldown_s=3600, window_s=7 * DAY, max_attempts=2, max_concurrent=1)
SUS = SuspectsConfig()
HOLE = Suspect("gpu-b", "black_hole", 6.0, {"failed_fast": 6, "users": 3, "within_s": 60.0,
                                            "incidents": [], "jobs": ["41", "42", "43"]})
LEMON = Suspect("gpu-f", "lemon", 5.2, {"p_value": 6.3e-6, "failures": 11.5, "expected": 2.25, "jobs": 40,
                                        "users_in_excess": 3, "fdr": 0.01, "failed_jobs": ["7", "9"],
                                        "failed_jobs_total": 12})
SERIAL = Suspect("gpu-c", "xid_repeat", 2.0, {"xid": 31, "times": 2, "window_s": 86400.0, "last": 1.0},
                 serial="1650 522 0038")
DBE = Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=2, value=1, action=Action.RESET)


def gpus(n: int = 4):
    return [GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}", pci_bus_id=f"00000000:{i:02X}:00.0")
            for i in range(n)]


def drained(reason=None, state="IDLE+DRAIN", name="gpu-b", comment=None):
    return NodeState(name, state, reason=reason or dv.suspect_reason(HOLE), comment=comment)


def repair(this, findings=(), attempts=None, cluster=()):
    return rd.decide_repair(this, [this, *cluster], list(findings), gpus(), attempts or {}, NOW, CFG, False)


def attempt(at, action="reset", node="gpu-b", outcome="resumed", gpu=2):
    return rd.Attempt(at=at, action=action, trigger="ecc.volatile_uncorrected=1", outcome=outcome, node=node, gpu=gpu)


def test_a_suspect_reason_is_ours_names_the_rule_and_its_evidence_in_255_bytes():
    reason = dv.suspect_reason(HOLE)
    assert reason == "gpu-healthcheck: suspect black_hole failed_fast=6 users=3 within=60s jobs=41,42,43"
    assert is_ours(reason) and dv.is_suspect_reason(reason) and dv.suspect_kind(reason) == "black_hole"
    assert parse_reason(reason)["check"] == dv.SUSPECT_CHECK  # the check the drain's level is read from
    assert dv.suspect_reason(LEMON).startswith("gpu-healthcheck: suspect lemon failures=11.5 expected=2.25 p=6.3e-06")
    many = HOLE._replace(evidence=dict(HOLE.evidence, jobs=[str(10**9 + i) for i in range(100)]))
    assert len(dv.suspect_reason(many).encode()) <= MAX_REASON_BYTES
    # a serial with blanks is one token: the reason's words stay what the parsers read
    assert " sn=1650_522_0038 " in dv.suspect_reason(SERIAL)


def test_a_suspect_drain_is_found_at_the_deep_level_and_so_verified_there():
    assert drain_level(None, ("suspect",)) == "deep" and validation_level("deep") == "deep"


def test_a_passing_run_never_resumes_a_suspect_nor_a_lemon():
    this = drained()
    assert may_resume(this, [], gpus()) == SUSPECT_HOLD
    lemon = drained(dv.lemon_reason(5, SUS, this.reason))
    assert may_resume(lemon, [], gpus()) == LEMON_HOLD
    # a fault comes first: it is what the node is kept for
    assert may_resume(this, [DBE], gpus()).startswith("still failing")


def test_the_repair_loop_verifies_an_idle_suspect_and_blames_no_gpu():
    plan = repair(drained())
    assert (plan.action, plan.gpus, plan.ledgers) == (dv.VERIFY, (), ())
    assert plan.trigger is not None and plan.trigger.check == "suspect" and plan.trigger.value == "black_hole"


def test_a_fault_found_on_a_suspect_takes_the_repair_path():
    plan = repair(drained(), findings=[DBE])
    assert (plan.action, plan.gpus) == (rd.RESET, (2,))


def test_verification_waits_for_idle_the_cooldown_and_the_budget_as_a_repair():
    assert repair(drained(state="MIXED+DRAIN")).state == "waiting_for_idle"
    recent = {"SN2@x": [attempt(NOW - 60)]}
    plan = repair(drained(), attempts=recent)
    assert plan.action == rd.NONE and plan.state == "cooldown"
    busy = NodeState("gpu-c", "IDLE+DRAIN", reason="gpu-healthcheck: gpu1 xid=79 node",
                     comment=rd.mark_text(rd.REBOOTING, [0, 1], "2026-12-01T00:00:00+00:00"))
    plan = repair(drained(), cluster=[busy])
    assert plan.action == rd.NONE and plan.state == "waiting_for_budget"


def test_a_verifying_claim_holds_the_budget_until_its_expiry_and_is_a_repair_state():
    mark = rd.mark_text(dv.VERIFYING, [], "2026-12-01T00:00:00+00:00", "2026-12-01T01:00:00+00:00")
    this = drained(comment=mark)
    assert rd.active_claim(this, NOW - 10 ** 9) is not None  # before its expiry
    assert rd.active_claim(this, NOW) is None  # past it: a killed run's claim holds nothing
    assert rd.stale_own_claim(rd.parse_mark(mark), NOW) is True
    assert rd.state_after("claimed", dv.VERIFY, "") == dv.VERIFYING in rd.REPAIR_STATES
    assert rd.state_after("verified", dv.VERIFY, "") == rd.IN_SERVICE
    assert rd.state_after("lemon", dv.VERIFY, "") == rd.DRAINED


def test_never_a_verification_or_repair_on_an_admin_drained_rma_or_lemon_node():
    assert repair(drained("memtest by admin")).action == rd.NONE
    lemon = drained(dv.lemon_reason(5, SUS, dv.suspect_reason(HOLE)))
    assert repair(lemon).action == repair(lemon, findings=[DBE]).action == rd.NONE
    assert repair(drained(dv.suspect_reason(HOLE) + " rma")).action == rd.NONE
    assert not dv.is_suspect_reason(dv.suspect_reason(HOLE) + " rma")


def test_the_lemon_rule_counts_the_nodes_own_repairs_within_the_window():
    five = {"SN2@x": [attempt(NOW - d * DAY / 2) for d in range(1, 4)],
            "node@gpu-b": [attempt(NOW - 3 * DAY, "reboot", gpu=-1), attempt(NOW - 4 * DAY, "reboot", gpu=-1)]}
    assert dv.lemon_count(five, "gpu-b", NOW, SUS) == 5
    # a reboot written in two GPUs' ledgers is one repair; another node's, a blocked reset and
    # one older than the window count for nothing
    four = {"SN2@x": [attempt(NOW - d * DAY / 2) for d in range(1, 4)] + [attempt(NOW - 8 * DAY)],
            "SN1@y": [attempt(NOW - 3 * DAY, "reboot", gpu=1)],
            "SN2@y": [attempt(NOW - 3 * DAY, "reboot", gpu=2), attempt(NOW - DAY, outcome="blocked: in use")],
            "SN0@z": [attempt(NOW - DAY, node="gpu-c")]}
    assert dv.lemon_count(four, "gpu-b", NOW, SUS) is None
    assert dv.lemon_count(four, "gpu-b", NOW, SUS._replace(remediations=4)) == 4
    reason = dv.lemon_reason(5, SUS, dv.suspect_reason(HOLE))
    assert reason.startswith("gpu-healthcheck: lemon remediations=5/7d suspect=black_hole failed_fast=6")
    assert parse_reason(reason)["check"] == "lemon" and not dv.is_suspect_reason(reason)


def test_after_a_pass_a_lemon_is_held_a_fabric_site_re_tests_and_any_other_resumes():
    assert dv.after_pass(5, False) == dv.after_pass(5, True) == dv.LEMON
    assert dv.after_pass(None, True) == dv.FABRIC_RETEST
    assert dv.after_pass(None, False) == dv.RESUME
    reason = dv.fabric_retest_reason(dv.suspect_reason(HOLE))
    trigger = fabric_trigger(reason)  # the fabric re-test's own path takes it from here
    assert trigger is not None and trigger.value == "suspect=black_hole"


def test_a_verified_node_is_resumed_only_while_its_reason_is_still_our_suspect_drain():
    reason = dv.suspect_reason(HOLE)
    assert dv.may_resume_verified(drained(reason), reason) is None
    assert "admin" in dv.may_resume_verified(drained("memtest by admin"), reason)
    assert "no longer drained" in dv.may_resume_verified(NodeState("gpu-b", "IDLE", reason=reason), reason)
    other = dv.suspect_reason(LEMON)
    assert "changed" in dv.may_resume_verified(drained(other), reason)
    assert "gone" in dv.may_resume_verified(None, reason)


def test_sends_one_per_node_worst_first_and_not_again_within_the_cooldown():
    cluster = [NodeState(n, "IDLE") for n in ("gpu-b", "gpu-c", "gpu-f")]
    again = HOLE._replace(kind="remediations", evidence={"remediations": 5})
    sends = dv.plan_sends([HOLE, LEMON, again], cluster, {"gpu-f": NOW - DAY}, NOW, SUS)
    assert [(s.node, s.kind, s.skip) for s in sends] == [("gpu-b", "black_hole", ""), ("gpu-f", "lemon", dv.COOLDOWN)]
    later = dv.plan_sends([LEMON], cluster, {"gpu-f": NOW - 8 * DAY}, NOW, SUS)
    assert later[0].skip == ""
    assert dv.plan_sends([HOLE], [], {}, NOW, SUS)[0].skip == "not in slurmctld's node list"


def test_the_last_send_is_read_from_the_suspects_history_lines():
    records = [{"mode": "suspects", "epoch": NOW - 10, "suspects": [
                   {"node": "gpu-b", "verification": "applied"}, {"node": "gpu-f", "verification": "refused"}]},
               {"mode": "suspects", "epoch": NOW - 5, "suspects": [{"node": "gpu-c", "verification": "already_ours"}]},
               {"mode": "suspects", "epoch": NOW - 1, "suspects": [{"node": "gpu-b", "verification": "report_only"}]},
               {"mode": "node", "epoch": NOW, "suspects": [{"node": "gpu-x", "verification": "applied"}]}]
    assert dv.last_sends(records) == {"gpu-b": NOW - 10}

