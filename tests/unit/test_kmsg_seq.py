"""Issue 22 item 9: the kmsg window is by sequence number, not by the printk clock.

The printk timestamp (USEC of a /dev/kmsg record) and CLOCK_MONOTONIC, which the prolog used to
record, drift apart: by hours after a VM pause.  Records here are kmsg records as read() returns
them (`PRI,SEQ,USEC,FLAGS;MESSAGE`), their messages real NVRM lines of tests/fixtures/kernel-log
(nvrm-xid-lines.tsv), their headers written for each case.  Nothing here opens the host's
/dev/kmsg: the session's is an empty file (tests/lib/hermetic.py); the marker protocol is tested
as the pure function that reads its result back (find_marker), and against /dev/null, which
takes a write and stores nothing (as printk.devkmsg's ratelimit does).
"""

from __future__ import annotations

import json
import os
import stat

from hypothesis import given, settings, strategies as st

from healthcheck.act.state import baseline_from_json, record_baseline, StateStore
from healthcheck.decide.xidack import unacknowledged, window_after
from healthcheck.logmodel import KernelLogPosition, KernelLogRead
from healthcheck.model import Baseline, JobContext, Mode, NodeSnapshot
from healthcheck.logmodel import window_since
from healthcheck.read.kernlog import aggregate, in_window, parse_lines, read_kernel_log, read_kmsg_records
from healthcheck.read.kmsg import find_marker, marker_line, marker_seq, position_and_why, record_seq
from healthcheck.read.node import xid_window
from healthcheck.report.document import kernel_log_document
from healthcheck.staterecords import XidAck

BOOT = "0650ac76-2908-4d76-bb4c-49617f62adc8"
XID_119 = "NVRM: Xid (PCI:0000:41:00): 119, pid=2139, name=python, Timeout after 6s of waiting for RPC response from GPU2 GSP!"
XID_48 = "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error) ECC error"
HOUR = 3600.0


def record(seq: int, usec: int, msg: str, pri: int = 4) -> bytes:
    """One kmsg record as read() returns it, with a continuation line as the driver's have."""
    return f"{pri},{seq},{usec},-;{msg}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:41:00.0\n".encode()


def prolog_position(seq: int, monotonic_s: float, boot: str = BOOT) -> KernelLogPosition:
    return KernelLogPosition(source="/dev/kmsg", seq=seq, boot_id=boot, monotonic_s=monotonic_s,
                             wallclock=1.7e9, method="marker")


# --- the window -------------------------------------------------------------------------------

def test_vm_pause_printk_behind_keeps_the_jobs_xid_and_drops_the_old_one():
    """After a VM pause the printk clock is hours behind CLOCK_MONOTONIC: by time, the job's
    own Xid 119 (logged after the prolog, stamped "earlier") was missed."""
    prolog_mono = 10 * HOUR  # CLOCK_MONOTONIC at the prolog
    stream = [record(500, int(2 * HOUR * 1e6), XID_48),            # before the prolog
              record(501, int(2 * HOUR * 1e6) + 10, "gpu-healthcheck marker", pri=14),
              record(502, int(2 * HOUR * 1e6) + 5_000_000, XID_119)]  # the job's, printk 2 h
    window = window_since(prolog_position(501, prolog_mono), BOOT)
    read = read_kmsg_records(stream, window, "/dev/kmsg")
    assert [(e.xid, e.seq) for e in read.events] == [(119, 502)]
    assert read.window == "seq"


def test_vm_pause_printk_ahead_does_not_blame_an_old_xid_on_the_job():
    """The other way round (printk ahead of CLOCK_MONOTONIC): by time, an Xid logged before the
    prolog was the job's, and the epilog drained the node for it."""
    stream = [record(77, int(9 * HOUR * 1e6), XID_48),       # before the prolog, printk 9 h
              record(80, int(9 * HOUR * 1e6) + 1, XID_119)]  # the job's
    window = window_since(prolog_position(78, monotonic_s=1 * HOUR), BOOT)
    read = read_kmsg_records(stream, window, "/dev/kmsg")
    assert [e.xid for e in read.events] == [119]


def test_epilog_window_from_the_baseline_is_by_seq_in_the_same_boot():
    from healthcheck.read.kmsg import current_boot

    boot = current_boot().boot_id
    baseline = Baseline(job_id="7", taken_at=0.0, kernel_log=prolog_position(41, 1e9, boot or "x"))
    snapshot = NodeSnapshot(host="n", baseline=baseline, job=JobContext(job_id="7"))
    window = xid_window(Mode.EPILOG, snapshot, 0.0)
    assert window.since_seq == (41 if boot else None)
    assert window.since_monotonic_s == 1e9  # kept: a line without a seq is judged by it


def test_a_seq_of_another_boot_is_not_compared():
    """Sequence numbers start over at every boot: across boots the window falls back to time."""
    window = window_since(prolog_position(900, monotonic_s=50.0), "another-boot")
    assert window.since_seq is None and window.since_monotonic_s == 50.0
    early, late = parse_lines(["4,5,40000000,-;" + XID_48, "4,6,60000000,-;" + XID_119])
    assert not in_window(early, window) and in_window(late, window)


