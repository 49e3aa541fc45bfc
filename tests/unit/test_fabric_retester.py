"""act/fabricretest.py against the in-process scontrol door: a node awaiting its fabric re-test
is held in its own reservation before it is resumed, and released only once it passed or is
drained again; an scontrol that stops answering, or a sweep killed on the way, leaves it held,
never in service; an admin's drain made meanwhile is kept."""

from __future__ import annotations

import json
from typing import List

from healthcheck.act.fabricretest import Retester
from healthcheck.config import Config
from healthcheck.decide import fabricretest as fr
from healthcheck.decide.sweep import BAD, PASS, Job, JobResult, NodeOutcome, RetestEnd, SweepAction
from healthcheck.decide.verdict import NodeState, is_rma
from healthcheck.model import LogEvent
from tests.lib.slurmdoor import FakeDoor, stamp

SWEPT = "gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-a,gpu-e all_reduce_perf sweep"
RESV = "gpu-healthcheck-retest-gpu-c"


def door(attempts: str = "1/2", comment_prefix: str = "") -> FakeDoor:
    mark = f"{comment_prefix}gpu-healthcheck: repair fabric_retest at=2027-01-15T08:00:00+00:00 attempts={attempts}"
    nodes = [NodeState("gpu-c", "IDLE+DRAIN", reason=SWEPT + " : reboot issued", reason_time=stamp(-60),
                       comment=mark, gres="gpu:8")]
    nodes += [NodeState(n, "IDLE", gres="gpu:8") for n in ("gpu-a", "gpu-b")]
    return FakeDoor(nodes)


def retester(ctl: FakeDoor, tmp_path) -> Retester:
    events: List[LogEvent] = []
    return Retester(ctl, Config(state_dir=str(tmp_path)), "sweep-1", "all_reduce_perf", events, "/out/sweep-1")


def held(ctl: FakeDoor, tmp_path) -> Retester:
    rt = retester(ctl, tmp_path)
    assert rt.hold(ctl.nodes["gpu-c"]) is None
    return rt


def failed(node: str = "gpu-c") -> NodeOutcome:
    return NodeOutcome(node, BAD, 41.2, ("gpu-a", "gpu-b"), "busbw=41.2<100")


def test_fabric_retester_holds_in_a_reservation_before_the_resume(tmp_path):
    ctl = door()
    rt = held(ctl, tmp_path)
    verbs = [c[0] if c[0] != "update" else c[2] for c in ctl.calls if c[:2] != ("show", "nodes")]
    assert verbs.index("create") < verbs.index("State=RESUME")
    assert ctl.reservations == {RESV: ("gpu-c",)} and rt.reservations == {"gpu-c": RESV}
    mark = fr.parse_retest_mark(ctl.nodes["gpu-c"].comment)
    assert (mark.state, mark.attempts, mark.sweep, mark.reservation) == (fr.FABRIC_TESTING, 1, "sweep-1", RESV)
    assert not ctl.nodes["gpu-c"].state.endswith("DRAIN")


def test_fabric_retester_pass_releases_the_node_and_drops_the_mark(tmp_path):
    ctl = door(comment_prefix="ticket 4711 | ")
    rt = held(ctl, tmp_path)
    action = rt.finish(NodeOutcome("gpu-c", PASS, 380.0, ("gpu-a", "gpu-b"), "re-test passed"), ())
    assert action == SweepAction(None, retest=RetestEnd.RESUMED) and action.said == "resumed" and action.resumed
    assert ctl.reservations == {} and ctl.nodes["gpu-c"].state == "IDLE"
    assert ctl.nodes["gpu-c"].comment == "ticket 4711"  # the site's part stays


def test_fabric_retester_failure_with_attempts_left_drains_for_another_reboot(tmp_path):
    ctl = door("1/2")
    rt = held(ctl, tmp_path)
    action = rt.finish(failed(), ())
    taken, reason = action.said, action.reason
    assert action.retest is RetestEnd.DRAINED and action.holds_node
    this = ctl.nodes["gpu-c"]
    assert taken == "drained" and this.state.endswith("+DRAIN") and this.reason == reason
    assert fr.fabric_trigger(reason) is not None and not is_rma(reason)
    assert this.comment is None and ctl.reservations == {}  # no mark: the repair loop reboots it


