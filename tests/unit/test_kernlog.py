"""Kernel-log parser and reader: every prefix style, windows, the kernel's own lines, bounded
reads, and fuzzing (tests/readers/test_kernlog.py: the real NVRM lines of tests/fixtures)."""

import pytest
from hypothesis import example, given, settings, strategies as st

from healthcheck.logmodel import KernelLogWindow
from healthcheck.read.kernlog import in_window, parse_lines, position_now, read_kernel_log


def test_identity_lines_are_not_events():
    assert parse_lines(["[Wed Jul 31 23:14:18 2024] NVRM: GPU at PCI:0000:00:05: GPU-efbdfde9"]) == []


def test_kmsg_records_give_seq_and_time():
    events = parse_lines(["4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE"])
    assert (events[0].xid, events[0].pci, events[0].seq) == (48, "0000:3b:00", 1234)
    assert events[0].monotonic_s == pytest.approx(5.678901)


def test_iso_and_dmesg_T_stamps():
    iso = parse_lines(["2024-07-31T23:14:18+0000 host kernel: NVRM: Xid (PCI:0000:41:00): 79, GPU has fallen off the bus."])
    assert iso[0].wallclock == pytest.approx(1722467658.0)
    assert iso[0].xid == 79


def test_window_by_time():
    early, late = parse_lines(["[ 10.0] NVRM: Xid (PCI:0000:01:00): 48, a",
                               "[ 20.0] NVRM: Xid (PCI:0000:01:00): 79, b"])
    window = KernelLogWindow(since_monotonic_s=15.0)
    assert not in_window(early, window) and in_window(late, window)


def test_file_read_from_recorded_position(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:01:00): 48, before the job\n")
    start = position_now(str(log))
    with log.open("a") as handle:
        handle.write("[ 2.0] NVRM: Xid (PCI:0000:02:00): 79, during the job\n")
    read = read_kernel_log(str(log), KernelLogWindow(position=start))
    assert [e.pci for e in read.events] == ["0000:02:00"]
    assert read.error is None


def test_rotated_file_is_read_whole(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("x" * 1000 + "\n")
    start = position_now(str(log))
    log.unlink()
    log.write_text("NVRM: Xid (PCI:0000:02:00): 48, after rotation\n")
    read = read_kernel_log(str(log), KernelLogWindow(position=start))
    assert [e.xid for e in read.events] == [48]


def test_unreadable_log_is_an_error_not_an_exception(tmp_path):
    read = read_kernel_log(str(tmp_path / "absent"), KernelLogWindow())
    assert read.events == () and "cannot read" in read.error


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=20))
def test_parser_never_raises_on_any_text(lines):
    for event in parse_lines(lines):
        assert len(event.pci) == 10


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 99999),
       st.sampled_from(["", "[ 12.000001] ", "[Wed Jul 31 23:14:18 2024] ", "Oct 06 17:59:27 h kernel: ",
                        "6,77,123456,-;"]),
       st.text(max_size=80))
@example(0, 0, 0, 0, "Oct 06 17:59:27 h kernel: ", "\n0")  # a stray newline in the message
def test_any_well_formed_xid_line_round_trips(domain, bus, dev, xid, prefix, tail):
    pci = f"{domain:04x}:{bus:02x}:{dev:02x}"
    events = parse_lines([f"{prefix}NVRM: Xid (PCI:{pci}): {xid}, {tail}"])
    assert (events[0].pci, events[0].xid) == (pci, xid)


# --- issue 17: only the kernel's lines, and bounded work on any log size ------------------

FORGED = [
    "Nov 30 12:00:00 gpu-a backup[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
    "2026-11-30T12:00:00+0000 gpu-a backup[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x",
    "backup[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x",
    "14,99,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x",  # facility user: echo > /dev/kmsg
]
KERNEL = [
    "Nov 30 12:00:00 gpu-a kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
    "2026-11-30T12:00:00+0000 gpu-a kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x",
    "Nov 30 12:00:00 gpu-a kernel: [ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x",
    "3,99,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x",
]


@pytest.mark.parametrize("line", FORGED)
def test_a_program_writing_an_xid_line_is_not_the_kernel(line):
    assert parse_lines([line]) == []


@pytest.mark.parametrize("line", KERNEL)
def test_the_kernels_own_lines_count(line):
    assert [(e.xid, e.pci) for e in parse_lines([line])] == [(79, "0000:3b:00")]


def test_a_messages_file_counts_the_kernels_line_and_the_forged_ones_apart(tmp_path):
    log = tmp_path / "messages"
    log.write_text("\n".join(FORGED[:3] + KERNEL[:1]) + "\n")
    read = read_kernel_log(str(log), KernelLogWindow())
    assert [(e.xid, e.occurrences) for e in read.events] == [(79, 1)]
    assert read.ignored_lines == 3


def test_a_log_larger_than_the_scan_bound_is_read_from_its_newest_part(tmp_path):
    log = tmp_path / "kern.log"
    old = "[1.0] NVRM: Xid (PCI:0000:41:00): 48, pid=1, DBE\n"
    new = "[2.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, off the bus\n"
    log.write_text(old + "x" * 10_000 + "\n" + new)
    read = read_kernel_log(str(log), KernelLogWindow(), max_scan_bytes=4096)
    assert [e.xid for e in read.events] == [79]
    assert read.skipped_bytes == log.stat().st_size - 4096


def test_escape_sequences_and_newlines_in_a_kernel_line_are_neutralised():
    [event] = parse_lines(["[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=\x1b[2Kevil\x1b]0;x\x07, y"])
    assert "\x1b" not in event.message and "\x07" not in event.message
