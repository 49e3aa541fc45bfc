"""`gpu-healthcheck --history [N]`: the node's last verdicts, read back from the history file
that act.history appends to (read-only; corrupt lines are skipped, each with a note).

    records, notes = read_history("/var/lib/gpu-healthcheck/history.jsonl")
"""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

from ..act.history import HistoryError
from ..decide.exitcodes import done_exit
from ..safefile import Locked, open_dir_nofollow, open_in, read_fd

if TYPE_CHECKING:
    from ..config import Config

_RANK = {"fail": 3, "unknown": 2, "warn": 1, "info": 0}


def _read(dfd: int, name: str, path: str) -> Optional[bytes]:
    try:
        fd = open_in(dfd, name, path)
    except HistoryError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def parse_lines(data: bytes, source: str) -> Tuple[List[Dict[str, Any]], List[str]]:
    """(records, notes): corrupt lines are skipped, each with a note naming file and line."""
    records, notes = [], []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            notes.append(f"{source}:{number}: skipped a corrupt line ({str(exc)[:80]})")
            continue
        records.append(record)
    return records, notes


def read_history(path: str) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Every record in path.1 then path, oldest first, and notes on skipped lines.

    Raises:
        HistoryError: the directory or a file exists but cannot be read.
    """
    directory, name = os.path.split(os.path.abspath(path))
    try:
        dfd = open_dir_nofollow(directory)
    except HistoryError as exc:
        if exc.errno == errno.ENOENT:
            return [], []
        raise
    try:
        # shared lock: a rotation between reading .1 and the file would show runs twice or not at all
        with Locked(dfd, name + ".lock", path + ".lock", exclusive=False, create=False):
            older = _read(dfd, name + ".1", path + ".1")
            newer = _read(dfd, name, path)
    finally:
        os.close(dfd)
    records: List[Dict[str, Any]] = []
    notes: List[str] = []
    for data, source in ((older, path + ".1"), (newer, path)):
        if data:
            got, why = parse_lines(data, source)
            records += got
            notes += why
    return records, notes


def _worst_finding(record: Dict[str, Any]) -> str:
    findings = [f for f in record.get("findings") or () if isinstance(f, dict)]
    if record.get("internal_error"):
        events = record.get("events") or [{}]
        last = str(events[0].get("message") or "").strip().splitlines()
        return f"internal error: {last[-1] if last else '?'}"[:100]
    if not findings:
        return ""
    worst = max(findings, key=lambda f: _RANK.get(str(f.get("severity")), 0))
    where = f"gpu{worst['gpu']} " if worst.get("gpu") is not None else ""
    serial = f" sn={worst['serial']}" if worst.get("serial") else ""
    value = f"={worst['value']}" if worst.get("value") is not None else ""
    more = f" (+{len(findings) - 1})" if len(findings) > 1 else ""
    return f"{where}{worst.get('check')}{value}{serial}{more}"


def _action_text(record: Dict[str, Any]) -> str:
    action = record.get("action") or {}
    taken = str(action.get("taken") or "none")
    if action.get("pending"):
        return f"{taken} (pending)"
    if action.get("refused"):
        return "refused"
    if action.get("dry_run") and action.get("reason"):
        return "would drain"
    return taken


def format_table(records: Sequence[Dict[str, Any]]) -> Iterator[str]:
    rows = [("TIME", "MODE", "JOB", "VERDICT", "ACTION", "WORST FINDING")]
    for r in records:
        verdict = ("INTERNAL-ERROR" if r.get("internal_error") else "TERMINATED" if r.get("terminated")
                   else str(r.get("verdict") or "?"))
        mode = str(r.get("mode") or "?") + (" (full)" if r.get("level") == "full" else "")
        rows.append((str(r.get("time") or "?"), mode,
                     str(r.get("job_id") or "-"), verdict, _action_text(r), _worst_finding(r)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        yield "  ".join([row[i].ljust(widths[i]) for i in range(5)] + [row[5]]).rstrip()


def show_history(config: "Config", n: int, as_json: bool, out: TextIO,
                 err: Optional[TextIO] = None) -> int:
    """`--history [N]`: the last N runs, newest last.  Exit 0, or 3 when unreadable."""
    err = err if err is not None else sys.stderr
    path = config.history_path()
    try:
        records, notes = read_history(path)
    except HistoryError as exc:
        print(f"gpu-healthcheck: --history: cannot read the history {path}: {exc.strerror or exc}",
              file=err)
        return done_exit(False)
    for note in notes:
        print(f"gpu-healthcheck: --history: {note}", file=err)
    records = records[-n:] if n > 0 else []
    if as_json:
        json.dump(records, out, indent=2, default=str)
        out.write("\n")
        return done_exit(True)
    if not records:
        out.write(f"no runs recorded in {path}\n")
        return done_exit(True)
    for line in format_table(records):
        out.write(line + "\n")
    return done_exit(True)
