"""The node's own history: one JSON line per run, kept even where there is no journald.

    append_run(config, outcome, "epilog")         # <state_dir>/history.jsonl, mode 0600
    # read back by report/history.py: `gpu-healthcheck --history 20`

One line (a JSON object, schema 1):

    {"schema": 1, "time": "2026-11-29T19:01:02+00:00", "epoch": 1795978862.1, "mode": "epilog",
     "node": "gpu-a", "host": "gpu-a", "job_id": "1234", "verdict": "fail", "duration_s": 0.21,
     "level": "quick", "probes": [{"gpu": 2, "status": "ok", "bytes_tested": 268435456}],
     "findings": [{"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 2,
                   "pci_bus_id": "00000000:38:00.0", "serial": "1650522003802", "uuid": "GPU-...",
                   "value": 3, "message": "..."}],
     "action": {"taken": "drain", "reason": "gpu-healthcheck: ...", "detail": "...",
                "refused": false, "pending": true},
     "events": [{"kind": "pending", "priority": 2, "message": "cannot drain gpu-a now ..."}],
     "gpus": {"1650522003802": {"gpu": 2, "load": true, "sbe": 12, "retired": 0, "remap_low": 0,
                                "pcie_replay": 0, "nvlink_replay": 0}}}

"gpus": each GPU's error counters by serial (gpu_counters); a line without it (an older one, or a
run that read no GPU) has no counters, and the counter rules pass over it.

An internal error of gpu-healthcheck itself is a line with "internal_error": true and the
traceback as an event of kind "internal-error".

Bounded: when the next line would take the file past history_max_bytes it is renamed to
<file>.1 (replacing the older .1), so the pair never holds more than about twice the limit and
always the newest runs.  Appends and rotation happen under flock(<file>.lock): concurrent
prologs neither lose nor interleave lines.  We run as root, so the file is opened through the
safe-file layer (healthcheck.safefile): a planted symlink fails the write rather than
redirecting it.
"""

from __future__ import annotations

import errno
import os
import time
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

from ..historyline import clip, encode, item
from ..safefile import Locked, SafeFileError, open_dir, open_in
from ..text import iso_utc

if TYPE_CHECKING:
    from ..config import Config
    from ..model import LogEvent, RunOutcome

SCHEMA = 1
LOGGED_KINDS = ("drain", "resume", "refused", "pending", "error", "repair", "jobmap")
MAX_ITEMS = 64  # findings / events kept per line; the rest are counted, not lost silently
# An event's field: it was written to the journal and the history when it happened
# (sinks.record_now), so the run's own entries do not repeat it.
RECORDED = "GPU_HEALTHCHECK_RECORDED"


# The history file cannot be written or read: the safe-file layer's error, with the path and
# what is wrong.
HistoryError = SafeFileError


# --- the record (pure) -------------------------------------------------------------------

def _event_item(event: "LogEvent") -> Dict[str, Any]:
    return {"kind": event.kind, "priority": event.priority, "message": clip(event.message)}


def build_record(report: Dict[str, Any], events: Sequence["LogEvent"], now: float) -> Dict[str, Any]:
    """The history line of one run, from its JSON report and log events (pure)."""
    gpus = {g.get("index"): g for g in report.get("gpus") or ()}
    findings = []
    for f in report.get("findings") or ():
        if f.get("severity") == "info":
            continue
        gpu = gpus.get(f.get("gpu"), {}) if f.get("gpu") is not None else {}
        findings.append(item(f.get("check"), f.get("severity"), f.get("gpu"), f.get("value"),
                             f.get("message"), pci_bus_id=gpu.get("pci_bus_id"),
                             serial=gpu.get("serial"), uuid=gpu.get("uuid")))
    action = report.get("action") or {}
    # an event recorded on its own line already (sinks.record_now) is not repeated here
    logged = [_event_item(e) for e in events if e.kind in LOGGED_KINDS and not e.fields.get(RECORDED)]
    record: Dict[str, Any] = {
        "schema": SCHEMA, "time": iso_utc(now), "epoch": round(now, 3),
        "started_at": report.get("started_at"), "mode": report.get("mode"),
        "node": report.get("node"), "host": report.get("host"), "job_id": report.get("job_id"),
        **({"job_sluid": report["job_sluid"]} if report.get("job_sluid") else {}),
        "verdict": report.get("verdict"), "duration_s": report.get("duration_s"),
        "tool_version": report.get("tool_version"), "level": report.get("level"),
        "probes": [{"gpu": p.get("gpu"), "status": p.get("status"),
                    "bytes_tested": p.get("bytes_tested")} for p in report.get("probes") or ()],
        "findings": findings[:MAX_ITEMS],
        "action": {"taken": action.get("taken", "none"), "reason": action.get("reason"),
                   "detail": clip(action.get("detail")),
                   "dry_run": bool(action.get("dry_run")),
                   "refused": bool(action.get("refused")), "pending": bool(action.get("pending"))},
        "events": logged[:MAX_ITEMS],
    }
    counters = gpu_counters(report)
    if counters:
        record["gpus"] = counters
    dropped = max(0, len(findings) - MAX_ITEMS) + max(0, len(logged) - MAX_ITEMS)
    if dropped:
        record["items_dropped"] = dropped
    return record


