#!/usr/bin/env python3
"""atheris target: healthcheck.read.kernlog.parse_lines and read_kernel_log on untrusted log text.

    python3 tests/fuzz/fuzz_kernlog.py -max_total_time=20 tests/fuzz/corpus/kernlog

Invariants: never raises; at most one event per line (kmsg records, mode "K": every event
past the window's seq, the end the last record's seq); each event's PCI is the kernel's
lower-case dddd:bb:dd form, its Xid 0..99999 or None, its message printable and <= 512
chars.  The first input byte also selects a structured mode in which a well-formed Xid line,
built from fuzz bytes under every prefix the reader knows, must parse to its Xid and PCI.
"""

import os
import re
import sys
import tempfile

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.read import kernlog, kmsg
    from healthcheck.logmodel import KernelLogWindow

PCI_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}$")
PREFIXES = ["", "[ 12.000001] ", "[Wed Jul 31 23:14:18 2024] ", "Oct 06 17:59:27 h kernel: ",
            "2024-10-06T17:59:27+02:00 h kernel: ", "6,77,123456,-;"]
TMP = tempfile.mkdtemp(prefix="fuzz-kernlog-")
LOG = os.path.join(TMP, "kern.log")


def check_events(events, n_lines):
    assert len(events) <= n_lines, (len(events), n_lines)
    for e in events:
        assert PCI_RE.match(e.pci), e.pci
        assert e.xid is None or 0 <= e.xid <= 99999, e.xid
        assert len(e.message) <= 512 and e.message.isprintable(), e.message


def round_trip(fdp):
    domain, bus, dev = fdp.ConsumeIntInRange(0, 0xFFFF), fdp.ConsumeIntInRange(0, 0xFF), fdp.ConsumeIntInRange(0, 0x1F)
    xid = fdp.ConsumeIntInRange(0, 99999)
    prefix = PREFIXES[fdp.ConsumeIntInRange(0, len(PREFIXES) - 1)]
    tail = fdp.ConsumeUnicodeNoSurrogates(200).replace("\n", " ").replace("\r", " ")
    pci = f"{domain:04x}:{bus:02x}:{dev:02x}"
    line = f"{prefix}NVRM: Xid (PCI:{pci}): {xid}, {tail}"
    events = kernlog.parse_lines([line], year=2024)
    assert len(events) == 1 and (events[0].pci, events[0].xid) == (pci, xid), (line, events)


def kmsg_records(data: bytes) -> None:
    """Raw /dev/kmsg records (NUL-separated here), windowed by seq: never raises; every event
    is past the window's seq or carries none; the end is the last record's seq."""
    records = data.split(b"\0")
    since = len(data) % 1000
    window = KernelLogWindow(since_seq=since)
    read = kernlog.read_kmsg_records(records, window, "/dev/kmsg")
    check_events(read.events, len(records))
    assert all(e.seq is None or e.seq > since for e in read.events)
    assert read.end.seq == kmsg.record_seq(records[-1]), (read.end, records[-1][:80])
    kmsg.find_marker(records, "00ff")


def TestOneInput(data: bytes) -> None:
    if data[:1] == b"X":
        round_trip(atheris.FuzzedDataProvider(data[1:]))
        return
    if data[:1] == b"K":
        kmsg_records(data[1:])
        return
    text = _common.text(data)
    lines = text.splitlines(keepends=True)
    check_events(kernlog.parse_lines(lines), len(lines))
    check_events(kernlog.parse_lines(lines, year=1), len(lines))  # syslog dates step back a year
    # the file reader: bytes as they lie on disk, read whole
    raw = _common.expand(data)
    with open(LOG, "wb") as handle:
        handle.write(raw)
    read = kernlog.read_kernel_log(LOG, KernelLogWindow())
    assert read.error is None, read.error
    check_events(read.events, raw.count(b"\n") + 1)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
