"""act/slurm.Slurm.drain_remote: a node the gang check or the fabric sweep found bad is drained by
the rules of every drain of ours (report_only, an admin's reason kept, the budget), against the
in-process scontrol door."""

from __future__ import annotations

from typing import List

from healthcheck.act.slurm import Slurm
from healthcheck.config import Config, DrainConfig
from healthcheck.decide.verdict import NodeState
from healthcheck.model import LogEvent, Outcome
from tests.lib.slurmdoor import FakeDoor, stamp

REASON = "gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-a,gpu-b all_reduce_perf gang job=12"
GRES = "gpu:8"


def cluster(**states: str) -> FakeDoor:
    nodes = [NodeState(n, states.get(n, "IDLE"), gres=GRES) for n in ("gpu-a", "gpu-b", "gpu-c", "gpu-d")]
    return FakeDoor(nodes)


def drain(door: FakeDoor, config: Config, act: bool = True):
    """The drain, its settle wait before the budget's re-read recorded, not slept (hold_budget's
    own tests in tests/unit/test_drain_protocol.py say how long it waits)."""
    events: List[LogEvent] = []
    action = Slurm(config, {}, ctl=door, sleep=lambda s: None).drain_remote(
        "gpu-c", REASON, act, events, {"GPU_HEALTHCHECK_MODE": "gang"})
    return action.said, events


def test_drain_remote_applies_through_the_door_and_logs_it() -> None:
    door = cluster()
    taken, events = drain(door, Config(drain=DrainConfig(max_fraction=0.5)))
    assert taken == "applied" and door.nodes["gpu-c"].reason == REASON
    assert [e.kind for e in events] == ["drain"] and events[0].fields["SLURMD_NODENAME"] == "gpu-c"


def test_drain_remote_report_only_and_without_act_change_nothing() -> None:
    for config, act in ((Config(drain=DrainConfig(report_only=True)), True), (Config(), False)):
        door = cluster()
        taken, events = drain(door, config, act)
        assert taken == "report_only" and door.changes() == [] and "would drain gpu-c" in events[0].message


def test_drain_remote_keeps_an_admins_drain() -> None:
    door = cluster()
    door.nodes["gpu-c"] = door.nodes["gpu-c"]._replace(state="IDLE+DRAIN", reason="bad cable", reason_time=stamp())
    taken, _ = drain(door, Config(drain=DrainConfig(max_fraction=0.5)))
    assert taken == "admin_owned" and door.nodes["gpu-c"].reason == "bad cable"


def test_drain_remote_refused_past_the_budget() -> None:
    door = cluster()
    door.nodes["gpu-a"] = door.nodes["gpu-a"]._replace(
        state="IDLE+DRAIN", reason="gpu-healthcheck: gpu0 ecc.volatile_uncorrected=1 epilog job=3", reason_time=stamp(-60))
    taken, events = drain(door, Config(drain=DrainConfig(max_fraction=0.25)))
    assert taken == "refused" and "DRAIN" not in door.nodes["gpu-c"].state
    assert events[-1].kind == "refused"


def test_drain_remote_refused_keeps_the_admins_comment() -> None:
    """A refusal notes itself after the site's part of the Comment (a ticket, a word for the
    next admin), as the node drain's refusal does; an older note of ours is replaced."""
    door = cluster()
    door.nodes["gpu-a"] = door.nodes["gpu-a"]._replace(
        state="IDLE+DRAIN", reason="gpu-healthcheck: gpu0 ecc.volatile_uncorrected=1 epilog job=3", reason_time=stamp(-60))
    door.nodes["gpu-c"] = door.nodes["gpu-c"]._replace(
        comment="RT#4711 PSU swapped | gpu-healthcheck: drain refused 2026-01-01T00:00:00Z: old")
    taken, _ = drain(door, Config(drain=DrainConfig(max_fraction=0.25)))
    comment = door.nodes["gpu-c"].comment or ""
    assert taken == "refused"
    assert comment.startswith("RT#4711 PSU swapped | gpu-healthcheck: drain refused "), comment
    assert comment.endswith(REASON) and "old" not in comment and comment.count("gpu-healthcheck: drain refused") == 1


def test_drain_remote_scontrol_silent_is_an_error_and_keeps_nothing_pending() -> None:
    """No run of ours on the remote node would apply a pending drain: the error is said, with
    scontrol's message, and the next sweep or gang check finds the node again."""

    door = cluster()
    door.hung = True
    events: List[LogEvent] = []
    action = Slurm(Config(), {}, ctl=door, sleep=lambda s: None).drain_remote(
        "gpu-c", REASON, True, events, {"GPU_HEALTHCHECK_MODE": "fabric-sweep"})
    assert action.outcome is Outcome.ERROR and action.said.startswith("error: ") and "no answer" in action.said
    assert [e.kind for e in events] == ["error"] and "cannot drain gpu-c" in events[0].message
    assert door.changes() == []