def test_fabric_retester_failure_after_the_last_attempt_marks_rma_with_evidence(tmp_path):
    ctl = door("2/2")
    rt = held(ctl, tmp_path)
    results = [JobResult(Job(("gpu-c", "gpu-a"), "partner", 2), 41.2, job_id="201"),
               JobResult(Job(("gpu-c", "gpu-b"), "partner", 3), 41.0, job_id="202")]
    action = rt.finish(failed(), results)
    assert action.retest is RetestEnd.RMA and action.said == "rma" and action.holds_node
    assert is_rma(ctl.nodes["gpu-c"].reason) and ctl.reservations == {}
    [path] = (tmp_path / "evidence").iterdir()
    bundle = json.loads(path.read_text())
    assert (bundle["node"], bundle["job_ids"], bundle["sweep_id"]) == ("gpu-c", ["201", "202"], "sweep-1")
    [event] = [e for e in rt.events if e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") == "rma"]
    assert event.fields["GPU_HEALTHCHECK_EVIDENCE"] == str(path)


def test_fabric_retester_unknown_drains_again_and_keeps_waiting(tmp_path):
    ctl = door()
    rt = held(ctl, tmp_path)
    assert rt.abandon("the sweep stopped: sbatch refused every job") == {"gpu-c": SweepAction(SWEPT, retest=RetestEnd.KEPT)}
    this = ctl.nodes["gpu-c"]
    assert this.state.endswith("+DRAIN") and this.reason == SWEPT and ctl.reservations == {}
    assert fr.parse_retest_mark(this.comment).state == fr.FABRIC_RETEST
    assert fr.awaiting_retest(this) is None


def test_fabric_retester_scontrol_that_stops_answering_leaves_the_failing_node_held(tmp_path):
    ctl = door("2/2")
    rt = held(ctl, tmp_path)
    ctl.hang_from = "update"  # the drain gets no answer
    action = rt.finish(failed(), ())
    assert action.retest is RetestEnd.ERROR and action.said.startswith("error: ") and not action.resumed
    assert ctl.reservations == {RESV: ("gpu-c",)}  # still held: no job of anyone else starts there
    # the next sweep (a fresh door's answers) finds the killed test's mark and drains it again
    ctl.hung, ctl.unanswered, ctl.hang_from = False, None, None
    fresh = retester(ctl, tmp_path)
    assert fresh.recover(list(ctl.nodes.values()))
    this = ctl.nodes["gpu-c"]
    assert this.state.endswith("+DRAIN") and fr.fabric_trigger(this.reason).value == fr.INTERRUPTED
    assert fr.parse_retest_mark(this.comment).state == fr.FABRIC_RETEST and ctl.reservations == {}


def test_fabric_retester_admins_drain_made_during_the_test_is_kept(tmp_path):
    ctl = door()
    rt = held(ctl, tmp_path)
    ctl.nodes["gpu-c"] = ctl.nodes["gpu-c"]._replace(state="IDLE+DRAIN", reason="bad cable, ticket 4711")
    assert rt.finish(NodeOutcome("gpu-c", PASS, 380.0), ()) == SweepAction("bad cable, ticket 4711", retest=RetestEnd.KEPT)
    assert ctl.nodes["gpu-c"].reason == "bad cable, ticket 4711" and ctl.reservations == {}


def test_fabric_retester_node_changed_before_the_resume_is_not_resumed(tmp_path):
    ctl = door()
    rt = retester(ctl, tmp_path)
    seen = ctl.nodes["gpu-c"]
    ctl.nodes["gpu-c"] = seen._replace(reason="bad cable, ticket 4711")  # an admin, after our read
    assert "changed since it was read" in rt.hold(seen)
    assert ctl.nodes["gpu-c"].state == "IDLE+DRAIN" and ctl.reservations == {} and not rt.held
    assert not any(c[2:3] == ("State=RESUME",) for c in ctl.calls)


def test_fabric_retester_no_reservation_no_resume(tmp_path):
    ctl = door()
    ctl.hang_from = "create"
    rt = retester(ctl, tmp_path)
    assert "could not be made" in rt.hold(ctl.nodes["gpu-c"])
    assert ctl.nodes["gpu-c"].state == "IDLE+DRAIN" and not rt.held and not rt.reservations
    assert not any(c[2:3] == ("State=RESUME",) for c in ctl.calls)


def test_fabric_retest_candidates_are_our_idle_marked_fabric_drains_and_only_with_act():
    from healthcheck.act.scontrol import parse_show_nodes
    from healthcheck.decide.sweepnodes import candidates, retest_candidates, retest_refused
    from tests.lib.shownodes import node_line

    mark = " Comment=gpu-healthcheck: repair fabric_retest at=2027-01-15T08:00:00+00:00 attempts=1/2"
    lines = "\n".join([
        node_line("gpu-c", "IDLE+DRAIN", SWEPT + " [root@2027-01-15T08:00:00]") + mark,
        node_line("gpu-d", "MIXED+DRAIN", SWEPT + " [root@2027-01-15T08:00:00]") + mark,
        node_line("gpu-e", "IDLE+DRAIN", SWEPT + " [root@2027-01-15T08:00:00]"),  # not rebooted yet
        node_line("gpu-a", "IDLE"), node_line("gpu-b", "IDLE"),
    ]) + "\n"
    chosen, why_not = retest_candidates(parse_show_nodes(lines), None, None)
    assert [n.name for n in chosen] == ["gpu-c"] and list(why_not) == ["gpu-d"]
    assert "not idle" in why_not["gpu-d"]
    assert retest_candidates(parse_show_nodes(lines), ["gpu-a", "gpu-b"], None)[0] == []  # --nodes narrows them
    assert "not in partition cpu" in retest_candidates(parse_show_nodes(lines), None, "cpu")[1]["gpu-c"]
    assert candidates(parse_show_nodes(lines), None, None, None)[0] == ["gpu-a", "gpu-b"]  # never an ordinary candidate
    assert "--act" in retest_refused(False, False, None)
    assert "report_only" in retest_refused(True, True, None)
    assert "[internode] reservation maint" in retest_refused(True, False, "maint")
    assert retest_refused(True, False, None) is None
