"""Text taken from the node (process names, kernel-log lines, NVML strings) made safe to show.

    printable("\x1b[2Kevil\nname", 200)   # -> "?[2Kevil?name"

A process name is whatever its user wrote (`exec -a "$(printf '\\033[2K...')"`): raw, its
escape sequences would reach the admin's terminal and its newlines slurmd's log, forging lines.
Every reader applies this at the edge, so the table, the log, the journal and the JSON report
only ever see one printable line.
"""

from __future__ import annotations


def printable(text: str, limit: int) -> str:
    """Control characters (escape sequences, newlines, tabs, DEL, C1) become '?', and the text
    is cut to `limit` characters."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def iso_utc(epoch: float) -> str:
    """"2026-11-29T19:01:02+00:00": the one form every time we write (reports, history, notes)."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(epoch))