def test_a_position_without_seq_keeps_the_old_time_window():
    """A baseline the prolog of an older version wrote (no seq): read as before, by time."""
    old = json.dumps({"job_id": "9", "taken_at": 1.0, "gpus": [], "kernel_log": {
        "source": "/dev/kmsg", "offset": None, "inode": None, "monotonic_s": 100.0,
        "wallclock": 1.7e9}}).encode()
    baseline = baseline_from_json(old)
    assert baseline.kernel_log is not None and baseline.kernel_log.seq is None
    window = window_since(baseline.kernel_log, BOOT)
    assert window.since_seq is None and window.since_monotonic_s == 100.0


def test_new_baseline_round_trips_its_seq():
    from healthcheck.act.state import baseline_to_json

    baseline = Baseline(job_id="9", taken_at=1.0, kernel_log=prolog_position(12, 3.0))
    assert baseline_from_json(baseline_to_json(baseline)).kernel_log == prolog_position(12, 3.0)


# --- acknowledgements -------------------------------------------------------------------------

def test_an_ack_at_seq_n_does_not_acknowledge_an_xid_at_n_plus_1_stamped_earlier():
    """The ack's CLOCK_MONOTONIC is hours past the printk stamps: by time, the new Xid 119 at
    seq N+1 came "before" the acknowledgement and stayed hidden for the rest of the boot."""
    stream = [record(300, 1_000_000, XID_119), record(301, 2_000_000, XID_119)]
    everything = read_kmsg_records(stream, window_since(prolog_position(0, 0.0), BOOT), "/dev/kmsg")
    ack_at = prolog_position(300, monotonic_s=5 * HOUR)._replace(method="read")
    later = read_kmsg_records(stream, window_after(ack_at, BOOT), "/dev/kmsg").events
    acks = {"0000:41:00": XidAck(pci="0000:41:00", position=ack_at, acked_at=0.0, boot_id=BOOT)}
    from healthcheck.decide.xidack import position_key

    kept = unacknowledged(everything.events, acks, {position_key(ack_at): later})
    assert [(e.xid, e.seq, e.occurrences) for e in kept] == [(119, 301, 1)]


def test_an_ack_at_the_reads_end_acknowledges_what_was_read():
    stream = [record(10, 1, XID_119), record(11, 2, "some other line")]
    read = read_kmsg_records(stream, window_since(prolog_position(0, 0.0), BOOT), "/dev/kmsg")
    assert (read.end.seq, read.end.method) == (11, "read")  # the last record, NVRM or not
    later = read_kmsg_records(stream, window_after(read.end._replace(boot_id=BOOT), BOOT), "/dev/kmsg")
    assert later.events == ()


# --- the marker protocol ----------------------------------------------------------------------

def test_marker_line_is_the_users_info_record_and_never_an_xid():
    line = marker_line("job 1234 prolog: NVRM: Xid (PCI:0000:41:00): 79\x00", "ab12", 4242)
    assert line.startswith(b"<14>gpu-healthcheck[4242]: job 1234 prolog") and line.endswith(b" ab12\n")
    assert b"NVRM" not in line and b"\x00" not in line
    assert parse_lines([f"14,5,6,-;{line[4:].decode()}"]) == []


def test_find_marker_finds_ours_among_others_and_reports_the_first_seq():
    nonce = "5f0c9e2a11d0b7c3"
    records = [record(900, 1, XID_48),
               b"12,901,2,-;gpu-healthcheck[1]: job 1 prolog: kernel log position 0000000000000000\n",
               b"14,902,3,-;" + marker_line("job 2 prolog", nonce, 7)[4:]]
    assert find_marker(records, nonce) == (902, 900)
    assert find_marker(records[:2], nonce) == (None, 900)
    assert find_marker([], nonce) == (None, None)


def test_a_write_that_stores_nothing_falls_back_to_the_clocks(tmp_path):
    """/dev/null takes the write and stores nothing, as the devkmsg ratelimit does: no marker
    comes back, the position is by the clocks, and the prolog says why."""
    seq, method, why = marker_seq("/dev/null", "job 5 prolog")
    assert (seq, method) == (None, "monotonic") and "did not come back" in why
    position, why = position_and_why("/dev/null", marker=True, label="job 5 prolog")
    assert position.method == "monotonic" and position.seq is None and why
    events = []
    snapshot = NodeSnapshot(host="n")
    written = record_baseline(StateStore(str(tmp_path / "state")), snapshot, "5", "/dev/null", events)
    assert written.method == "monotonic"
    assert [e.message for e in events if "kernel log position for job 5" in e.message]


def test_marker_off_reads_the_buffer_for_the_last_seq(tmp_path):
    position, why = position_and_why("/dev/null", marker=False)
    assert position.method == "monotonic" and "no records" in why  # /dev/null has none
    log = tmp_path / "kern.log"
    log.write_text("x\n")
    position, why = position_and_why(str(log), marker=True)  # a file: its size, no marker
    assert (position.method, position.offset, position.seq, why) == ("offset", 2, None, None)


