"""Kernel-log reader: NVRM Xid events and "fallen off the bus" messages, with their times.

Sources, all given by the `kernel_log` config key:
- /dev/kmsg (default): records `PRI,SEQ,USEC,FLAGS;MESSAGE`, read non-blocking, USEC = time
  since boot;
- a regular file holding such records, or lines as `dmesg` ("[ 1843.308145] ..."),
  `dmesg -T` ("[Wed Jul 31 23:14:18 2024] ..."), `journalctl -k` ("Oct 06 17:59:27 host
  kernel: ...", or ISO 8601 with -o short-iso) print them, or bare "NVRM: ..." lines.

    parse_lines(["[ 12.5] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE"])
    # -> [XidEvent(pci="0000:3b:00", xid=48, monotonic_s=12.5, ...)]

Records are windowed: by position (the kmsg sequence number or file offset the prolog
recorded: read/kmsg.py), else by time.  Scoping Xids to a window matters: a check that greps the whole log keeps a node drained
until the log rotates (Azure/azurehpc#648).

Only the kernel's own lines count: any user can write "NVRM: Xid ... 79" with `logger`, which
would drain the node.  /dev/kmsg records count only with facility 0 (kern; a user's write to
/dev/kmsg gets facility user); syslog and journal lines only when their program is `kernel`
(`host kernel: ...`); dmesg lines are the kernel ring buffer; lines that state their facility
(`dmesg --decode`'s "kern  :err   : ", Talos's "host: kern: warning: [ISO]: ") only with `kern`.  A plain-text syslog file cannot
tell `logger -t kernel` from the kernel: /dev/kmsg (the default) or `journalctl -k` output can.

Any user can also make the driver log Xid 31 as often as they like (a page fault in their own
program), so the work is bounded: events are aggregated per GPU and Xid as they stream past
(count, first and last time, MAX_SAMPLES messages), and at most MAX_SCAN_BYTES of a file are
read (the newest part of the window).

    read_kernel_log("/dev/kmsg", KernelLogWindow()).events
    # -> (XidEvent(pci="0000:3b:00", xid=31, occurrences=200000, samples=(...3 lines...)), ...)
"""

from __future__ import annotations

import datetime
import errno
import functools
import os
import re
import stat
import time
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from ..logmodel import GroupKey, group_key
from ..logmodel import KernelLogPosition, KernelLogRead, KernelLogWindow, SxidEvent, XidEvent
from ..pci import kernel_form
from ..records import NamedTuple
from ..text import printable
# where the log stands, and which boot, live in read/kmsg.py; named here, where the other
# modules have always found them
from .kmsg import (boot_id, boot_wallclock, current_boot, lost_between, position_and_why,  # noqa: F401
                   position_now, record_seq, window_basis)

OFF_BUS = "fallen off the bus"


# XidEvent.xid of a GPU (re-)initialisation line ("NVRM: GPU at PCI:0000:41:00: GPU-<uuid>"):
# the driver prints it when it loads and again when it resets the GPU.  Xids of that GPU logged
# before it were dealt with by the reset; aggregate() drops them.  Never reported as an event.
REINIT = -1
# XidEvent.xid of a kernel "NVRM: Xid" line naming no GPU we can read (a redacted PCI address):
UNPARSED, MAX_UNPARSED = -2, 3  # counted, the first 3 kept, shown unparsed; never dropped


class _Patterns(NamedTuple):
    xid: "re.Pattern[str]"
    init: "re.Pattern[str]"
    gpu_at: "re.Pattern[str]"
    kmsg: "re.Pattern[str]"
    dmesg: "re.Pattern[str]"
    dmesg_t: "re.Pattern[str]"
    iso: "re.Pattern[str]"
    syslog: "re.Pattern[str]"
    decode: "re.Pattern[str]"
    program: "re.Pattern[str]"
    stamp: "re.Pattern[str]"
    forwarded: "re.Pattern[str]"


