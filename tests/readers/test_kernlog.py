"""The kernel-log parser on the real NVRM lines of tests/fixtures/kernel-log, and the reader on
a log of 200,000 lines and on a line of 64 MiB (seconds: the unit layer's own reader tests use
small logs)."""

import pytest

from healthcheck.logmodel import KernelLogWindow
from healthcheck.read.kernlog import parse_lines, read_kernel_log
from tests.lib import fakenode

FIXTURES = fakenode.FIXTURES / "kernel-log"


def real_xid_lines():
    rows = []
    for line in (FIXTURES / "nvrm-xid-lines.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        xid, pci, text = line.split("\t", 2)
        rows.append((int(xid), pci, text))
    return rows


@pytest.mark.parametrize("xid,pci,text", real_xid_lines())
def test_every_real_xid_line_parses_to_its_xid_and_pci(xid, pci, text):
    events = parse_lines([text])
    assert [(e.xid, e.pci) for e in events] == [(xid, pci)]
    assert "NVRM: Xid" in events[0].message


def test_real_lines_carry_their_time():
    rows = {text: (xid, pci) for xid, pci, text in real_xid_lines()}
    for text in rows:
        event = parse_lines([text], year=2024)[0]
        if text.startswith("[2"):
            assert event.monotonic_s == pytest.approx(24128.834365) or event.monotonic_s == pytest.approx(24128.828315)
        elif text.startswith("[") or text.startswith("Okt"):
            assert event.wallclock is not None
        else:
            assert event.monotonic_s is None and event.wallclock is None


def test_fallen_off_the_bus_over_three_lines_has_no_xid_and_keeps_the_first_lines_time():
    lines = (FIXTURES / "nvrm-context-lines.txt").read_text().splitlines()
    events = parse_lines(lines)
    assert len(events) == 1
    assert events[0].xid is None
    assert events[0].pci == "0000:b3:00"
    assert events[0].monotonic_s == pytest.approx(1843.308145)


def test_two_hundred_thousand_xid_31_lines_become_one_event_per_gpu_with_count_times_and_samples(tmp_path):
    log = tmp_path / "kern.log"
    with log.open("w") as handle:
        for i in range(200_000):
            gpu = "3b" if i % 2 else "41"
            handle.write(f"[{10 + i / 1000:.3f}] NVRM: Xid (PCI:0000:{gpu}:00): 31, pid={i}, name=a.out, "
                         f"Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS\n")
        handle.write("[500.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n")
    read = read_kernel_log(str(log), KernelLogWindow())
    assert [(e.pci, e.xid, e.occurrences) for e in read.events] == [
        ("0000:41:00", 31, 100_000), ("0000:3b:00", 31, 100_000), ("0000:3b:00", 48, 1)]
    first = read.events[0]
    assert first.monotonic_s == pytest.approx(10.0) and first.last_monotonic_s == pytest.approx(209.998)
    assert len(first.samples) == 3 and "pid=0," in first.samples[0]
    assert read.lines == 200_001 and read.skipped_bytes == 0


def test_an_endless_line_is_read_in_bounded_pieces(tmp_path):
    import resource
    log = tmp_path / "kern.log"
    with log.open("wb") as handle:
        handle.write(b"NVRM: " + b"x" * (64 << 20) + b"\n")
        handle.write(b"[ 3.0] NVRM: Xid (PCI:0000:41:00): 48, after the long line\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    read = read_kernel_log(str(log), KernelLogWindow())
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert [e.xid for e in read.events] == [48]
    assert grown_kib < 32 * 1024  # the 64 MiB line was never held whole
