"""journald: one structured entry per log event, through systemd-python's native protocol.

    result = send_events(outcome.events, mode="epilog")
    if result.problem:                      # "journal unavailable: ..." -> sinks falls back
        ...result.unsent...

Each entry carries MESSAGE, PRIORITY (syslog level), SYSLOG_IDENTIFIER=gpu-healthcheck,
GPU_HEALTHCHECK_EVENT=<kind>, a MESSAGE_ID fixed per kind (MESSAGE_IDS) and the event's own
fields, so that

    journalctl MESSAGE_ID=f28447839a384d19bb588e4f505a3f7e     # every drain we made
    journalctl GPU_SERIAL=1650522003802                        # one board's history
    journalctl SLURM_JOB_ID=1234                               # what we said about one job

work on any node.  systemd-python is the optional extra `[journald]`: it is imported only here
and only when sending, and its absence means "no journal".  libsystemd's sd_journal_sendv()
returns success when the socket is missing (the datagram goes nowhere), so the socket is
checked first; otherwise a node without journald would lose every event without a word.
"""

from __future__ import annotations

import os
import re
import stat
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, List, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from ..model import LogEvent

# libsystemd hard-codes this path (sd_journal_sendv); checking another would prove nothing.
JOURNAL_SOCKET = "/run/systemd/journal/socket"
SYSLOG_IDENTIFIER = "gpu-healthcheck"
INTERNAL_ERROR = "internal-error"
CRIT = 2

# Fixed forever: alerting rules and saved journalctl queries match on these.  Generated once
# with uuid.uuid4().hex; never reuse one for another meaning.
MESSAGE_IDS: Mapping[str, str] = MappingProxyType({
    "summary": "cf146d912dfc4a04befe1747ee9cd905",
    "finding": "9e324a751d354f1485506bf1ca25bc23",
    "drain": "f28447839a384d19bb588e4f505a3f7e",
    "resume": "e4909294120b428cafb621d496a10d69",
    "refused": "67b5010fc91c4e14809acd5383a8ad1e",
    "pending": "ff9ea17cc3b340fd9c45d9966ffac991",
    "error": "e64a792c51e740f2bba728c235014f5e",
    "repair": "ffda64f70510444498ac3f85a44b6988",
    INTERNAL_ERROR: "1a75330f8bb64044a2fb11fa4b2c0613",
})

# journald's rule for field names: upper-case letters, digits and '_', not starting with '_'
# (those are trusted fields journald adds itself), at most 64 characters.
_FIELD_NAME = re.compile(r"^[A-Z0-9][A-Z0-9_]{0,63}$")
# Fields we set ourselves; an event's fields must not override them.
_RESERVED = frozenset({"MESSAGE", "MESSAGE_ID", "PRIORITY", "SYSLOG_IDENTIFIER",
                       "GPU_HEALTHCHECK_EVENT"})

Sendv = Callable[..., None]


class JournalResult:
    """What send_events did: `problem` is None when every entry reached the socket."""

    __slots__ = ("sent", "unsent", "problem")

    def __init__(self, sent: int = 0, unsent: Optional[List["LogEvent"]] = None,
                 problem: Optional[str] = None) -> None:
        self.sent = sent
        self.unsent: List["LogEvent"] = unsent if unsent is not None else []
        self.problem = problem


def unavailable_reason(socket_path: str = JOURNAL_SOCKET) -> Optional[str]:
    """Why journald cannot receive entries here, or None when its socket is in place."""
    try:
        st = os.stat(socket_path)
    except FileNotFoundError:
        return f"journal unavailable: {socket_path} does not exist"
    except OSError as exc:
        return f"journal unavailable: {socket_path}: {exc.strerror or exc}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"journal unavailable: {socket_path} is not a socket"
    return None


def entry_fields(kind: str, priority: int, message: str, fields: Mapping[str, str],
                 mode: Optional[str] = None) -> List[str]:
    """The KEY=value items of one journal entry (pure; what sendv receives).

    Field names journald would reject are dropped rather than failing the whole entry;
    empty values are dropped so `journalctl SLURM_JOB_ID=` never matches a placeholder.
    """
    items = [f"MESSAGE={message}", f"PRIORITY={int(priority)}",
             f"SYSLOG_IDENTIFIER={SYSLOG_IDENTIFIER}", f"GPU_HEALTHCHECK_EVENT={kind}"]
    message_id = MESSAGE_IDS.get(kind)
    if message_id:
        items.append(f"MESSAGE_ID={message_id}")
    merged = dict(fields)
    if mode and "GPU_HEALTHCHECK_MODE" not in merged:
        merged["GPU_HEALTHCHECK_MODE"] = mode
    for key in sorted(merged):
        value = merged[key]
        if key in _RESERVED or not _FIELD_NAME.match(key) or value is None or str(value) == "":
            continue
        items.append(f"{key}={value}")
    return items


def _load_sendv() -> Sendv:
    """systemd.journal.sendv; raises ImportError when the [journald] extra is not installed."""
    from systemd import journal  # type: ignore[import-not-found]

    return journal.sendv  # type: ignore[no-any-return]


def send_events(events: Sequence["LogEvent"], mode: Optional[str] = None,
                socket_path: str = JOURNAL_SOCKET,
                sendv: Optional[Sendv] = None) -> JournalResult:
    """Send every event; never raises.  Events that did not go out are in `unsent`."""
    problem = unavailable_reason(socket_path)
    if problem is None and sendv is None:
        try:
            sendv = _load_sendv()
        except ImportError:
            problem = "journal unavailable: systemd-python is not installed (extra [journald])"
    if problem is not None or sendv is None:
        return JournalResult(0, list(events), problem)
    result = JournalResult()
    for n, event in enumerate(events):
        try:
            sendv(*entry_fields(event.kind, event.priority, event.message, event.journal_fields, mode))
        except (OSError, ValueError, TypeError) as exc:
            # ECONNREFUSED (journald stopped), EMSGSIZE, a value it cannot encode: the rest of
            # the run's events must still be seen, so hand them all back for the fallback.
            result.unsent = list(events[n:])
            result.problem = f"journal unavailable: sending to {socket_path} failed: {exc}"
            return result
        result.sent += 1
    return result
