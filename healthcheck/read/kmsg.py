"""/dev/kmsg: its records, and where the log stands by sequence number.

A kmsg record is `PRI,SEQ,USEC,FLAGS;MESSAGE` (Documentation/ABI/testing/dev-kmsg, man 4
kmsg).  SEQ grows by one per record and never repeats within a boot.  USEC is the printk clock
(local_clock), which need not keep pace with CLOCK_MONOTONIC: after a VM pause they differ by
hours, so a window by time blames an old Xid on a job or misses a new one.  The window is by SEQ.

Learning the SEQ where the log ends is not free: lseek(SEEK_END) puts a reader after the last
record but tells it no number.  So (position):
- "marker" (config `kernel_log_marker`, the prolog's default): seek a reader to the end, write
  one record through a second descriptor, and read until our own record; its SEQ is the
  position.  One write and a read or two, whatever the size of the buffer.  The record reads
  `gpu-healthcheck[PID]: job 1234 prolog: kernel log position 5f0c...` in dmesg (facility user,
  level info: never taken for the kernel's, and never an Xid).
- "seek": the marker did not come back but another record did (read after the seek): the
  position is just before it, as exact.
- "scan": read every record to the end (~1.3 us a record: a 1-4 MiB buffer of 5,000-30,000
  records is 7-40 ms).  With the marker off, and where a run reads the log anyway (--node).
- None: the caller falls back to the clocks ("monotonic").

The kernel's side (kernel/printk/printk.c): opening for write needs write permission on the
node (root); `printk.devkmsg=off` refuses every open (EPERM); the default `ratelimit` lets each
open file write 10 records per 5 s and silently drops more (the write still returns its
length), so one write on a fresh descriptor is never dropped, and a dropped one is simply not
found.  The record must end in a newline: one without stays open for a continuation and is not
readable until the next record closes it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from typing import Iterable, Iterator, Optional, Tuple

from ..logmodel import BootId
from ..logmodel import KernelLogPosition, KernelLogWindow

MAX_RECORD = 8192  # a read() of /dev/kmsg returns one record, at most this long
# Records read after the marker's write before giving up on it: others may be logged between
# the seek and the write (a busy node), ours follows them within microseconds
MAX_MARKER_READS = 64
MARKER_PREFIX = b"gpu-healthcheck["
METHODS = ("marker", "seek", "scan", "read", "offset", "monotonic")


def record_seq(record: bytes) -> Optional[int]:
    """The SEQ of one raw kmsg record, else None (pure; never raises)."""
    head = record[:64].split(b";", 1)[0].split(b",", 2)
    if len(head) < 3 or not head[1].isdigit():
        return None
    return int(head[1])


def marker_line(label: str, nonce: str, pid: int) -> bytes:
    """The marker record: `<14>` is facility user, level info, as any program's write gets
    (the kernel forces facility user); printable ASCII only, and never "NVRM" or "SXid"."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in " ._:-") else "_" for c in label)[:80]
    text = f"gpu-healthcheck[{pid}]: {safe}: kernel log position {nonce}"
    return b"<14>" + text.replace("NVRM", "nvrm").replace("SXid", "sxid").encode("ascii") + b"\n"


def find_marker(records: Iterable[bytes], nonce: str) -> Tuple[Optional[int], Optional[int]]:
    """(SEQ of the record that carries our nonce, SEQ of the first record read), each None
    when absent (pure).  The nonce is random per write: nobody can plant our marker ahead."""
    token = nonce.encode("ascii")
    first: Optional[int] = None
    for record in records:
        seq = record_seq(record)
        if seq is None:
            continue
        if first is None:
            first = seq
        body = record.split(b";", 1)[-1].split(b"\n", 1)[0]
        if body.startswith(MARKER_PREFIX) and body.endswith(token):
            return seq, first
    return None, first


def _records(fd: int, limit: Optional[int]) -> Iterator[bytes]:
    """The records a non-blocking kmsg descriptor has for us, up to `limit` (None: to the end).
    EPIPE: the record we were at was overwritten while we read; the next read goes on."""
    count = 0
    while limit is None or count < limit:
        count += 1
        try:
            record = os.read(fd, MAX_RECORD)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                continue
            raise
        if not record:
            return
        yield record


def read_records(path: str) -> Iterator[bytes]:
    """Every record of the buffer, oldest first, read non-blocking: EAGAIN is the end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        yield from _records(fd, None)
    finally:
        os.close(fd)


def scan_seq(path: str) -> Tuple[Optional[int], Optional[str]]:
    """The SEQ of the buffer's last record, read to the end: (seq, None) or (None, why)."""
    final = b""
    try:
        for final in read_records(path):
            pass
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    seq = record_seq(final)
    return (seq, None) if seq is not None else (None, f"{path} has no records")


