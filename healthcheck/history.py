"""The node's own history: one JSON line per run, kept even where there is no journald.

    append_run(config, outcome, "epilog")         # <state_dir>/history.jsonl, mode 0600
    show_history(config, 20, as_json=False, out=sys.stdout)   # `gpu-healthcheck --history 20`

One line (a JSON object, schema 1):

    {"schema": 1, "time": "2026-11-29T19:01:02+00:00", "epoch": 1795978862.1, "mode": "epilog",
     "node": "gpu-a", "host": "gpu-a", "job_id": "1234", "verdict": "fail", "duration_s": 0.21,
     "level": "quick", "probes": [{"gpu": 2, "status": "ok", "bytes_tested": 268435456}],
     "findings": [{"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 2,
                   "pci_bus_id": "00000000:38:00.0", "serial": "1650522003802", "uuid": "GPU-...",
                   "value": 3, "message": "..."}],
     "action": {"taken": "drain", "reason": "gpu-healthcheck: ...", "detail": "...",
                "refused": false, "pending": true},
     "events": [{"kind": "pending", "priority": 2, "message": "cannot drain gpu-a now ..."}]}

An internal error of gpu-healthcheck itself is a line with "internal_error": true and the
traceback as an event of kind "internal-error".

Bounded: when the next line would take the file past history_max_bytes it is renamed to
<file>.1 (replacing the older .1), so the pair never holds more than about twice the limit and
always the newest runs.  Appends and rotation happen under flock(<file>.lock): concurrent
prologs neither lose nor interleave lines.  We run as root, so the file is opened with
O_NOFOLLOW relative to a directory opened with O_NOFOLLOW: a planted symlink fails the write
rather than redirecting it.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import stat
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

if TYPE_CHECKING:
    from .config import Config
    from .runner import LogEvent, RunOutcome

SCHEMA = 1
LOGGED_KINDS = ("drain", "resume", "refused", "pending", "error")
MAX_MESSAGE_CHARS = 2000  # one line stays small enough that the size bound means something
MAX_ITEMS = 64  # findings / events kept per line; the rest are counted, not lost silently
_RANK = {"fail": 3, "unknown": 2, "warn": 1, "info": 0}


class HistoryError(OSError):
    """The history file cannot be written or read, with the path and what is wrong."""


# --- the record (pure) -------------------------------------------------------------------

def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).isoformat(timespec="seconds")


def _clip(text: Any) -> Any:
    """Head and tail of a long text: a traceback's last line names the exception."""
    if isinstance(text, str) and len(text) > MAX_MESSAGE_CHARS:
        half = MAX_MESSAGE_CHARS // 2
        return f"{text[:half]}\n... [{len(text) - 2 * half} chars left out] ...\n{text[-half:]}"
    return text


def _event_item(event: "LogEvent") -> Dict[str, Any]:
    return {"kind": event.kind, "priority": event.priority, "message": _clip(event.message)}


def build_record(report: Dict[str, Any], events: Sequence["LogEvent"], now: float) -> Dict[str, Any]:
    """The history line of one run, from its JSON report and log events (pure)."""
    gpus = {g.get("index"): g for g in report.get("gpus") or ()}
    findings = []
    for f in report.get("findings") or ():
        if f.get("severity") == "info":
            continue
        gpu = gpus.get(f.get("gpu"), {}) if f.get("gpu") is not None else {}
        findings.append({"check": f.get("check"), "severity": f.get("severity"), "gpu": f.get("gpu"),
                         "pci_bus_id": gpu.get("pci_bus_id"), "serial": gpu.get("serial"),
                         "uuid": gpu.get("uuid"), "value": f.get("value"),
                         "message": _clip(f.get("message"))})
    action = report.get("action") or {}
    logged = [_event_item(e) for e in events if e.kind in LOGGED_KINDS]
    record: Dict[str, Any] = {
        "schema": SCHEMA, "time": _iso(now), "epoch": round(now, 3),
        "started_at": report.get("started_at"), "mode": report.get("mode"),
        "node": report.get("node"), "host": report.get("host"), "job_id": report.get("job_id"),
        "verdict": report.get("verdict"), "duration_s": report.get("duration_s"),
        "tool_version": report.get("tool_version"), "level": report.get("level"),
        "probes": [{"gpu": p.get("gpu"), "status": p.get("status"),
                    "bytes_tested": p.get("bytes_tested")} for p in report.get("probes") or ()],
        "findings": findings[:MAX_ITEMS],
        "action": {"taken": action.get("taken", "none"), "reason": action.get("reason"),
                   "detail": _clip(action.get("detail")),
                   "dry_run": bool(action.get("dry_run")),
                   "refused": bool(action.get("refused")), "pending": bool(action.get("pending"))},
        "events": logged[:MAX_ITEMS],
    }
    dropped = max(0, len(findings) - MAX_ITEMS) + max(0, len(logged) - MAX_ITEMS)
    if dropped:
        record["items_dropped"] = dropped
    return record


