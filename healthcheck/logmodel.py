"""The kernel log's records: NVRM Xid and NVSwitch SXid events, and where a read of the log
started and ended (its window).  Plain records, filled by read/kernlog.py and read/kmsg.py,
judged by checks/xid.py and checks/nvswitch.py; model.py's snapshot holds a KernelLogRead.
With them the pure rules both the readers and decide/xidack.py use: which boot (BootId), what
makes two Xid lines the same event (group_key) and the window after a position (window_since).
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from .records import NamedTuple


class XidEvent(NamedTuple):
    """One NVRM kernel-log event naming a GPU by PCI address."""

    pci: str  # normalised "dddd:bb:dd" as the driver prints it, lower-case
    xid: Optional[int]  # None for "fallen off the bus" messages that carry no Xid
    message: str
    monotonic_s: Optional[float] = None  # seconds since boot, where the line carries it
    wallclock: Optional[float] = None  # epoch seconds, where the line carries a date
    seq: Optional[int] = None  # /dev/kmsg sequence number
    # After kernlog.aggregate, one event stands for every line of this GPU and Xid in the
    # window: the fields above are the first line's, these the count and the last line's.
    occurrences: int = 1
    last_monotonic_s: Optional[float] = None
    last_wallclock: Optional[float] = None
    last_seq: Optional[int] = None
    samples: Tuple[str, ...] = ()  # up to kernlog.MAX_SAMPLES distinct messages, first first
    last_message: Optional[str] = None  # the last line's message (Xid 154: the action now)
    # Xid 13: how many "SM Warp Exception" lines named each (GPC, TPC), as (("GPC 8, TPC 5", 2),
    # ...), at most kernlog.MAX_UNITS units: NVIDIA advises a diagnostic when one repeats
    units: Tuple[Tuple[str, int], ...] = ()


class SxidEvent(NamedTuple):
    """One NVSwitch SXid kernel-log line: `nvidia-nvswitchN: SXid (PCI:...): CODE, ...`."""

    pci: str  # the NVSwitch's PCI address as the driver prints it, lower-case (dddd:bb:dd.f)
    sxid: int
    fatal: Optional[bool]  # the line's "Fatal" / "Non-fatal"; None when the line does not say
    message: str
    switch: Optional[int] = None  # N of nvidia-nvswitchN
    monotonic_s: Optional[float] = None
    wallclock: Optional[float] = None
    seq: Optional[int] = None
    # the number of a detail line's "Severity N" (the driver's NVSWITCH_ERROR_SEVERITY_*:
    # 0 non-fatal, 1 fatal); None when the line states none
    severity: Optional[int] = None


class KernelLogPosition(NamedTuple):
    """Where a kernel-log read ended, so the epilog can read only what the job added."""

    source: str
    offset: Optional[int] = None  # regular file: byte offset
    inode: Optional[int] = None
    monotonic_s: Optional[float] = None
    wallclock: Optional[float] = None
    seq: Optional[int] = None  # /dev/kmsg: a greater record seq came after (None: older files)
    boot_id: Optional[str] = None  # the boot `seq` belongs to
    method: Optional[str] = None  # how it was taken: read/kmsg.py's METHODS


class KernelLogWindow(NamedTuple):
    """Which kernel-log records count.  Empty window = since boot."""

    position: Optional[KernelLogPosition] = None
    since_monotonic_s: Optional[float] = None
    since_wallclock: Optional[float] = None
    since_seq: Optional[int] = None  # kmsg records past this seq (window_since below)


class KernelLogRead(NamedTuple):
    events: Tuple[XidEvent, ...] = ()  # aggregated: one per GPU and Xid
    sxids: Tuple[SxidEvent, ...] = ()  # NVSwitch errors, judged by checks/nvswitch.py
    error: Optional[str] = None  # could not read: the Xid check reports unknown
    end: Optional[KernelLogPosition] = None
    skipped_bytes: int = 0  # the window was larger than kernlog.MAX_SCAN_BYTES: not scanned
    lines: int = 0  # NVRM lines in the window (before aggregation)
    ignored_lines: int = 0  # NVRM lines not written by the kernel (a user's `logger`)
    dropped_events: int = 0  # events of (GPU, Xid) pairs past kernlog.MAX_GROUPS
    window: Optional[str] = None  # what bounded it: seq, offset, monotonic, wallclock, boot
    # the kernel's "NVRM: Xid" lines in the window that name no GPU we can read (a redacted or
    # garbled PCI address): never dropped silently; the first few kept, all counted
    unparsed: Tuple[str, ...] = ()
    unparsed_lines: int = 0
    # (first, last) kmsg seq of the window's records the kernel overwrote before this read (its
    # ring buffer wrapped past the prolog's marker); None when none was lost
    lost_seqs: Optional[Tuple[int, int]] = None
    # GPUs (kernel PCI form) whose (re-)initialisation line the window holds: the marker of a
    # reset or driver load, before which their Xids were dropped (kernlog.aggregate)
    reinit: Tuple[str, ...] = ()


class BootId(NamedTuple):
    """Which boot this is: the kernel's random boot_id, and btime for dated log lines."""

    boot_id: Optional[str] = None
    btime: Optional[float] = None


_NVLINK5_SEVERITY = r"\b(Fatal|Non-?fatal)\b"  # compiled by re on first use


def _variant(event: XidEvent) -> str:
    """What must not be merged within one GPU and Xid: the NVLink5 Xids 144-150 print their
    own Fatal / Nonfatal, and a fatal line must not hide behind a non-fatal one."""
    if event.xid is not None and 144 <= event.xid <= 150:
        m = re.search(_NVLINK5_SEVERITY, event.message, re.IGNORECASE)
        return m[1].lower().replace("-", "") if m else ""
    return ""


GroupKey = Tuple[str, Optional[int], str]


def group_key(event: XidEvent) -> GroupKey:
    """What makes two lines the same event: GPU, Xid and, for 144-150, Fatal or Nonfatal.
    aggregate() merges by it and an acknowledgement matches by it (decide.xidack), so a
    Fatal line never passes for an acknowledged Nonfatal one."""
    return (event.pci, event.xid, _variant(event))


def window_since(position: KernelLogPosition, boot_id: Optional[str]) -> KernelLogWindow:
    """What the kernel logged after `position` (pure): by seq where it has one of this boot
    (`boot_id`: a seq counts from 0 again at every boot), else by its times, as before seqs."""
    same = position.seq is not None and position.boot_id is not None and position.boot_id == boot_id
    return KernelLogWindow(position=position, since_monotonic_s=position.monotonic_s,
                           since_wallclock=position.wallclock,
                           since_seq=position.seq if same else None)
