"""The worst case of scontrol calls on the drain path, counted on the drain protocol itself
(act.slurm.Slurm against the in-process door), is the one decide.budget,
deploy/slurm/README.md and slurm.conf.example state."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

from healthcheck.act.state import StateStore
from healthcheck.decide.budget import DRAIN_CALLS_MAX
from healthcheck.decide.verdict import NodeState, drain_reason
from healthcheck.model import LogEvent, Mode
from tests.lib.fakenode import ROOT

from tests.lib.slurmdoor import FakeDoor, stamp
from .test_drain_protocol import DBE, GPU2, cluster, drain, slurm


def _calls(door: FakeDoor, tmp_path: Path) -> int:
    events: List[LogEvent] = []
    drain(slurm(door), StateStore(str(tmp_path / "state")), events)
    return len(door.calls)


def test_drain_calls_applied_and_stepped_back_are_at_most_the_stated_worst_case(tmp_path: Path) -> None:
    applied = FakeDoor(cluster())
    assert _calls(applied, tmp_path / "a") == 5  # show, drain, two re-reads, AdminComment
    stepped_back = FakeDoor(cluster())
    stepped_back.others_drain_during_ours = [NodeState(
        "gpu-b", "IDLE+DRAIN", drain_reason([DBE], [GPU2], Mode.EPILOG, "8"), stamp(-1), "gpu:8")]
    assert _calls(stepped_back, tmp_path / "b") == DRAIN_CALLS_MAX == 6  # + resume, Comment
    assert stepped_back.nodes["gpu-a"].state == "IDLE"


def test_drain_calls_the_docs_state_the_counted_worst_case() -> None:
    for path in ("deploy/slurm/README.md", "deploy/slurm/slurm.conf.example"):
        text = re.sub(r"\s*#?\s+", " ", (ROOT / path).read_text())
        assert f"{DRAIN_CALLS_MAX} x scontrol_timeout_s" in text, path
        assert "3 x scontrol_timeout_s" not in text, path