@functools.lru_cache(maxsize=1)
def patterns() -> _Patterns:
    """Compiled on first use: the prolog imports this module only to note where the log ends.
    DOTALL: a message may hold a stray newline (a pasted line); its stamp still splits off."""
    return _Patterns(
        xid=re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2})(?:\.[0-7])?\):\s*(?P<xid>\d{1,5})\b"),
        init=re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?: GPU-[0-9a-fA-F]"),
        gpu_at=re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"),
        kmsg=re.compile(r"^(?P<pri>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$", re.DOTALL),
        dmesg=re.compile(r"^\s*\[\s*(?P<sec>\d+\.\d+)\]\s?(?P<msg>.*)$", re.DOTALL),
        dmesg_t=re.compile(r"^\s*\[(?P<date>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(?P<msg>.*)$", re.DOTALL),
        iso=re.compile(r"^(?P<date>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:?\d\d|Z)?)\s+(?P<msg>.*)$", re.DOTALL),
        syslog=re.compile(r"^(?P<mon>[A-Za-z]{3,4})\.? +(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d)\s+(?P<msg>.*)$", re.DOTALL),
        # dmesg --decode / -x: "kern  :err   : " (facility, level) before the stamp
        decode=re.compile(r"^(?P<facility>[a-z0-9]+)\s*:(?P<level>[a-z]+)\s*:\s"),
        program=re.compile(r"^(?:\S+\s+)?kernel:\s?"),
        # dmesg's stamps ("[ 12.5]", "[Wed Jul 31 23:14:18 2024]"), whatever follows on the line
        stamp=re.compile(r"^\s*\[(?:\s*\d+\.\d+|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]"),
        # kmsg forwarded with its facility stated (Talos `talosctl dmesg`, siderolabs/pkgs#792):
        # "HOST: kern: warning: [2023-08-18T13:36:47.378241465Z]: MESSAGE", level padded
        forwarded=re.compile(r"^(?:\S+:\s+)?(?P<facility>[a-z0-9]+):\s+(?P<level>[a-z]+):\s+"
                             r"\[(?P<date>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]:\s?"
                             r"(?P<msg>.*)$", re.DOTALL),
    )


MONTHS = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)}
# journalctl prints month names in the locale; German and French abbreviations seen in the wild
MONTHS.update({"mär": 3, "mai": 5, "okt": 10, "dez": 12, "janv": 1, "févr": 2, "mars": 3,
               "avr": 4, "juin": 6, "juil": 7, "août": 8, "sept": 9, "déc": 12})
MAX_LINE = 8192  # longer lines are cut: an NVRM line is a few hundred bytes
FALLEN_LOOKBACK = 4  # lines between "The NVIDIA GPU X" and "fallen off the bus"
MAX_SAMPLES = 3  # messages kept per GPU and Xid
MAX_UNITS = 8  # (GPC, TPC) units tallied per GPU for Xid 13
MAX_GROUPS = 4096  # distinct (GPU, Xid) pairs kept; real nodes have a handful
MAX_SXID_LINES = 4096  # NVSwitch SXid lines kept per read (4 switches, a few lines per error)
# A kernel ring buffer is a few MiB; a syslog file can be GBs.  At ~100 MB/s of NVRM-free
# text (or ~1 s per 200,000 NVRM lines) this keeps --node within HealthCheckProgram's 60 s.
MAX_SCAN_BYTES = 64 << 20


