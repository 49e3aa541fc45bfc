"""The kernel-log parser on the real NVRM lines of tests/fixtures/kernel-log."""

import pytest

from healthcheck.read.kernlog import parse_lines
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