def internal_error_record(mode: str, trace: str, now: float, node: Optional[str] = None,
                          host: Optional[str] = None) -> Dict[str, Any]:
    """The history line for a crash of gpu-healthcheck's own code (pure)."""
    return {"schema": SCHEMA, "time": _iso(now), "epoch": round(now, 3), "mode": mode,
            "node": node, "host": host, "job_id": None, "verdict": None, "internal_error": True,
            "findings": [], "action": {"taken": "none", "reason": None, "detail": None,
                                        "dry_run": False, "refused": False, "pending": False},
            "events": [{"kind": "internal-error", "priority": 2, "message": _clip(trace)}]}


def terminated_record(mode: str, message: str, now: float, node: Optional[str],
                      host: Optional[str], job_id: Optional[str]) -> Dict[str, Any]:
    """The history line for a run stopped by SIGTERM before it could decide (pure)."""
    record = internal_error_record(mode, message, now, node, host)
    record.update(job_id=job_id, internal_error=False, terminated=True,
                  events=[{"kind": "error", "priority": 2, "message": _clip(message)}])
    return record


def append_terminated(config: "Config", mode: str, message: str, node: Optional[str],
                      job_id: Optional[str]) -> str:
    path = config.history_path()
    host = os.uname().nodename.split(".")[0]
    append_line(path, encode(terminated_record(mode, message, time.time(), node or host, host,
                                               job_id)), config.history_max_bytes)
    return path


def encode(record: Dict[str, Any]) -> bytes:
    """One line; default=str so a value of an unexpected type never loses the whole line."""
    return (json.dumps(record, sort_keys=True, default=str, separators=(",", ":")) + "\n").encode()


# --- writing -----------------------------------------------------------------------------