def _from_kernel(line: str, year: int) -> Optional[Tuple[str, Optional[float], Optional[float], Optional[int]]]:
    """_stamp's split of a line the kernel wrote; None for a line some program wrote."""
    p = patterns()
    m = p.kmsg.match(line)
    if m:
        # PRI = facility * 8 + level; the kernel's facility is 0, a write to /dev/kmsg gets 1
        return (m["msg"], int(m["usec"]) / 1e6, None, int(m["seq"])) if int(m["pri"]) < 8 else None
    decoded = p.decode.match(line)
    if decoded:  # dmesg --decode: the facility says who wrote it ("kern" is the kernel)
        if decoded["facility"] != "kern":
            return None
        return _stamp(line[decoded.end():], year)
    forwarded = p.forwarded.match(line) if ": [" in line[:160] else None
    if forwarded:  # the format states the facility: only the kernel's counts, never `user`
        if forwarded["facility"] != "kern":
            return None
        return _iso(forwarded["date"], forwarded["msg"])
    msg, mono, wall, seq = _stamp(line, year)
    if p.stamp.match(line):
        return msg, mono, wall, seq  # dmesg prints the kernel ring buffer only
    # syslog, journal or undated text: "[host ]kernel: ...", or a bare "NVRM: ..." line
    start = min((i for i in (msg.find("NVRM"), msg.find("nvidia-nvswitch")) if i >= 0), default=-1)
    prefix = msg[:start] if start >= 0 else msg
    program = p.program.match(prefix)
    if prefix.strip() and not program:
        return None
    return msg, mono, wall, seq


def _stamp(line: str, year: int) -> Tuple[str, Optional[float], Optional[float], Optional[int]]:
    """Split a line into (message, seconds since boot, epoch seconds, kmsg seq)."""
    p = patterns()
    m = p.kmsg.match(line)
    if m:
        return m["msg"], int(m["usec"]) / 1e6, None, int(m["seq"])
    m = p.dmesg.match(line)
    if m:
        return m["msg"], float(m["sec"]), None, None
    m = p.dmesg_t.match(line)
    if m:
        try:
            parsed = time.strptime(m["date"], "%a %b %d %H:%M:%S %Y")
            return m["msg"], None, time.mktime(parsed), None
        except (ValueError, OverflowError):
            return m["msg"], None, None, None
    m = p.iso.match(line)
    if m:
        return _iso(m["date"], m["msg"])
    m = p.syslog.match(line)
    if m:
        month = MONTHS.get(m["mon"].lower())
        if month is None:
            return m["msg"], None, None, None
        try:
            parsed = time.strptime(f"{year} {month} {m['day']} {m['hms']}", "%Y %m %d %H:%M:%S")
            epoch = time.mktime(parsed)
            if epoch > time.time() + 86400:  # syslog dates carry no year: December's lines in January
                parsed = time.strptime(f"{year - 1} {month} {m['day']} {m['hms']}", "%Y %m %d %H:%M:%S")
                epoch = time.mktime(parsed)
            return m["msg"], None, epoch, None
        except (ValueError, OverflowError):
            return m["msg"], None, None, None
    return line, None, None, None


def _iso(date: str, msg: str) -> Tuple[str, Optional[float], Optional[float], Optional[int]]:
    """An ISO 8601 stamp as epoch seconds; Python before 3.11 takes at most 6 decimals."""
    # dmesg --time-format iso writes a comma before the microseconds; Talos nanoseconds
    date = re.sub(r"([.,]\d{6})\d+", r"\1", date.replace("Z", "+00:00").replace(",", "."))
    try:
        stamp = datetime.datetime.fromisoformat(date)
        if stamp.tzinfo is None:
            return msg, None, time.mktime(stamp.timetuple()), None
        return msg, None, stamp.timestamp(), None
    except (ValueError, OverflowError):
        return msg, None, None, None


def parse_lines(lines: Iterable[str], year: Optional[int] = None) -> List[XidEvent]:
    """Every Xid and fallen-off-the-bus event the kernel wrote in these lines, one per line
    (pure; never raises on input)."""
    return [e for e in iter_events(lines, year) if e is not None and e.xid not in (REINIT, UNPARSED)]


