"""The drain protocol (CONTRACTS §4) against an in-process scontrol door (tests/lib/slurmdoor.py):
every outcome of act.slurm.Slurm, what it changed in "slurmctld", what it logged and kept."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest

from healthcheck.act.slurm import Slurm, report_only
from healthcheck.act.state import StateStore, read_our_drain
from healthcheck.config import Config, DrainConfig
from healthcheck.decide.verdict import NodeState, drain_reason
from healthcheck.model import (Action, DoorError, Finding, GpuSnapshot, LogEvent, Mode, NodeAction,
                               NodeSnapshot, Outcome, Severity)
from healthcheck.staterecords import PendingDrain

from tests.lib.slurmdoor import FakeDoor, stamp

GPU2 = GpuSnapshot(index=2, uuid="GPU-2", serial="1650522003802", pci_bus_id="00000000:38:00.0",
                   ecc_volatile_uncorrected=0)
DBE = Finding("ecc.volatile_uncorrected", Severity.FAIL, "GPU 2: 3 volatile uncorrected ECC errors",
              gpu=2, value=3, threshold=0, action=Action.RESET)
REASON = drain_reason([DBE], [GPU2], Mode.EPILOG, "42")
FIELDS = {"GPU_HEALTHCHECK_MODE": "epilog", "SLURMD_NODENAME": "gpu-a"}


def cluster(n: int = 10, **states: Tuple[str, str]) -> List[NodeState]:
    """n idle GPU nodes gpu-a, gpu-b, ...; states: name -> (state, reason)."""
    nodes = []
    for i in range(n):
        name = f"gpu-{chr(ord('a') + i)}"
        state, reason = states.get(name.replace("-", "_"), ("IDLE", None))
        nodes.append(NodeState(name, state, reason, stamp(-60) if reason else None, "gpu:8"))
    return nodes


def slurm(door: FakeDoor, max_fraction: float = 0.1, sleeps: "List[float] | None" = None) -> Slurm:
    config = Config(drain=DrainConfig(max_fraction=max_fraction))
    return Slurm(config, {}, ctl=door, sleep=(sleeps.append if sleeps is not None else lambda s: None))


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(str(tmp_path / "state"))


def drain(s: Slurm, store: StateStore, events: List[LogEvent], **kw: object) -> NodeAction:
    return s.drain(store, "gpu-a", REASON, Mode.EPILOG, "42", events, FIELDS, **kw)  # type: ignore[arg-type]


def test_a_drain_applied_names_the_gpu_ties_the_job_and_notes_it_as_ours(store: StateStore) -> None:
    door, events = FakeDoor(cluster()), []
    action = drain(slurm(door), store, events, counters=(("0000:38:00", 3),))
    assert action == NodeAction("drain", REASON, outcome=Outcome.APPLIED)
    assert door.nodes["gpu-a"].state == "IDLE+DRAIN" and door.nodes["gpu-a"].reason == REASON
    assert door.admin_comments == {"42": REASON}
    assert [(e.kind, e.outcome) for e in events] == [("drain", Outcome.APPLIED)]
    assert events[0].journal_fields["GPU_HEALTHCHECK_OUTCOME"] == "applied"
    ours = read_our_drain(store)
    assert ours is not None and ours.reason == REASON and ours.volatile_ecc == (("0000:38:00", 3),)


def test_a_node_an_admin_drained_keeps_their_reason(store: StateStore) -> None:
    door, events = FakeDoor(cluster(gpu_a=("IDLE+DRAIN", "bad fan, ticket 123"))), []
    action = drain(slurm(door), store, events)
    assert action.outcome is Outcome.ADMIN_OWNED and action.taken == "none"
    assert door.changes() == [] and door.nodes["gpu-a"].reason == "bad fan, ticket 123"
    assert events[0].outcome is Outcome.KEPT and "ours would be: " + REASON in events[0].message
    assert read_our_drain(store) is None


def test_a_node_we_drained_already_is_left_as_it_is(store: StateStore) -> None:
    earlier = drain_reason([DBE], [GPU2], Mode.PROLOG, "41")
    door, events = FakeDoor(cluster(gpu_a=("IDLE+DRAIN", earlier))), []
    action = drain(slurm(door), store, events)
    assert action.outcome is Outcome.ALREADY_OURS and door.changes() == []
    assert door.nodes["gpu-a"].reason == earlier and read_our_drain(store).reason == earlier  # type: ignore[union-attr]


def test_past_the_budget_the_drain_is_refused_and_noted_in_the_nodes_comment(store: StateStore) -> None:
    other = drain_reason([DBE], [GPU2], Mode.EPILOG, "7")
    door, events = FakeDoor(cluster(gpu_b=("IDLE+DRAIN", other))), []  # budget: 1 of 10
    action = drain(slurm(door), store, events)
    assert action.outcome is Outcome.REFUSED and action.taken == "none"
    assert not door.nodes["gpu-a"].state.endswith("DRAIN")
    assert (door.nodes["gpu-a"].comment or "").startswith("gpu-healthcheck: drain refused")
    assert [(e.kind, e.outcome) for e in events] == [("refused", Outcome.REFUSED)]
    assert "1 of 10 GPU nodes already drained" in events[0].message


def test_a_concurrent_drain_that_ranks_first_makes_ours_step_back(store: StateStore) -> None:
    door, events, sleeps = FakeDoor(cluster()), [], []
    # gpu-b drained a second before us: both read a free budget, only one may keep it
    door.others_drain_during_ours = [NodeState("gpu-b", "IDLE+DRAIN", drain_reason([DBE], [GPU2], Mode.EPILOG, "8"),
                                               stamp(-1), "gpu:8")]
    action = drain(slurm(door, sleeps=sleeps), store, events)
    assert action.outcome is Outcome.REFUSED
    assert door.nodes["gpu-a"].state == "IDLE" and door.nodes["gpu-b"].state == "IDLE+DRAIN"
    assert "gpu-b drained first, so gpu-a resumed itself" in events[0].message
    assert len(sleeps) == 1 and 0 < sleeps[0] <= 3.0  # waited for the controller's clock, bounded


def test_scontrol_without_an_answer_keeps_a_pending_drain_that_the_next_run_applies(store: StateStore) -> None:
    hung, events = FakeDoor(cluster(), hung=True), []
    action = drain(slurm(hung), store, events)
    assert action.outcome is Outcome.PENDING and action.taken == "drain"
    assert len(hung.calls) == 1  # one call timed out; nothing more was tried
    pending, error = store.read_pending()
    assert error is None and pending is not None and (pending.reason, pending.job_id) == (REASON, "42")
    assert events[0].kind == "pending" and "pending drain kept in" in events[0].message
    # The node was failed by our epilog's exit: slurmctld drained it with its own reason.
    door = FakeDoor(cluster(gpu_a=("IDLE+DRAIN", "Epilog error")))
    later: List[LogEvent] = []
    assert slurm(door).apply_pending(store, "gpu-a", later) == REASON
    assert door.nodes["gpu-a"].reason == REASON  # ours replaces Slurm's
    assert door.admin_comments == {"42": REASON}
    assert store.read_pending() == (None, None)


def test_a_pending_drain_of_a_node_back_in_service_is_dropped(store: StateStore) -> None:
    store.write_pending(PendingDrain(reason=REASON, node="gpu-a", mode="epilog", job_id="42", created_at=1.0))
    door, events = FakeDoor(cluster()), []
    assert slurm(door).apply_pending(store, "gpu-a", events) is None
    assert door.changes() == [] and store.read_pending() == (None, None)
    assert events[0].outcome is Outcome.DROPPED and "in service" in events[0].message


def test_an_earlier_pending_drain_is_kept_over_a_later_one(store: StateStore) -> None:
    first = drain_reason([DBE], [GPU2], Mode.PROLOG, "41")
    store.write_pending(PendingDrain(reason=first, node="gpu-a", mode="prolog", job_id="41", created_at=1.0))
    events: List[LogEvent] = []
    drain(slurm(FakeDoor(cluster(), hung=True)), store, events)
    assert store.read_pending()[0].reason == first  # type: ignore[union-attr]
    assert "an earlier pending drain is kept" in events[0].message


def test_report_only_changes_nothing_and_says_what_it_would_do() -> None:
    events: List[LogEvent] = []
    action = report_only("gpu-a", REASON, Mode.PROLOG, events, FIELDS)
    assert action.outcome is Outcome.REPORT_ONLY and action.dry_run and action.flags == {"report_only": True}
    assert events[0].message == f"report_only: would drain (and fail the prolog) gpu-a: {REASON}"


def test_our_drain_resumes_once_the_node_passes_and_the_note_goes(store: StateStore) -> None:
    door = FakeDoor(cluster(gpu_a=("IDLE+DRAIN", REASON)))
    s, events = slurm(door), []
    s.drain(store, "gpu-a", REASON, Mode.EPILOG, "42", [], FIELDS)  # notes it (already ours)
    snapshot = NodeSnapshot(host="gpu-a", gpus=(GPU2,), selected=(2,))
    action = s.maybe_resume(store, "gpu-a", [], snapshot, events, FIELDS, "quick", partial=False)
    assert action == NodeAction("resume", REASON, outcome=Outcome.APPLIED)
    assert door.nodes["gpu-a"].state == "IDLE" and read_our_drain(store) is None


@pytest.mark.parametrize("reason,partial,why", [
    ("bad fan, ticket 123", False, "drained by someone else"),
    (REASON.replace(" epilog", " rma epilog"), False, "drained for RMA"),
    (REASON, True, "only some GPUs were checked"),
])
def test_a_drain_that_is_not_ours_to_lift_stays(store: StateStore, reason: str, partial: bool, why: str) -> None:
    door, events = FakeDoor(cluster(gpu_a=("IDLE+DRAIN", reason))), []
    snapshot = NodeSnapshot(host="gpu-a", gpus=(GPU2,), selected=(2,))
    action = slurm(door).maybe_resume(store, "gpu-a", [], snapshot, events, FIELDS, "quick", partial=partial)
    assert action.taken == "none" and why in action.detail and door.changes() == []
    assert events[0].outcome is Outcome.KEPT


def test_a_drain_still_failing_in_its_own_context_stays() -> None:
    """An epilog drain for a DBE whose volatile counter is still dirty: a warning by hand is
    not enough to resume (judged as the epilog judged it)."""
    dirty = GPU2._replace(ecc_volatile_uncorrected=3)
    door, events = FakeDoor(cluster(gpu_a=("IDLE+DRAIN", REASON))), []
    snapshot = NodeSnapshot(host="gpu-a", gpus=(dirty,), selected=(2,))
    action = slurm(door).maybe_resume(StateStore("/nonexistent"), "gpu-a", [], snapshot, events, FIELDS,
                                      "quick", partial=False)
    assert action.taken == "none" and door.changes() == []


def test_one_door_per_run_once_scontrol_hung_no_later_call_waits_again() -> None:
    door = FakeDoor(cluster(), hung=True)
    s = slurm(door)
    with pytest.raises(DoorError):
        s.node("gpu-a")
    assert s.unanswered()
    with pytest.raises(DoorError, match="not called"):
        s.listpids("gpu-a")  # the shared-GPU lookup sees the same breaker
