"""decide/fabricretest.py and its part in decide/repair.py, decide/sweep.py and --cluster: a
fabric drain is rebooted by the repair loop (the node's own ledger), waits for the fabric
sweep's re-test, and the re-test resumes it, drains it for another reboot, or marks it rma."""

from __future__ import annotations

from healthcheck.config import RepairConfig
from healthcheck.decide import fabricretest as fr
from healthcheck.decide import repair as rd
from healthcheck.decide.sweep import BAD, PASS, SKIPPED, UNKNOWN, Job, JobResult, NodeOutcome, SweepPlanner, Thresholds
from healthcheck.decide.verdict import FABRIC_HOLD, NodeState, is_ours, is_rma, may_resume, parse_reason
from healthcheck.model import Action, Finding, GpuSnapshot, Severity
from healthcheck.report.cluster import format_table, rows_from_show_nodes
from tests.lib.shownodes import node_line

SWEPT = "gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-a,gpu-e all_reduce_perf sweep"
GANG = "gpu-healthcheck: fabric nccl=hang partners=gpu-a,gpu-b all_reduce_perf gang job=12"
RETEST = "gpu-healthcheck: repair fabric_retest at=2027-01-15T08:00:00+00:00 attempts=1/2"
CFG = RepairConfig(enabled=True, cooldown_s=3600, window_s=7 * 86400, max_attempts=2, max_concurrent=1)
NOW = 1_800_000_000.0
GPUS = [GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}", pci_bus_id=f"00000000:{i:02X}:00.0")
        for i in range(4)]


def drained(reason=SWEPT, comment=None, state="IDLE+DRAIN", name="gpu-c"):
    return NodeState(name=name, state=state, reason=reason, comment=comment)


def decide(this, findings=(), attempts=None, cluster=(), config=CFG):
    return rd.decide_repair(this, [this, *cluster], list(findings), GPUS, attempts or {}, NOW, config, False)


def reboot(at, node_name="gpu-c"):
    return rd.Attempt(at=at, action="reboot", trigger="fabric=busbw=41.2<100", outcome="fabric_retest",
                      node=node_name, gpu=-1)


def test_fabric_trigger_is_a_node_wide_reboot_for_the_sweeps_and_the_gangs_reason():
    for reason, figure in ((SWEPT, "busbw=41.2<100"), (GANG, "nccl=hang"),
                           (SWEPT + " : reboot issued", "busbw=41.2<100")):
        trigger = fr.fabric_trigger(reason)
        assert trigger is not None and trigger.drains
        assert (trigger.check, trigger.gpu, trigger.pci, trigger.value, trigger.action) == (
            "fabric", None, None, figure, Action.REBOOT)
    assert fr.fabric_trigger(SWEPT.replace("100 ", "100 rma ")) is None
    assert fr.fabric_trigger("gpu-healthcheck: gpu3 ecc.volatile_uncorrected=2 node") is None
    assert fr.fabric_trigger("fabric busbw low, ticket 4711") is None


def test_fabric_drain_is_rebooted_once_into_the_nodes_own_ledger_never_a_gpus():
    plan = decide(drained())
    assert plan.action == rd.REBOOT and plan.trigger is not None and plan.trigger.check == "fabric"
    assert [r.key for r in plan.ledgers] == [rd.node_ledger("gpu-c").key]
    # the gang check's drain: the same
    assert decide(drained(GANG)).action == rd.REBOOT


def test_fabric_drain_after_its_reboot_waits_for_the_sweep_not_for_a_second_reboot():
    plan = decide(drained(comment=RETEST), attempts={rd.node_ledger("gpu-c").key: [reboot(NOW - 60)]})
    assert (plan.action, plan.state) == (rd.NONE, fr.FABRIC_RETEST)
    testing = "gpu-healthcheck: repair fabric_testing at=x attempts=1/2 sweep=s resv=r"
    assert decide(drained(comment=testing)).state == fr.FABRIC_TESTING
    # its own checks find a fault meanwhile: that is repaired, as any drain's
    xid79 = Finding("xid", Severity.FAIL, "off the bus", gpu=1, value=79, action=Action.REBOOT)
    assert decide(drained(comment=RETEST), findings=[xid79]).action == rd.REBOOT


