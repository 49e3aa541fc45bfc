"""The history file: one JSON line per run, bounded, safe against symlinks (concurrent writers,
forked processes, in tests/cli/test_history.py)."""

from __future__ import annotations

import io
import json
import os
import stat

import pytest

from healthcheck.act.history import HistoryError, append_line, build_record, encode
from healthcheck.config import Config
from healthcheck.model import CRIT, ERR, INFO, LogEvent
from healthcheck.report.history import read_history, show_history


def _line(n: int, pad: int = 0) -> bytes:
    return encode({"seq": n, "pad": "x" * pad})


def test_record_keeps_non_info_findings_action_and_logged_events():
    report = {"mode": "epilog", "node": "gpu-a", "host": "gpu-a", "job_id": "12", "verdict": "fail",
              "duration_s": 0.2, "started_at": "2026-11-29T19:01:02+00:00",
              "gpus": [{"index": 2, "uuid": "GPU-2", "serial": "SN2", "pci_bus_id": "00000000:38:00.0"}],
              "findings": [{"check": "state.baseline", "severity": "info", "gpu": None, "value": None,
                            "message": "no baseline"},
                           {"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 2,
                            "value": 3, "message": "3 errors"}],
              "action": {"taken": "drain", "reason": "gpu-healthcheck: gpu2", "dry_run": False,
                         "detail": "cannot drain", "pending": True}}
    events = [LogEvent("finding", ERR, "3 errors"), LogEvent("pending", CRIT, "cannot drain now"),
              LogEvent("summary", ERR, "epilog: fail"), LogEvent("resume", INFO, "stays drained")]
    record = build_record(report, events, now=1795978862.0)
    assert record["time"] == "2026-11-29T19:01:02+00:00" and record["epoch"] == 1795978862.0
    assert (record["mode"], record["node"], record["job_id"], record["verdict"]) == ("epilog", "gpu-a", "12", "fail")
    assert record["findings"] == [{"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 2,
                                   "pci_bus_id": "00000000:38:00.0", "serial": "SN2", "uuid": "GPU-2",
                                   "value": 3, "message": "3 errors"}]
    assert record["action"] == {"taken": "drain", "reason": "gpu-healthcheck: gpu2", "detail": "cannot drain",
                                "dry_run": False, "refused": False, "pending": True}
    assert [e["kind"] for e in record["events"]] == ["pending", "resume"]
    assert encode(record).count(b"\n") == 1


def test_size_stays_bounded_and_the_newest_lines_are_kept(tmp_path):
    path = str(tmp_path / "h" / "history.jsonl")
    max_bytes = 2000
    for n in range(500):
        append_line(path, _line(n, pad=n % 50), max_bytes)
        size = os.path.getsize(path)
        rotated = os.path.getsize(path + ".1") if os.path.exists(path + ".1") else 0
        assert size <= max_bytes and size + rotated <= 2 * max_bytes
    records, notes = read_history(path)
    seqs = [r["seq"] for r in records]
    assert notes == [] and seqs[-1] == 499
    assert seqs == list(range(seqs[0], 500))  # contiguous: rotation drops only the oldest
    assert len(seqs) > 20


def test_files_are_0600_in_a_new_0700_directory(tmp_path):
    path = tmp_path / "new" / "history.jsonl"
    append_line(str(path), _line(1), 1 << 20)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_corrupt_lines_are_skipped_with_a_note(tmp_path):
    path = tmp_path / "history.jsonl"
    good = [{"time": f"2026-11-29T19:0{i}:00+00:00", "mode": "epilog", "job_id": str(i),
             "verdict": "pass", "findings": [], "action": {"taken": "none"}} for i in range(3)]
    path.write_bytes(encode(good[0]) + b'{"time": "trunc\n' + b"\xff\xfe garbage\n" + b"[1, 2]\n"
                     + encode(good[1]) + encode(good[2]))
    out, err = io.StringIO(), io.StringIO()
    assert show_history(Config(history_file=str(path)), 10, True, out, err) == 0
    assert [r["job_id"] for r in json.loads(out.getvalue())] == ["0", "1", "2"]
    notes = err.getvalue().splitlines()
    assert len(notes) == 3 and all(f"{path}:" in n and "corrupt" in n for n in notes)
    assert f"{path}:2:" in notes[0]


def test_a_symlink_at_the_history_path_is_not_followed(tmp_path):
    target = tmp_path / "etc-shadow"
    target.write_text("root:x:1:\n")
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    path = directory / "history.jsonl"
    path.symlink_to(target)
    with pytest.raises(HistoryError, match="symlink"):
        append_line(str(path), _line(1), 1 << 20)
    assert target.read_text() == "root:x:1:\n"
    # nor when it is the rotation that would reach it: .1 is renamed over, never written through
    path.unlink()
    path.write_bytes(_line(0, pad=100))
    os.chmod(path, 0o600)
    (directory / "history.jsonl.1").symlink_to(target)
    append_line(str(path), _line(1, pad=100), 150)
    assert target.read_text() == "root:x:1:\n"
    assert not os.path.islink(directory / "history.jsonl.1")


def test_a_symlinked_directory_or_lock_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(HistoryError):
        append_line(str(tmp_path / "link" / "history.jsonl"), _line(1), 1 << 20)
    target = tmp_path / "victim"
    target.write_text("keep")
    (real / "history.jsonl.lock").symlink_to(target)
    with pytest.raises(HistoryError, match="symlink"):
        append_line(str(real / "history.jsonl"), _line(1), 1 << 20)
    assert target.read_text() == "keep" and not (real / "history.jsonl").exists()


def test_show_history_table_last_n_newest_last_across_rotation(tmp_path):
    path = tmp_path / "history.jsonl"
    rec = lambda i, verdict, findings=(), action=None: encode({  # noqa: E731
        "time": f"2026-11-29T19:{i:02d}:00+00:00", "mode": "prolog" if i % 2 else "epilog",
        "job_id": str(100 + i), "verdict": verdict, "findings": list(findings),
        "action": action or {"taken": "none"}})
    (tmp_path / "history.jsonl.1").write_bytes(rec(1, "pass") + rec(2, "pass"))
    dbe = {"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 2, "value": 3,
           "serial": "1650522003802"}
    warn = {"check": "remap.pending", "severity": "warn", "gpu": 6, "value": True}
    path.write_bytes(rec(3, "warn", [warn]) + rec(4, "fail", [warn, dbe],
                                                  {"taken": "drain", "pending": True}))
    out = io.StringIO()
    assert show_history(Config(history_file=str(path)), 3, False, out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["TIME", "MODE", "JOB", "VERDICT", "ACTION", "WORST", "FINDING"]
    assert [l.split()[2] for l in lines[1:]] == ["102", "103", "104"]
    assert "gpu2 ecc.volatile_uncorrected=3 sn=1650522003802 (+1)" in lines[3]
    assert "drain (pending)" in lines[3]


def test_unreadable_history_exits_3_with_a_clear_message(tmp_path):
    path = tmp_path / "history.jsonl"
    path.mkdir()
    out, err = io.StringIO(), io.StringIO()
    assert show_history(Config(history_file=str(path)), 5, False, out, err) == 3
    assert f"cannot read the history {path}" in err.getvalue()


def test_no_history_yet_is_not_an_error(tmp_path):
    out = io.StringIO()
    assert show_history(Config(state_dir=str(tmp_path / "none")), 5, False, out) == 0
    assert "no runs recorded" in out.getvalue()
    out = io.StringIO()
    assert show_history(Config(state_dir=str(tmp_path / "none")), 5, True, out) == 0
    assert json.loads(out.getvalue()) == []