def test_the_report_says_what_bounded_the_window():
    read = read_kmsg_records([record(3, 1, XID_119)], window_since(prolog_position(2, 9e9), BOOT), "/dev/kmsg")
    document = kernel_log_document(NodeSnapshot(host="n", kernel_log=read))
    assert document["window"] == "seq" and document["position"]["seq"] == 3
    assert document["position"]["method"] == "read"
    assert kernel_log_document(NodeSnapshot(host="n", kernel_log=KernelLogRead()))["position"] is None


def test_a_character_device_read_records_its_end():
    read = read_kernel_log("/dev/null", window_since(prolog_position(2, 0.0), BOOT))
    assert read.error is None and read.end.method == "monotonic" and read.end.seq is None


def test_the_sessions_kmsg_is_not_the_hosts():
    """Hermetic: a run with the default kernel_log writes its marker nowhere on the host."""
    from tests.conftest import ISOLATION

    if os.path.exists(ISOLATION.host.path("/dev/kmsg")):
        assert stat.S_ISREG(os.stat("/dev/kmsg").st_mode)


# --- properties and fuzzing -------------------------------------------------------------------

STREAMS = st.lists(st.tuples(st.integers(0, 10**12), st.sampled_from([XID_48, XID_119, "usb 1-1: new device"]),
                             st.sampled_from([0, 4, 6, 12, 14])), max_size=40)


@settings(max_examples=200, deadline=None)
@given(STREAMS, st.integers(0, 100), st.integers(0, 10**12), st.integers(0, 1000))
def test_seq_window_holds_whatever_the_printk_clock_says(stream, cut, prolog_mono_us, first_seq):
    """Over random streams with random printk stamps: exactly the kernel's records after the
    position's seq are in the window, and the read's end is the last record's seq."""
    records = [record(first_seq + i, usec, msg, pri) for i, (usec, msg, pri) in enumerate(stream)]
    since = first_seq + cut
    read = read_kmsg_records(records, window_since(prolog_position(since, prolog_mono_us / 1e6), BOOT), "k")
    lines = [r.split(b"\n", 1)[0].decode() for r in records]
    expected = aggregate(e for e in parse_lines(lines) if e.seq > since).events
    assert read.events == expected
    assert all(e.seq > since for e in read.events)
    assert read.end.seq == (first_seq + len(stream) - 1 if stream else None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=120), max_size=20), st.text(max_size=20))
def test_record_parser_and_marker_search_never_raise(records, nonce):
    for raw in records:
        seq = record_seq(raw)
        assert seq is None or seq >= 0
    found, first = find_marker(records, nonce.encode("ascii", "replace").hex() or "0")
    assert found is None or first is not None
    read = read_kmsg_records(records, window_since(prolog_position(5, 1.0), BOOT), "k")
    assert read.error is None


# --- a ring buffer that wrapped past the prolog's marker ---------------------------------------

def test_a_ring_buffer_wrapped_past_the_marker_is_a_finding_naming_the_lost_records():
    """The epilog reads from the oldest record left, seq 9000, against the prolog's marker at
    5000: records 5001-8999 (a fatal Xid may be among them) were overwritten during the job."""
    from healthcheck.checks import CheckContext, run_checks
    from healthcheck.config import Config
    from tests.lib.snapshots import NODE

    stream = [record(9000 + i, 9_000_000 + i, f"usb 1-1: chatter {i}") for i in range(3)]
    read = read_kmsg_records(stream, window_since(prolog_position(5000, 10.0), BOOT), "/dev/kmsg")
    assert read.lost_seqs == (5001, 8999) and read.events == ()
    node = NODE._replace(kernel_log=read)
    found, _ = run_checks(node, CheckContext(Config(), Mode.EPILOG, selected=(0,)))
    [wrapped] = [f for f in found if f.check == "xid"]
    assert wrapped.severity.value == "warn" and wrapped.value == 3999
    assert "seq 5001-8999" in wrapped.message and "overwritten" in wrapped.message
    # the volatile counters still judge: a DBE counted during the job fails the epilog as ever
    dbe = node._replace(gpus=(node.gpus[0]._replace(ecc_volatile_uncorrected=1), *node.gpus[1:]))
    found, _ = run_checks(dbe, CheckContext(Config(), Mode.EPILOG, selected=(0,)))
    assert {(f.check, f.severity.value) for f in found} >= {("ecc.volatile_uncorrected", "fail"),
                                                            ("xid", "warn")}
    assert kernel_log_document(node)["lost_seqs"] == [5001, 8999]


def test_a_window_whose_next_record_is_there_lost_nothing():
    stream = [record(5001, 1, XID_119)]
    read = read_kmsg_records(stream, window_since(prolog_position(5000, 10.0), BOOT), "/dev/kmsg")
    assert read.lost_seqs is None and [e.seq for e in read.events] == [5001]
    # a window by time (no seq of this boot) cannot tell
    other_boot = window_since(prolog_position(5000, 10.0, boot="another"), BOOT)
    assert read_kmsg_records([record(9000, 1, XID_119)], other_boot, "/dev/kmsg").lost_seqs is None
