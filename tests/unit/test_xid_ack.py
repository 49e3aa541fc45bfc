"""Xids that are dealt with stay dealt with (issue 13), pure: which Xid events an acknowledgement
leaves counting, the acks file and our refusal comments under any input, a GPU reset seen by its
volatile counters.  Through the real CLI: tests/cli/test_xid_ack.py."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from healthcheck.decide.xidack import acknowledge, position_key, unacknowledged
from healthcheck.logmodel import KernelLogPosition, XidEvent
from healthcheck.staterecords import XidAck
from healthcheck.pci import kernel_pci

GPU0 = "0000:18:00"  # the fake's GPU 0 (00000000:18:00.0)


def xid_line(xid: int = 48, pci: str = GPU0, stamp: float = 1234.5) -> str:
    return f"[{stamp:12.6f}] NVRM: Xid (PCI:{pci}): {xid}, pid=4242, name=python, Ch 00000008\n"


def test_unacknowledged_keeps_what_came_after_each_gpus_acknowledgement():
    pos = KernelLogPosition(source="/k", offset=100, inode=1)
    old = XidEvent(GPU0, 48, "old", occurrences=3)
    other = XidEvent("0000:28:00", 48, "never acknowledged")
    ack = XidAck(pci=GPU0, position=pos, acked_at=1.0)
    assert unacknowledged([old, other], {GPU0: ack}, {position_key(pos): ()}) == (other,)
    new = XidEvent(GPU0, 48, "new", occurrences=1)
    assert unacknowledged([old, other], {GPU0: ack}, {position_key(pos): (new,)}) == (new, other)


def test_an_acknowledgement_counts_only_where_a_failing_xid_was_dealt_with():
    pos = KernelLogPosition(source="/k")
    acks = acknowledge({}, [GPU0, "0000:28:00"], [XidEvent(GPU0, 48, "DBE"), XidEvent("0000:28:00", 13, "app")],
                       pos, None, 5.0, "ack")
    assert (acks[GPU0].count, acks["0000:28:00"].count) == (1, 0)
    assert acknowledge(acks, [GPU0], [XidEvent(GPU0, 79, "off")], pos, None, 6.0, "resume")[GPU0].count == 2
    assert kernel_pci("00000000:18:00.0") == GPU0 and kernel_pci("junk") is None


def test_reinit_lines_are_not_events_of_their_own():
    from healthcheck.read.kernlog import aggregate, iter_events, parse_lines
    lines = [xid_line(), "[  2.0] NVRM: GPU at PCI:0000:18:00: GPU-fa4e0000-0000-4000-8000-000000000000\n"]
    assert [e.xid for e in parse_lines(lines)] == [48]
    assert aggregate(e for e in iter_events(lines) if e is not None).events == ()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_a_corrupt_acks_file_is_an_error_not_a_crash(raw):
    from healthcheck.act.state import acks_from_json
    try:
        acks = acks_from_json(raw)
    except (ValueError, TypeError):
        return
    assert all(isinstance(a, XidAck) for a in acks.values())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_refused_comments_parse_or_are_not_ours(text):
    from healthcheck.decide.verdict import REFUSED_MARK, refused_comment, refused_reason, refused_time
    assert refused_reason(text) is None or text.startswith(REFUSED_MARK)
    refused_time(text)
    comment = refused_comment("gpu-healthcheck: gpu1 gpu.lost=GPU_IS_LOST node " + text[:50], "T")
    assert refused_reason(comment).startswith("gpu-healthcheck: gpu1 gpu.lost=GPU_IS_LOST node")


def test_volatile_counters_below_the_noted_ones_mean_the_gpu_was_reset():
    from healthcheck.model import GpuSnapshot
    from healthcheck.decide.xidack import counters_started_over, volatile_ecc
    dbe = GpuSnapshot(index=0, pci_bus_id="00000000:18:00.0", ecc_volatile_uncorrected=1,
                      ecc_volatile_corrected=5)
    assert volatile_ecc([dbe]) == ((GPU0, 6),)
    assert counters_started_over(((GPU0, 6),), [dbe]) == ()
    assert counters_started_over(((GPU0, 6),), [dbe._replace(ecc_volatile_uncorrected=0, ecc_volatile_corrected=0)]) == (GPU0,)
    assert counters_started_over(((GPU0, 6),), [dbe._replace(ecc_volatile_uncorrected=None)]) == ()
    assert counters_started_over(((GPU0, 6),), [dbe._replace(lost="GPU_IS_LOST", ecc_volatile_uncorrected=0)]) == ()
