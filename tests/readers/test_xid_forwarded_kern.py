"""Issue 22 item 19: kernel-log lines forwarded with the facility stated (Talos `talosctl
dmesg`: "HOST: kern: LEVEL: [ISO 8601]: MESSAGE", format as in siderolabs/pkgs#792 and
siderolabs/talos#3054) are the kernel's when the facility is `kern`; a user-space facility
is refused.  The NVRM and SXid messages are real lines from tests/fixtures/kernel-log."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, strategies as st

from healthcheck.read.kernlog import parse_lines, parse_sxids

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kernel-log"


def _real(name: str, code: str) -> str:
    rows = [r.split("\t") for r in (FIXTURES / name).read_text().splitlines()[1:]]
    line = next(r[3] for r in rows if r[0] == code)
    return line[line.index("NVRM:") if "NVRM:" in line else line.index("nvidia-nvswitch"):]


XID62 = _real("xid-non-hgx-platform-lines.tsv", "62")
SXID24007 = _real("sxid-lines.tsv", "24007")


def _talos(message: str, facility: str = "kern", level: str = "warning", host: str = "10.5.0.3") -> str:
    return f"{host}: {facility}: {level:>7}: [2025-03-27T17:40:36.123456789Z]: {message}"


def test_xid_forwarded_with_the_kern_facility_counts_with_its_date() -> None:
    """Before: the line was neither dmesg's nor syslog's `kernel:` and was dropped as a
    program's, so a real Xid 62 and an SXid 24007 were missed."""
    [event] = parse_lines([_talos(XID62)])
    assert (event.pci, event.xid) == ("0000:01:00", 62)
    assert event.wallclock is not None and abs(event.wallclock - 1743097236.123456) < 1e-3
    [sxid] = parse_sxids([_talos(SXID24007, level="err")])
    assert (sxid.sxid, sxid.fatal) == (24007, True)
    [padded] = parse_lines([_talos(XID62, level="info", host="k3s-node5.lab")])  # "kern:    info:"
    assert padded.xid == 62


@given(st.sampled_from(["user", "daemon", "syslog", "local0", "local7", "auth", "mail"]))
def test_xid_forwarded_with_a_user_space_facility_is_refused(facility: str) -> None:
    assert parse_lines([_talos(XID62, facility=facility)]) == []
    assert parse_sxids([_talos(SXID24007, facility=facility)]) == []


@given(st.text(max_size=120))
def test_xid_forwarded_parser_never_raises(noise: str) -> None:
    parse_lines([_talos(noise), "x: kern: warning: [" + noise, noise + ": kern: err: [2025-01-01]: NVRM: Xid"])