def test_fabric_drain_goes_the_repair_loops_way_cooldown_budget_rma_admin():
    ledger = rd.node_ledger("gpu-c").key
    assert decide(drained(), attempts={ledger: [reboot(NOW - 60)]}).state == "cooldown"
    busy = NodeState("gpu-a", "DOWN+DRAIN+REBOOT_ISSUED", reason=SWEPT,
                     comment="gpu-healthcheck: repair rebooting gpus=0 at=2027-01-15T08:00:00+00:00")
    assert decide(drained(), cluster=[busy]).state == "waiting_for_budget"
    used = decide(drained(), attempts={ledger: [reboot(NOW - 7200), reboot(NOW - 5000)]})
    assert used.action == rd.RMA and used.rma_ledger is not None and used.rma_ledger.key == ledger
    assert rd.rma_finding(None, used.attempts, used.trigger, used.rma_ledger).gpu is None
    assert decide(drained(SWEPT.replace("100 ", "100 rma "))).state == "rma"
    assert decide(drained("fabric link flaps, ticket 4711")).action == rd.NONE  # an admin's
    assert decide(drained(state="MIXED+DRAIN")).state == "waiting_for_idle"


def test_fabric_drain_resume_is_held_only_once_the_nodes_own_checks_pass():
    this = drained(comment="gpu-healthcheck: repair validating gpus=0,1,2,3 at=x")
    assert may_resume(this, [], GPUS) == FABRIC_HOLD
    lost = Finding("gpu.lost", Severity.FAIL, "lost", gpu=3, action=Action.REBOOT)
    assert may_resume(this, [lost], GPUS).startswith("still failing")
    assert may_resume(this, [], GPUS, partial=True) != FABRIC_HOLD


def test_fabric_retest_mark_round_trips_and_reads_as_a_repair_state():
    text = fr.retest_mark(1, 2, "2027-01-15T08:00:00+00:00")
    assert text == RETEST
    mark = fr.parse_retest_mark("ticket 4711 | " + text)
    assert mark == fr.RetestMark(fr.FABRIC_RETEST, "2027-01-15T08:00:00+00:00", 1, 2)
    testing = fr.testing_mark(mark, "20270115T0800-login-42", fr.reservation_name("gpu-c"), "t")
    assert fr.parse_retest_mark(testing)._replace(at="") == fr.RetestMark(
        fr.FABRIC_TESTING, "", 1, 2, "20270115T0800-login-42", "gpu-healthcheck-retest-gpu-c")
    assert rd.parse_mark(testing)["state"] == fr.FABRIC_TESTING and not rd.active_claim(drained(comment=testing))
    assert fr.parse_retest_mark("gpu-healthcheck: repair rebooting gpus=0 at=x") is None
    assert rd.state_after("fabric_retest", "reboot", "") == fr.FABRIC_RETEST
    assert rd.state_after("skipped", "", fr.FABRIC_RETEST) == fr.FABRIC_RETEST


def test_fabric_awaiting_retest_only_our_idle_fabric_drain_with_the_mark():
    assert fr.awaiting_retest(drained(SWEPT + " : reboot issued", comment=RETEST)) is None
    assert fr.awaiting_retest(drained()) == ""  # no mark: not rebooted yet
    assert "not idle" in fr.awaiting_retest(drained(comment=RETEST, state="MIXED+DRAIN"))
    assert "not idle" in fr.awaiting_retest(drained(comment=RETEST, state="DOWN+DRAIN+REBOOT_ISSUED"))
    assert "not idle" in fr.awaiting_retest(drained(comment=RETEST, state="IDLE+DRAIN*"))
    assert "rma" in fr.awaiting_retest(drained(SWEPT.replace("100 ", "100 rma "), comment=RETEST))
    assert "stale" in fr.awaiting_retest(drained("bad cable, ticket 4711", comment=RETEST))
    # a stale mark is dropped by the node's own run, a sweep's testing mark never
    assert fr.stale_retest_mark(NodeState("gpu-c", "IDLE", comment=RETEST))
    assert not fr.stale_retest_mark(drained(comment=RETEST))
    assert not fr.stale_retest_mark(NodeState("gpu-c", "IDLE+MAINT", comment=RETEST.replace("retest", "testing")))


