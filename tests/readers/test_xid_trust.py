"""Issue 22, items 1, 2, 10 and 11, in process: what an acknowledgement matches, which boot it
belongs to, and when our drain's note is written (act.slurm against tests/lib/slurmdoor.py)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from healthcheck.act.slurm import Slurm
from healthcheck.act.state import StateStore, read_our_drain
from healthcheck.config import Config, DrainConfig
from healthcheck.decide.verdict import NodeState, drain_reason
from healthcheck.decide.xidack import live_acks, position_key, unacknowledged
from healthcheck.logmodel import KernelLogPosition
from healthcheck.model import Action, Finding, GpuSnapshot, LogEvent, Mode, Outcome, Severity
from healthcheck.staterecords import OurDrain, XidAck
from healthcheck.read.kernlog import aggregate, parse_lines

from tests.lib.slurmdoor import FakeDoor, stamp

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kernel-log"
GPU2 = GpuSnapshot(index=2, uuid="GPU-2", serial="1650522003802", pci_bus_id="00000000:38:00.0")
DBE = Finding("xid", Severity.FAIL, "GPU 2: Xid 119", gpu=2, value=119, action=Action.RESET)
REASON = drain_reason([DBE], [GPU2], Mode.NODE, None)


def _nvlink5(pci: str, severity: str) -> str:
    """A real Xid 149 line of this severity (gpud's GB200 test strings, tests/fixtures)."""
    rows = [r.split("\t") for r in (FIXTURES / "xid-blackwell-nvlink5-lines.tsv").read_text().splitlines()[1:]]
    line = next(r[3] for r in rows if r[0] == "149" and f" {severity} " in r[3])
    return line.replace(line[line.index("(PCI:") + 5:line.index(")")], pci)


def test_xid_an_acknowledged_gpus_fatal_nvlink5_line_is_not_matched_to_its_nonfatal_one() -> None:
    """Item 2: after an acknowledgement of the GPU, a Nonfatal 149 and then a Fatal 149 must
    still be two events, the fatal one failing (before: matched on the Xid number only, both
    became the non-fatal event, two warnings and no drain)."""
    from healthcheck.checks.xid import xid_verdict

    pci = "0000:38:00"
    later = aggregate(parse_lines([_nvlink5(pci, "Nonfatal"), _nvlink5(pci, "Fatal")])).events
    assert len(later) == 2
    pos = KernelLogPosition(source="/k", offset=10, inode=1)
    kept = unacknowledged(later, {pci: XidAck(pci=pci, position=pos, acked_at=1.0)}, {position_key(pos): later})
    assert sorted(xid_verdict(e).severity.value for e in kept) == ["fail", "warn"]


def test_xid_acknowledgement_survives_a_clock_step_and_not_a_reboot() -> None:
    """Item 10: an NTP step or a VM resume moves btime by hours; the boot_id stays.  Before,
    btime was compared within 2 s and the step voided every acknowledgement."""
    from healthcheck.logmodel import BootId

    pos = KernelLogPosition(source="/dev/kmsg", monotonic_s=100.0)
    ack = XidAck(pci="0000:38:00", position=pos, acked_at=1.0, boot=1_700_000_000.0,
                 boot_id="4f1c2d7e-8a11-4e0b-9d4a-0c5e3b2a1f00")
    stepped = BootId("4f1c2d7e-8a11-4e0b-9d4a-0c5e3b2a1f00", 1_700_003_600.0)
    assert live_acks({ack.pci: ack}, stepped) == {ack.pci: ack}
    rebooted = BootId("0b9e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c2d", 1_700_000_000.0)
    assert live_acks({ack.pci: ack}, rebooted) == {}


def test_xid_acknowledgement_files_written_with_btime_only_are_of_an_unknown_boot() -> None:
    """Item 10: an acks file from before boot_id holds btime alone.  It keeps its meaning
    where btime still agrees; elsewhere (or with no btime) it hides nothing."""
    from healthcheck.logmodel import BootId

    pos = KernelLogPosition(source="/k", offset=1, inode=1)
    old = XidAck(pci="0000:38:00", position=pos, acked_at=1.0, boot=1_700_000_000.0)
    now = BootId("4f1c2d7e-8a11-4e0b-9d4a-0c5e3b2a1f00", 1_700_000_001.0)
    assert live_acks({old.pci: old}, now) == {old.pci: old}
    assert live_acks({old.pci: old}, now._replace(btime=1_700_090_000.0)) == {}
    assert live_acks({old.pci: old._replace(boot=None)}, now) == {}


def test_current_boot_reads_the_kernels_boot_id(tmp_path: Path) -> None:
    from healthcheck.logmodel import BootId
    from healthcheck.read.kernlog import current_boot

    (tmp_path / "sys" / "kernel" / "random").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "random" / "boot_id").write_text("4f1c2d7e-8a11-4e0b-9d4a-0c5e3b2a1f00\n")
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    assert current_boot(str(tmp_path)) == BootId("4f1c2d7e-8a11-4e0b-9d4a-0c5e3b2a1f00", 1_700_000_000.0)
    assert current_boot(str(tmp_path / "absent")) == BootId(None, None)


# --- the note of our drain (item 11) and the resume's acknowledgement point (item 1) ----------

class Killed(BaseException):
    """SIGKILL right after slurmctld took the drain: nothing of ours runs after it."""


