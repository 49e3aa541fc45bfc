"""journald entries, pure parts: message ids, entry fields, the socket check and a failing send
(tests/cli/test_journal.py sends them through the real native protocol)."""

from __future__ import annotations

import socket
from typing import List

from healthcheck.act.journal import (JOURNAL_SOCKET, MESSAGE_IDS, entry_fields, send_events,
                                     unavailable_reason)
from healthcheck.model import CRIT, ERR, LogEvent


def test_message_ids_are_fixed_distinct_128_bit_hex():
    assert set(MESSAGE_IDS) == {"summary", "finding", "drain", "resume", "refused", "pending",
                                "error", "internal-error", "repair"}
    assert len(set(MESSAGE_IDS.values())) == len(MESSAGE_IDS)
    assert all(len(v) == 32 and int(v, 16) >= 0 and v == v.lower() for v in MESSAGE_IDS.values())
    assert MESSAGE_IDS["drain"] == "f28447839a384d19bb588e4f505a3f7e"  # documented; never change


def test_entry_fields_carry_event_fields_and_drop_invalid_names():
    items = entry_fields("finding", ERR, "GPU 2 ...", {
        "GPU_SERIAL": "1650522003802", "GPU_INDEX": "2", "SLURM_JOB_ID": "",
        "_PID": "1", "lower": "x", "MESSAGE": "smuggled", "PRIORITY": "7"}, mode="epilog")
    entry = dict(i.split("=", 1) for i in items)
    assert entry == {"MESSAGE": "GPU 2 ...", "PRIORITY": "3", "SYSLOG_IDENTIFIER": "gpu-healthcheck",
                     "GPU_HEALTHCHECK_EVENT": "finding", "MESSAGE_ID": MESSAGE_IDS["finding"],
                     "GPU_HEALTHCHECK_MODE": "epilog", "GPU_INDEX": "2", "GPU_SERIAL": "1650522003802"}


def test_unavailable_reason(tmp_path):
    assert "does not exist" in unavailable_reason(str(tmp_path / "socket"))
    (tmp_path / "file").write_text("")
    assert "not a socket" in unavailable_reason(str(tmp_path / "file"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "sock"))
    try:
        assert unavailable_reason(str(tmp_path / "sock")) is None
    finally:
        sock.close()
    assert JOURNAL_SOCKET == "/run/systemd/journal/socket"


def test_a_send_that_fails_hands_back_the_rest(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "sock"))
    sent: List[tuple] = []

    def sendv(*items: str) -> None:
        if len(sent) == 1:
            raise OSError(111, "Connection refused")
        sent.append(items)

    events = [LogEvent("finding", ERR, "a"), LogEvent("drain", CRIT, "b"), LogEvent("summary", ERR, "c")]
    try:
        result = send_events(events, "epilog", str(tmp_path / "sock"), sendv)
    finally:
        sock.close()
    assert result.sent == 1 and [e.message for e in result.unsent] == ["b", "c"]
    assert "journal unavailable" in result.problem and "Connection refused" in result.problem
    assert send_events(events, "node", str(tmp_path / "none"), sendv).unsent == events