def test_fabric_retest_decision_and_the_reason_it_leaves():
    failed = NodeOutcome("gpu-c", BAD, 41.2, ("gpu-a", "gpu-b"), "busbw=41.2<100")
    first, last = fr.RetestMark(fr.FABRIC_RETEST, "", 1, 2), fr.RetestMark(fr.FABRIC_RETEST, "", 2, 2)
    assert fr.retest_decision(NodeOutcome("gpu-c", PASS), first) == fr.RESUME
    assert fr.retest_decision(failed, first) == fr.REBOOT_AGAIN
    assert fr.retest_decision(failed, last) == fr.RMA
    assert fr.retest_decision(failed, fr.RetestMark(fr.FABRIC_RETEST)) == fr.REBOOT_AGAIN  # the node's ledger decides
    for outcome in (UNKNOWN, SKIPPED):
        assert fr.retest_decision(NodeOutcome("gpu-c", outcome), last) == fr.KEEP
    rma = fr.retest_reason(fr.RMA, failed, "all_reduce_perf", SWEPT)
    assert rma == "gpu-healthcheck: fabric busbw=41.2<100 rma partners=gpu-a,gpu-b all_reduce_perf sweep"
    assert is_ours(rma) and is_rma(rma) and parse_reason(rma)["check"] == "fabric"
    again = fr.retest_reason(fr.REBOOT_AGAIN, failed, "all_reduce_perf", SWEPT)
    assert not is_rma(again) and fr.fabric_trigger(again) is not None
    assert fr.retest_reason(fr.KEEP, NodeOutcome("gpu-c", UNKNOWN), "all_reduce_perf",
                            SWEPT + " : reboot issued") == SWEPT
    assert fr.retest_reason(fr.RESUME, NodeOutcome("gpu-c", PASS), "all_reduce_perf", SWEPT) is None


def test_fabric_recovery_of_a_killed_sweeps_test_never_resumes_a_held_node():
    testing = "gpu-healthcheck: repair fabric_testing at=x attempts=1/2 sweep=s resv=r"
    resumed = NodeState("gpu-c", "IDLE+MAINT", comment=testing)
    assert fr.recovery(resumed, held=True) == fr.Recovery(True, "retest", True)
    assert fr.recovery(resumed, held=False) == fr.Recovery(False, "clear", False)  # it had passed
    assert fr.recovery(drained(comment=testing), held=True) == fr.Recovery(False, "retest", True)
    assert fr.recovery(drained("bad cable", comment=testing), held=True) == fr.Recovery(False, "clear", True)
    assert fr.recovery(drained(comment=testing), held=False) == fr.Recovery(False, "retest", False)
    assert fr.fabric_trigger(fr.interrupted_reason("all_reduce_perf")).value == "retest=interrupted"


def healthy(slow=frozenset()):
    def model(job: Job) -> JobResult:
        return JobResult(job, 41.2 if set(job.nodes) & slow else 380.0, job_id=str(100 + job.round))
    return model


def sweep(candidates, retest, model, partners=2):
    planner = SweepPlanner(candidates, Thresholds(floor_gbps=100.0), partners=partners, retest=retest)
    rounds = []
    while True:
        jobs = planner.next_jobs()
        if not jobs:
            break
        rounds.append(jobs)
        planner.record([model(j) for j in jobs])
    return planner.outcome(), rounds