def iter_events(lines: Iterable[str], year: Optional[int] = None) -> Iterator[Optional[XidEvent]]:
    """parse_lines as a stream, with None for each NVRM line that some program other than
    the kernel wrote (so the caller can count them)."""
    year = year or time.localtime().tm_year
    pats = patterns()
    # (pci, line number, times) of the last "The NVIDIA GPU X" line: newer drivers print the
    # fallen-off-the-bus message over three lines and only the first carries the time
    recent_gpu: Optional[Tuple[str, int, Optional[float], Optional[float], Optional[int]]] = None
    said: List[str] = []  # the NVRM lines since that line: the message is quoted as logged
    for number, raw in enumerate(lines):
        if "NVRM" not in raw:
            continue
        # one record is one line: a newline inside it (a kmsg record's continuation) must not
        # hide its stamp or program from the patterns, which match up to the end of a line
        line = raw[:MAX_LINE].rstrip("\r\n").replace("\n", " ")
        split = _from_kernel(line, year)
        if split is None:
            yield None
            continue
        msg, mono, wall, seq = split
        m = pats.xid.search(msg)
        if m:
            yield XidEvent(pci=kernel_form(m["pci"]), xid=int(m["xid"]), message=_clean(msg),
                           monotonic_s=mono, wallclock=wall, seq=seq)
            continue
        if "Xid" in msg:
            yield XidEvent(pci="", xid=UNPARSED, message=_clean(msg), monotonic_s=mono,
                           wallclock=wall, seq=seq)
            continue
        init = pats.init.search(msg)
        if init:
            yield XidEvent(pci=kernel_form(init["pci"]), xid=REINIT, message=_clean(msg),
                           monotonic_s=mono, wallclock=wall, seq=seq)
        gpu = pats.gpu_at.search(msg)
        if gpu:
            recent_gpu, said = (kernel_form(gpu["pci"]), number, mono, wall, seq), []
        said = (said + [_clean(msg)])[-(FALLEN_LOOKBACK + 1):]
        if OFF_BUS in msg and recent_gpu and number - recent_gpu[1] <= FALLEN_LOOKBACK:
            _, _, g_mono, g_wall, g_seq = recent_gpu
            # the driver's own words, one line ("GPU 0000:a1:00.0: GPU has fallen off the bus.")
            # or the three of newer drivers joined: never words the log does not hold
            yield XidEvent(pci=recent_gpu[0], xid=None, message=printable(" ".join(said), 512),
                           monotonic_s=mono if mono is not None else g_mono,
                           wallclock=wall if wall is not None else g_wall,
                           seq=seq if seq is not None else g_seq)
            recent_gpu = None


def parse_sxids(lines: Iterable[str], year: Optional[int] = None) -> List[SxidEvent]:
    """Every NVSwitch SXid line (healthcheck.read.sxid) in these lines, with its time (pure)."""
    from .sxid import parse_sxid_lines

    year = year or time.localtime().tm_year
    split = (_from_kernel(raw[:MAX_LINE].rstrip("\r\n"), year) for raw in lines if "SXid" in raw)
    return parse_sxid_lines(s for s in split if s is not None)


def _clean(msg: str) -> str:
    start = msg.find("NVRM:")
    return printable(msg[start if start >= 0 else 0:], 512)


# Xid 13 "Graphics SM Warp Exception on (GPC 8, TPC 5, SM 0): ...": one per faulting SM and
# incident; its companions (SM Global Exception, ESR) repeat the unit, so only these count.
_XID13_UNIT = r"Warp Exception on \(GPC (?P<gpc>\d+), TPC (?P<tpc>\d+)"  # compiled by re on first use


def _unit(event: XidEvent) -> Optional[str]:
    """The (GPC, TPC) an Xid 13 Warp Exception line names, else None (pure)."""
    if event.xid != 13:
        return None
    m = re.search(_XID13_UNIT, event.message)
    return f"GPC {m['gpc']}, TPC {m['tpc']}" if m else None