def _open_dir(path: str) -> int:
    """Open (creating 0700) the history directory without following a symlink at its end.

    Unlike state.open_private_dir this does not chmod an existing directory: history_file may be put in
    a shared directory such as /var/log, whose mode is not ours to change.  A directory other
    users can write into is refused: they could swap our file.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise HistoryError(exc.errno, f"cannot create {path}: {exc.strerror}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise HistoryError(exc.errno, f"{path}: not a directory we can use "
                                      f"({exc.strerror}; a symlink is refused)") from None
    st = os.fstat(fd)
    if st.st_uid not in (os.geteuid(), 0):
        os.close(fd)
        raise HistoryError(0, f"{path} is owned by uid {st.st_uid}, not by us or root")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        # even sticky (/tmp): a user's own file there is hers to turn into a FIFO or a link
        os.close(fd)
        raise HistoryError(0, f"{path} is writable by group or others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}): refusing to use it")
    return fd


def _open_file(dfd: int, name: str, flags: int, path: str, writing: bool = True) -> int:
    """open(name) in dfd, refusing symlinks and anything but a regular file; for writing also
    hard links and files of another owner."""
    try:
        # O_NONBLOCK: a FIFO planted here must not block us (opening one for writing with no
        # reader would wait forever, even in the SIGTERM handler); fstat below refuses it
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise HistoryError(exc.errno, f"{path} is a symlink; refusing to follow it") from None
        raise HistoryError(exc.errno, f"cannot open {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    # A hard link planted to another file would pass O_NOFOLLOW; nlink catches it.
    if not stat.S_ISREG(st.st_mode) or (writing and (st.st_nlink != 1 or st.st_uid != os.geteuid())):
        os.close(fd)
        raise HistoryError(0, f"{path} is not a regular file of ours (refusing to write)")
    return fd


class _Locked:
    """flock on <file>.lock, held while appending/rotating (exclusive) or reading (shared)."""

    def __init__(self, dfd: int, name: str, path: str, exclusive: bool, create: bool) -> None:
        self.fd: Optional[int] = None
        flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
        try:
            self.fd = _open_file(dfd, name + ".lock", flags, path + ".lock", writing=create)
        except HistoryError as exc:
            if create or exc.errno != errno.ENOENT:
                raise
            return  # nobody ever wrote here: nothing to lock against
        fcntl.flock(self.fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)

    def __enter__(self) -> "_Locked":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock


def append_line(path: str, line: bytes, max_bytes: int) -> None:
    """Append one line to path, rotating to path.1 first if it would pass max_bytes.

    Raises:
        HistoryError: the directory or file cannot be used (symlink, not ours, I/O error).
    """
    directory, name = os.path.split(os.path.abspath(path))
    dfd = _open_dir(directory)
    try:
        with _Locked(dfd, name, path, exclusive=True, create=True):
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
            fd = _open_file(dfd, name, flags, path)
            size = 0
            try:
                size = os.fstat(fd).st_size
                if size > 0 and size + len(line) > max_bytes:
                    os.close(fd)
                    fd = -1
                    # rename, not copy: atomic, and a reader holding the old file still sees
                    # whole lines.  The older .1 is dropped: rotation keeps the newest.
                    os.rename(name, name + ".1", src_dir_fd=dfd, dst_dir_fd=dfd)
                    fd = _open_file(dfd, name, flags | os.O_EXCL, path)
                    size = 0
                if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                    # a line cut short by an earlier crash: ours starts on a fresh line, so
                    # only the damaged line is lost, never the next record too
                    line = b"\n" + line
                written = os.write(fd, line)  # one write: O_APPEND keeps it whole
                if written != len(line):
                    raise HistoryError(errno.ENOSPC, f"short write to {path} ({written} of "
                                                     f"{len(line)} bytes): truncated back")
            except OSError as exc:
                if fd >= 0:
                    _truncate_back(fd, size)  # a disk-full write leaves no half line behind
                if isinstance(exc, HistoryError):
                    raise
                raise HistoryError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from None
            finally:
                if fd >= 0:
                    os.close(fd)
    finally:
        os.close(dfd)


def _truncate_back(fd: int, size: int) -> None:
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
    except OSError:
        pass  # the fresh-line rule above still keeps the next record whole


def append_run(config: "Config", outcome: "RunOutcome", now: Optional[float] = None) -> str:
    """Append this run's line to config.history_path(); returns the path.  Raises HistoryError."""
    path = config.history_path()
    record = build_record(outcome.report, outcome.events, time.time() if now is None else now)
    append_line(path, encode(record), config.history_max_bytes)
    return path


def append_internal_error(config: "Config", mode: str, trace: str,
                          node: Optional[str] = None) -> str:
    path = config.history_path()
    host = os.uname().nodename.split(".")[0]
    append_line(path, encode(internal_error_record(mode, trace, time.time(), node or host, host)),
                config.history_max_bytes)
    return path


# --- reading -----------------------------------------------------------------------------

def _read(dfd: int, name: str, path: str) -> Optional[bytes]:
    try:
        fd = _open_file(dfd, name, os.O_RDONLY, path, writing=False)
    except HistoryError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    try:
        chunks: List[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
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
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise HistoryError(exc.errno, f"cannot open {directory}: {exc.strerror}") from None
    try:
        # shared lock: a rotation between reading .1 and the file would show runs twice or not at all
        with _Locked(dfd, name, path, exclusive=False, create=False):
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
        return 3
    for note in notes:
        print(f"gpu-healthcheck: --history: {note}", file=err)
    records = records[-n:] if n > 0 else []
    if as_json:
        json.dump(records, out, indent=2, default=str)
        out.write("\n")
        return 0
    if not records:
        out.write(f"no runs recorded in {path}\n")
        return 0
    for line in format_table(records):
        out.write(line + "\n")
    return 0