def marker_seq(path: str, label: str) -> Tuple[Optional[int], str, Optional[str]]:
    """(seq, method, why not): the position by our own marker record, or by the first record
    logged after the seek; (None, "monotonic", why) when neither came back."""
    try:
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, "monotonic", f"cannot open {path}: {exc.strerror or exc}"
    try:
        os.lseek(reader, 0, os.SEEK_END)
        nonce = os.urandom(8).hex()
        why = None
        try:
            writer = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(writer, marker_line(label, nonce, os.getpid()))
            finally:
                os.close(writer)
        except OSError as exc:  # not root (EACCES), devkmsg off (EPERM), ...
            why = f"cannot write the marker to {path}: {exc.strerror or exc}"
        seq, first = find_marker(_records(reader, MAX_MARKER_READS), nonce)
    except OSError as exc:
        return None, "monotonic", f"cannot read {path}: {exc.strerror or exc}"
    finally:
        os.close(reader)
    if seq is not None:
        return seq, "marker", None
    if first is not None:
        return first - 1, "seek", why
    return None, "monotonic", why or (f"the marker written to {path} did not come back "
                                      f"(printk.devkmsg ratelimit or off?)")


def position_now(path: str, marker: bool = False, label: str = "position") -> KernelLogPosition:
    """Where the log ends now (position_and_why without the why)."""
    return position_and_why(path, marker, label)[0]


def position_and_why(path: str, marker: bool = False,
                     label: str = "position") -> Tuple[KernelLogPosition, Optional[str]]:
    """Where the log ends now, and why a kmsg device's position is by the clocks alone where
    it is.  A regular file: its size.  /dev/kmsg: the seq of our marker record (`marker`:
    cheap, what the prolog records), else of the last record, read to the end.  A path that
    is neither (or is missing) gets the clocks, as ever: reading it will say what is wrong."""
    mono, wall = time.monotonic(), time.time()
    clocks = KernelLogPosition(source=path, monotonic_s=mono, wallclock=wall, method="monotonic")
    try:
        st = os.stat(path)
    except OSError:
        return clocks, None
    if stat.S_ISREG(st.st_mode):
        return clocks._replace(offset=st.st_size, inode=st.st_ino, method="offset"), None
    if not stat.S_ISCHR(st.st_mode):
        return clocks, None
    if marker:
        seq, method, why = marker_seq(path, label)
    else:
        (seq, why), method = scan_seq(path), "scan"
    if seq is None:
        return clocks, why
    return clocks._replace(seq=seq, boot_id=boot_id(), method=method), None


def boot_wallclock(proc_root: str = "/proc") -> Optional[float]:
    """Boot time in epoch seconds (`btime` in /proc/stat), for "since boot" on dated lines."""
    try:
        with open(os.path.join(proc_root, "stat"), "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_boot(proc_root: str = "/proc") -> BootId:
    """This boot's identity.  `/proc/sys/kernel/random/boot_id` is a random UUID the kernel
    draws once per boot; btime (/proc/stat) is boot time in epoch seconds, which moves with
    an NTP step or a VM resume, so it must not tell one boot from another."""
    return BootId(boot_id(proc_root), boot_wallclock(proc_root))


def boot_id(proc_root: str = "/proc") -> Optional[str]:
    """The kernel's random boot_id, else None: what a kmsg seq is counted within."""
    try:
        with open(os.path.join(proc_root, "sys", "kernel", "random", "boot_id"), "rb") as handle:
            return handle.read(64).decode("ascii", "replace").strip() or None
    except OSError:
        return None


def lost_between(since_seq: Optional[int], oldest_seq: Optional[int]) -> Optional[Tuple[int, int]]:
    """(first, last) seq of the records after `since_seq` that are gone when the oldest record
    left is `oldest_seq`: the ring buffer wrapped past them (pure); None when none is."""
    if since_seq is None or oldest_seq is None or oldest_seq <= since_seq + 1:
        return None
    return since_seq + 1, oldest_seq - 1


def window_basis(window: KernelLogWindow) -> str:
    """What bounds a window, for the report: seq, monotonic, wallclock, or boot (none)."""
    if window.since_seq is not None:
        return "seq"
    if window.since_monotonic_s is not None:
        return "monotonic"
    return "wallclock" if window.since_wallclock is not None else "boot"