def test_fabric_retest_suspects_skip_the_pairs_and_run_with_known_good_partners():
    six = [f"gpu-{c}" for c in "abdegh"]
    outcome, rounds = sweep(six, ["gpu-c", "gpu-f"], healthy({"gpu-f"}))
    assert all("gpu-c" not in j.nodes and "gpu-f" not in j.nodes for j in rounds[0])  # no pair
    partner_jobs = [j for r in rounds[1:] for j in r]
    assert all(j.kind == "partner" and j.nodes[0] in ("gpu-c", "gpu-f") and set(j.nodes[1:]) <= set(six)
               for j in partner_jobs)
    by = {n.node: n for n in outcome.nodes}
    assert (by["gpu-c"].outcome, by["gpu-f"].outcome) == (PASS, BAD)
    assert by["gpu-c"].why.startswith("re-test passed with ") and len(set(by["gpu-c"].partners)) == 2
    assert by["gpu-f"].why == "busbw=41.2<100" and by["gpu-f"].busbw_gbps == 41.2
    assert len(rounds) == 3 and all(by[n].outcome == PASS for n in six)


def test_fabric_retest_passes_only_with_enough_partners_and_never_partners_another():
    outcome, rounds = sweep(["gpu-a", "gpu-b"], ["gpu-c", "gpu-d"], healthy())
    by = {n.node: n for n in outcome.nodes}
    # two good nodes, two retest suspects, two partners each: every one is tried
    assert (by["gpu-c"].outcome, by["gpu-d"].outcome) == (PASS, PASS)
    assert all({"gpu-c", "gpu-d"} - set(j.nodes) for r in rounds for j in r)  # never together
    outcome, _ = sweep(["gpu-a", "gpu-b"], ["gpu-c"], healthy(), partners=3)
    [retest] = [n for n in outcome.nodes if n.node == "gpu-c"]
    assert retest.outcome == UNKNOWN and "only 2 of 3" in retest.why
    outcome, _ = sweep(["gpu-a", "gpu-b"], ["gpu-c"], healthy({"gpu-a", "gpu-b"}))
    assert [n.outcome for n in outcome.nodes if n.node == "gpu-c"] == [UNKNOWN]  # no good partner


def test_fabric_retest_evidence_names_the_node_partners_figures_sweep_and_jobs():
    job = Job(("gpu-f", "gpu-a"), "partner", 2)
    results = [JobResult(job, 41.2, job_id="201"), JobResult(Job(("gpu-a", "gpu-b"), "pair", 1), 380.0, job_id="101")]
    failed = NodeOutcome("gpu-f", BAD, 41.2, ("gpu-a",), "busbw=41.2<100")
    bundle = fr.evidence_bundle(failed, results, "sweep-1", fr.RetestMark(fr.FABRIC_RETEST, "", 2, 2),
                                "gpu-healthcheck: fabric busbw=41.2<100 rma partners=gpu-a all_reduce_perf sweep",
                                "/out/sweep-1")
    assert (bundle["node"], bundle["sweep_id"], bundle["partners"], bundle["job_ids"]) == (
        "gpu-f", "sweep-1", ["gpu-a"], ["201"])
    assert bundle["jobs"][0]["busbw_gbps"] == 41.2 and (bundle["attempts"], bundle["max_attempts"]) == (2, 2)


def test_fabric_retest_in_the_cluster_view():
    lines = "\n".join([
        node_line("gpu-c", "IDLE+DRAIN", SWEPT + " [root@2026-11-29T19:01:02]") + " Comment=" + RETEST,
        node_line("gpu-d", "IDLE+MAINT") + " Comment=" + RETEST.replace("retest", "testing") + " sweep=s resv=r",
        node_line("gpu-e", "IDLE") + " Comment=" + RETEST,  # resumed by a person: a stale mark
    ]) + "\n"
    rows = {r["node"]: r for r in rows_from_show_nodes(lines)}
    assert (rows["gpu-c"]["repair"], rows["gpu-c"]["check"]) == (fr.FABRIC_RETEST, "fabric")
    assert (rows["gpu-d"]["repair"], rows["gpu-d"]["check"]) == (fr.FABRIC_TESTING, "fabric")
    assert "gpu-e" not in rows
    assert format_table(list(rows.values()))[1].split()[-1] == fr.FABRIC_RETEST
    stale = node_line("gpu-c", "IDLE+DRAIN", "bad cable [admin@2026-11-29T19:01:02]") + " Comment=" + RETEST + "\n"
    assert rows_from_show_nodes(stale)[0]["repair"] is None