class _Group:
    """The running tally of one GPU and Xid while aggregate() streams (local to it)."""

    __slots__ = ("first", "last", "count", "samples", "units")

    def __init__(self, first: XidEvent) -> None:
        self.first = first
        self.last = first
        self.count = 0
        self.samples: List[str] = []
        self.units: Dict[str, int] = {}
        self.add(first)

    def add(self, event: XidEvent) -> None:
        self.last = event
        self.count += 1
        if len(self.samples) < MAX_SAMPLES and event.message not in self.samples:
            self.samples.append(event.message)
        unit = _unit(event)
        if unit is not None and (unit in self.units or len(self.units) < MAX_UNITS):
            self.units[unit] = self.units.get(unit, 0) + 1

    def event(self) -> XidEvent:
        return self.first._replace(occurrences=self.count, last_monotonic_s=self.last.monotonic_s,
                                   last_wallclock=self.last.wallclock, last_seq=self.last.seq,
                                   samples=tuple(self.samples), last_message=self.last.message,
                                   units=tuple(self.units.items()))


class Aggregate(NamedTuple):
    events: Tuple[XidEvent, ...]
    lines: int  # events seen
    dropped: int  # events of (GPU, Xid) pairs past MAX_GROUPS
    reinit: Tuple[str, ...] = ()  # GPUs whose (re-)initialisation line was seen


def aggregate(events: Iterable[XidEvent]) -> Aggregate:
    """One event per (GPU, Xid), in order of first appearance, in memory bounded by the
    number of pairs (at most MAX_GROUPS) whatever the number of lines (pure).  A GPU's
    (re-)initialisation line (REINIT) drops the Xids it logged before: a reset dealt with them."""
    groups: Dict[GroupKey, _Group] = {}
    lines = dropped = 0
    reinit: Dict[str, None] = {}
    for event in events:
        if event.xid == REINIT:
            reinit[event.pci] = None
            # the GPU was (re-)initialised: what it logged before was dealt with by the reset
            for key in [k for k in groups if k[0] == event.pci]:
                del groups[key]
            continue
        lines += 1
        key = group_key(event)
        group = groups.get(key)
        if group is not None:
            group.add(event)
        elif len(groups) < MAX_GROUPS:
            groups[key] = _Group(event)
        else:
            dropped += 1
    return Aggregate(tuple(g.event() for g in groups.values()), lines, dropped, tuple(reinit))


def in_window(event: "XidEvent | SxidEvent", window: KernelLogWindow) -> bool:
    """Whether a record is after the window's start: by kmsg seq where both have one (the
    printk clock drifts from CLOCK_MONOTONIC, by hours after a VM pause), else by time."""
    if window.since_seq is not None and event.seq is not None:
        return event.seq > window.since_seq
    if window.since_monotonic_s is not None and event.monotonic_s is not None:
        return event.monotonic_s >= window.since_monotonic_s
    if window.since_wallclock is not None and event.wallclock is not None:
        return event.wallclock >= window.since_wallclock
    return True


def read_kernel_log(path: str, window: KernelLogWindow,
                    max_scan_bytes: int = MAX_SCAN_BYTES) -> KernelLogRead:
    """Xid events in the window, one per GPU and Xid.  An unreadable log is an error for the
    Xid check alone."""
    try:
        st = os.stat(path)
        if stat.S_ISCHR(st.st_mode):
            from .kmsg import read_records

            return read_kmsg_records(read_records(path), window, path)
        offset = 0
        skipped = 0
        pos = window.position
        basis = window_basis(window)
        if pos and pos.offset is not None and pos.inode == st.st_ino and pos.offset <= st.st_size:
            # The same file, grown: everything past the recorded offset is the window.
            # Times are not compared: a file's clock (dmesg's seconds since boot, a
            # syslog date) need not match ours.
            offset, basis = pos.offset, "offset"
            window = KernelLogWindow()
        if st.st_size - offset > max_scan_bytes:
            skipped = st.st_size - max_scan_bytes - offset
            offset = st.st_size - max_scan_bytes
        read = _scan(_read_file(path, offset, skip_partial=skipped > 0), window)
    except OSError as exc:
        return KernelLogRead(error=f"cannot read {path}: {exc.strerror or exc}")
    return read._replace(end=KernelLogPosition(source=path, offset=st.st_size, inode=st.st_ino,
                                               monotonic_s=time.monotonic(), wallclock=time.time(),
                                               method="offset"),
                         skipped_bytes=skipped, window=basis)