class KilledAfterDrain(FakeDoor):
    def drain(self, node: str, reason: str) -> None:
        super().drain(node, reason)
        raise Killed()


class FailingDrain(FakeDoor):
    def drain(self, node: str, reason: str) -> None:
        from healthcheck.act.scontrol import ScontrolError

        self._call("update", f"NodeName={node}", "State=DRAIN")
        raise ScontrolError(["scontrol", "update"], "Invalid node state specified")


def _nodes(state: str = "IDLE", reason: "str | None" = None) -> List[NodeState]:
    return [NodeState("gpu-a", state, reason, stamp(-60) if reason else None, "gpu:8"),
            NodeState("gpu-b", "IDLE", None, None, "gpu:8")]


def _slurm(door: FakeDoor, kernel_log: Path) -> Slurm:
    return Slurm(Config(drain=DrainConfig(max_fraction=1.0), kernel_log=str(kernel_log)), {}, ctl=door,
                 sleep=lambda s: None)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(str(tmp_path / "state"))


def test_our_drain_note_is_written_before_the_drain_so_a_kill_after_it_keeps_it(store: StateStore,
                                                                               tmp_path: Path) -> None:
    """Item 11: before, the note came after the drain, so SIGKILL between the two left our
    drain looking like an admin's and the admin's resume acknowledged nothing."""
    kern = tmp_path / "kern.log"
    kern.write_text("[ 1.0] NVRM: Xid (PCI:0000:38:00): 119, pid=1, name=python\n")
    door = KilledAfterDrain(_nodes())
    with pytest.raises(Killed):
        _slurm(door, kern).drain(store, "gpu-a", REASON, Mode.NODE, None, [], {})
    ours = read_our_drain(store)
    assert ours is not None and ours.reason == REASON and "DRAIN" in door.nodes["gpu-a"].state
    assert ours.position is not None and ours.position.offset == kern.stat().st_size


def test_our_drain_note_goes_when_the_drain_fails(store: StateStore, tmp_path: Path) -> None:
    """Item 11: a drain slurmctld refused leaves no note (else an admin's later drain of the
    node, once resumed, would pass for our drain's resume)."""
    events: List[LogEvent] = []
    action = _slurm(FailingDrain(_nodes()), tmp_path / "k").drain(store, "gpu-a", REASON, Mode.NODE,
                                                                  None, events, {})
    assert action.outcome is Outcome.PENDING and read_our_drain(store) is None


def test_our_drain_note_that_cannot_be_written_is_an_error_and_the_drain_stands(tmp_path: Path) -> None:
    """Item 11: before, the OSError was swallowed and nobody learnt that the resume would not
    acknowledge the Xids.  A file where state_dir should be: every write fails."""
    (tmp_path / "state").write_text("not a directory")
    store = StateStore(str(tmp_path / "state"))
    events: List[LogEvent] = []
    door = FakeDoor(_nodes())
    action = _slurm(door, tmp_path / "k").drain(store, "gpu-a", REASON, Mode.NODE, None, events, {})
    assert action.outcome is Outcome.APPLIED and "DRAIN" in door.nodes["gpu-a"].state
    [error] = [e for e in events if e.kind == "error"]
    assert "cannot note the drain of gpu-a as ours" in error.message and str(tmp_path / "state") in error.message


def test_xid_resume_deals_with_xids_up_to_where_the_node_was_last_seen_drained(store: StateStore,
                                                                               tmp_path: Path) -> None:
    """Item 1: each run that sees our drain still in moves the note's position on; the
    admin's resume returns the last such position, not the log's end at the next run."""
    kern = tmp_path / "kern.log"
    kern.write_text("[ 1.0] NVRM: Xid (PCI:0000:38:00): 119, pid=1, name=python\n")
    door = FakeDoor(_nodes())
    s = _slurm(door, kern)
    s.drain(store, "gpu-a", REASON, Mode.NODE, None, [], {})
    with kern.open("a") as log:
        log.write("[ 2.0] NVRM: Xid (PCI:0000:38:00): 119, pid=1, name=python\n")  # while drained
    events: List[LogEvent] = []
    assert s.admin_resumed(store, "gpu-a", events) is None  # still drained: noted how far
    seen = kern.stat().st_size
    door.resume("gpu-a")  # the admin resets the GPU and resumes ...
    with kern.open("a") as log:  # ... and the GPU fails again before the next run
        log.write("[ 3.0] NVRM: Xid (PCI:0000:38:00): 119, pid=1, name=python\n")
    upto = s.admin_resumed(store, "gpu-a", events)
    assert upto is not None and upto.offset == seen < kern.stat().st_size
    assert read_our_drain(store) is None
    assert [e.outcome for e in events] == [Outcome.ACKNOWLEDGED]


def test_xid_resume_of_a_note_without_a_position_deals_with_xids_up_to_now(store: StateStore,
                                                                           tmp_path: Path) -> None:
    """A note written before positions were kept: the resume seen now is the point."""
    from healthcheck.act.state import write_our_drain

    kern = tmp_path / "kern.log"
    kern.write_text("x" * 10)
    write_our_drain(store, OurDrain(node="gpu-a", reason=REASON, drained_at=1.0))
    upto = _slurm(FakeDoor(_nodes()), kern).admin_resumed(store, "gpu-a", [])
    assert upto is not None and upto.offset == 10