def gpu_counters(report: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The "gpus" block: each GPU's error counters by serial, for the counter rules of
    --suspects (decide/counters.py), which follow a serial from node to node.  A GPU without a
    serial is left out (nothing to follow it by); a counter NVML did not give is null."""
    out: Dict[str, Dict[str, Any]] = {}
    for g in report.get("gpus") or ():
        serial = g.get("serial")
        if not serial or g.get("lost"):
            continue
        sbe, dbe = g.get("retired_sbe"), g.get("retired_dbe")
        hist = g.get("remap_histogram")
        nvlink = g.get("nvlink")
        out[str(serial)] = {
            "gpu": g.get("index"),
            # an epilog's GPU under test ran the job that just ended: growth since the last
            # line happened under load
            "load": report.get("mode") == "epilog" and bool(g.get("under_test")),
            "sbe": g.get("ecc_aggregate_corrected"),
            "retired": None if sbe is None and dbe is None else (sbe or 0) + (dbe or 0),
            "remap_low": None if not isinstance(hist, dict) else (hist.get("low") or 0) + (hist.get("none") or 0),
            "pcie_replay": g.get("pcie_replay"),
            "nvlink_replay": nvlink.get("replay_errors") if isinstance(nvlink, dict) else None}
    return out


def internal_error_record(mode: str, trace: str, now: float, node: Optional[str] = None,
                          host: Optional[str] = None) -> Dict[str, Any]:
    """The history line for a crash of gpu-healthcheck's own code (pure)."""
    return {"schema": SCHEMA, "time": iso_utc(now), "epoch": round(now, 3), "mode": mode,
            "node": node, "host": host, "job_id": None, "verdict": None, "internal_error": True,
            "findings": [], "action": {"taken": "none", "reason": None, "detail": None,
                                        "dry_run": False, "refused": False, "pending": False},
            "events": [{"kind": "internal-error", "priority": 2, "message": clip(trace)}]}


def terminated_record(mode: str, message: str, now: float, node: Optional[str],
                      host: Optional[str], job_id: Optional[str]) -> Dict[str, Any]:
    """The history line for a run stopped by SIGTERM before it could decide (pure)."""
    record = internal_error_record(mode, message, now, node, host)
    record.update(job_id=job_id, internal_error=False, terminated=True,
                  events=[{"kind": "error", "priority": 2, "message": clip(message)}])
    return record


def event_record(mode: str, event: "LogEvent", now: float, node: Optional[str],
                 host: Optional[str]) -> Dict[str, Any]:
    """The history line of one event recorded on its own, outside a run's line (pure): the
    repair's RMA decision, written before its evidence is gathered, and the evidence's result."""
    record = internal_error_record(mode, "", now, node, host)
    record.update(internal_error=False, events=[_event_item(event)])
    return record


def append_event(config: "Config", mode: str, event: "LogEvent", node: Optional[str]) -> str:
    path = config.history_path()
    host = os.uname().nodename.split(".")[0]
    append_line(path, encode(event_record(mode, event, time.time(), node or host, host)),
                config.history_max_bytes)
    return path


def append_terminated(config: "Config", mode: str, message: str, node: Optional[str],
                      job_id: Optional[str]) -> str:
    path = config.history_path()
    host = os.uname().nodename.split(".")[0]
    append_line(path, encode(terminated_record(mode, message, time.time(), node or host, host,
                                               job_id)), config.history_max_bytes)
    return path


# --- writing -----------------------------------------------------------------------------

def append_line(path: str, line: bytes, max_bytes: int) -> None:
    """Append one line to path, rotating to path.1 first if it would pass max_bytes.

    Raises:
        HistoryError: the directory or file cannot be used (symlink, not ours, I/O error).
    """
    directory, name = os.path.split(os.path.abspath(path))
    # history_file may be put in a shared directory such as /var/log: its mode is not ours
    # to change (no tighten), and root may own it
    dfd = open_dir(directory, create=True, tighten=False, root_may_own=True)
    try:
        with Locked(dfd, name + ".lock", path + ".lock", exclusive=True, create=True):
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
            fd = open_in(dfd, name, path, flags, writing=True)
            size = 0
            try:
                size = os.fstat(fd).st_size
                if size > 0 and size + len(line) > max_bytes:
                    os.close(fd)
                    fd = -1
                    # rename, not copy: atomic, and a reader holding the old file still sees
                    # whole lines.  The older .1 is dropped: rotation keeps the newest.
                    os.rename(name, name + ".1", src_dir_fd=dfd, dst_dir_fd=dfd)
                    fd = open_in(dfd, name, path, flags | os.O_EXCL, writing=True)
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