def read_kmsg_records(records: Iterable[bytes], window: KernelLogWindow, source: str) -> KernelLogRead:
    """read_kernel_log's work on raw /dev/kmsg records (as read() returns them, continuation
    lines and all), for the device or a recording of it.  It reads every record anyway, so
    `end` is the last one's seq: exact, with no marker.  An oldest record past the window's
    start + 1 means the ring buffer wrapped during it: `lost_seqs` names what was lost."""
    final = [b"", b""]  # the last record, and the oldest one left

    def wanted() -> Iterator[str]:
        for record in records:
            final[0], final[1] = record, final[1] or record
            if b"NVRM" in record or b"SXid" in record:
                # continuation lines (" SUBSYSTEM=...") follow the first line
                yield record.split(b"\n", 1)[0].decode("utf-8", "replace")

    read = _scan(wanted(), window)
    seq = record_seq(final[0])
    end = KernelLogPosition(source=source, monotonic_s=time.monotonic(), wallclock=time.time(),
                            seq=seq, boot_id=boot_id() if seq is not None else None,
                            method="read" if seq is not None else "monotonic")
    return read._replace(end=end, window=window_basis(window),
                         lost_seqs=lost_between(window.since_seq,
                                                record_seq(final[1]) if final[1] else None))


def _scan(lines: Iterable[str], window: KernelLogWindow) -> KernelLogRead:
    """The events and SXids of these lines in the window, aggregated, in one pass."""
    ignored = 0  # NVRM lines some other program wrote
    sxid_lines: List[str] = []  # NVSwitch SXid lines, parsed after the one pass

    def sxid_tee(lines: Iterable[str]) -> Iterator[str]:
        for line in lines:
            if "SXid" in line and len(sxid_lines) < MAX_SXID_LINES:
                sxid_lines.append(line)
            yield line

    unparsed: List[str] = []  # the first MAX_UNPARSED, of unparsed_count
    unparsed_count = 0

    def kernel_only(stream: Iterator[Optional[XidEvent]]) -> Iterator[XidEvent]:
        nonlocal ignored, unparsed_count
        for event in stream:
            if event is None:
                ignored += 1
            elif not in_window(event, window):
                continue
            elif event.xid == UNPARSED:
                unparsed_count += 1
                unparsed.extend([event.message][:MAX_UNPARSED - len(unparsed)])
            else:
                yield event

    result = aggregate(kernel_only(iter_events(sxid_tee(lines))))
    sxids = [e for e in parse_sxids(sxid_lines) if in_window(e, window)]
    return KernelLogRead(events=result.events, sxids=tuple(sxids), lines=result.lines,
                         ignored_lines=ignored, dropped_events=result.dropped,
                         unparsed=tuple(unparsed), unparsed_lines=unparsed_count,
                         reinit=result.reinit)


def _read_file(path: str, offset: int, skip_partial: bool = False) -> Iterator[str]:
    # O_NONBLOCK: a FIFO planted at the path must not hold the prolog (os.stat said "file",
    # but the path may have changed since); fstat on what we opened decides
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file or character device")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        handle.seek(offset)
        if skip_partial:
            handle.readline(MAX_LINE)  # we start inside a line: it is not a whole record
        while True:
            # readline(MAX_LINE): a multi-GB line with no newline must not be read whole
            raw = handle.readline(MAX_LINE)
            if not raw:
                return
            if not raw.endswith(b"\n"):
                while True:  # skip the rest of an over-long line
                    rest = handle.readline(MAX_LINE)
                    if not rest or rest.endswith(b"\n"):
                        break
            if b"NVRM" in raw or b"SXid" in raw:
                yield raw.decode("utf-8", "replace")
