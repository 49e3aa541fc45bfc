"""Files a root process writes where a user might reach: the one safe-file layer.

    dfd = open_dir("/var/lib/gpu-healthcheck", create=True, tighten=True)
    atomic_write("/var/lib/gpu-healthcheck", "pending-drain.json", data)
    with Locked(dfd, "history.jsonl.lock", path, exclusive=True, create=True): ...

Every file is opened relative to a directory descriptor opened with O_NOFOLLOW, and the checks
are made on that descriptor (fstat), so the path cannot be swapped between check and use:
- a directory owned by another user, or writable by group or others (sticky or not: a user's
  own file in it is still hers to point elsewhere), is refused;
- a symlink, a FIFO or a device is never opened (O_NOFOLLOW, then O_NONBLOCK and a
  regular-file check before any read or write); a file we write to must be ours with one link;
- a replaced file is written whole to a new name (O_EXCL) and renamed into place, so a reader
  never sees half of it.
The state store (act.state), the history (act.history) and the metrics (act.metrics) use it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from typing import Optional


class SafeFileError(OSError):
    """A directory or file that cannot be trusted or used, with its path and what is wrong."""


def check_dir_owner(path: str, st: os.stat_result, root_may_own: bool = False) -> None:
    """Refuse a directory a local user could plant files in or swap files out of.

    Raises:
        SafeFileError: owned by someone other than us (or root, where `root_may_own`), or
            writable by group or others.
    """
    owners = (os.geteuid(), 0) if root_may_own else (os.geteuid(),)
    if st.st_uid not in owners:
        raise SafeFileError(0, f"{path} is owned by uid {st.st_uid}, not by us (uid {os.geteuid()})"
                               f"{' or root' if root_may_own else ''}: refusing to use it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SafeFileError(0, f"{path} is writable by group or others (mode "
                               f"{stat.S_IMODE(st.st_mode):04o}): refusing to use it")


def open_dir_nofollow(path: str) -> int:
    """An O_DIRECTORY|O_NOFOLLOW descriptor of `path`; a symlink or non-directory is refused."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SafeFileError(exc.errno, f"{path} is not a directory we can use ({exc.strerror}; "
                                       f"a symlink is refused)") from None


def open_dir(path: str, create: bool, tighten: bool = True, root_may_own: bool = False) -> int:
    """Open (creating it 0700 if asked) a directory we own (check_dir_owner).  `tighten`: make
    a readable one 0700 (our own state_dir); not for a directory such as /var/log, whose mode
    is not ours to change."""
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise SafeFileError(exc.errno, f"cannot create {path}: {exc.strerror}") from None
    fd = open_dir_nofollow(path)
    try:
        st = os.fstat(fd)
        check_dir_owner(path, st, root_may_own)
        if tighten and stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_in(dfd: int, name: str, path: str, flags: int = os.O_RDONLY, writing: bool = False) -> int:
    """open(name) in dfd: no symlink, and nothing but a regular file; for writing also no hard
    link and no file of another owner.  Raises SafeFileError (errno ENOENT when absent)."""
    try:
        # O_NONBLOCK: a FIFO planted here must not block us (opening one for writing with no
        # reader would wait forever, even in the SIGTERM handler); fstat below refuses it
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SafeFileError(exc.errno, f"{path} is a symlink; refusing to follow it "
                                           f"(a symlink is refused)") from None
        raise SafeFileError(exc.errno, f"cannot open {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    # A hard link planted to another file would pass O_NOFOLLOW; nlink catches it.
    if not stat.S_ISREG(st.st_mode) or (writing and (st.st_nlink != 1 or st.st_uid != os.geteuid())):
        os.close(fd)
        raise SafeFileError(0, f"{path} is not a regular file of ours: refusing to "
                               f"{'write' if writing else 'read'} it")
    return fd


def read_fd(fd: int, limit: Optional[int] = None) -> bytes:
    """Everything from fd (up to `limit` bytes)."""
    chunks = []
    left = limit
    while left is None or left > 0:
        chunk = os.read(fd, 1 << 20 if left is None else min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        if left is not None:
            left -= len(chunk)
    return b"".join(chunks)


def read_file(directory: str, name: str, limit: int = 1 << 20) -> Optional[bytes]:
    """Contents of directory/name, opened relative to the checked directory (open_dir), never
    through a symlink; None when the directory or file is absent.

    Raises:
        SafeFileError: the directory or the file cannot be trusted or read.
    """
    try:
        dfd = open_dir(directory, create=False)
    except SafeFileError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    try:
        try:
            fd = open_in(dfd, name, os.path.join(directory, name))
        except SafeFileError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        try:
            return read_fd(fd, limit)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def atomic_write(directory: str, name: str, data: bytes, create_dir: bool = True,
                 durable: bool = True, file_mode: int = 0o600, private_dir: bool = True) -> None:
    """Write directory/name atomically (temp file + rename), never following a symlink.

    durable=False skips the fsync: after a power loss the file may be missing or empty, which
    its reader must treat as absent (a baseline: the epilog falls back to absolute counters).
    private_dir=False writes into an existing directory that is not ours to create or chmod
    (node_exporter's textfile directory, which a non-root exporter must read); the temporary
    name starts with a dot, which node_exporter ignores.
    """
    if private_dir:
        dfd = open_dir(directory, create_dir)
    else:
        dfd = open_dir_nofollow(directory)
        try:
            # its mode is the exporter's to choose, but not who may write into it
            check_dir_owner(directory, os.fstat(dfd))
        except SafeFileError:
            os.close(dfd)
            raise
    tmp = f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     file_mode, dir_fd=dfd)
        try:
            os.fchmod(fd, file_mode)  # the umask of slurmd's children may be 077
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    finally:
        os.close(dfd)


def unlink_file(directory: str, name: str) -> None:
    """Remove directory/name relative to the checked directory; absent is fine."""
    try:
        dfd = open_dir(directory, create=False)
    except SafeFileError as exc:
        if exc.errno == errno.ENOENT:
            return
        raise
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)


class Locked:
    """flock on dfd/lock_name (a regular file of ours), held while the block runs: exclusive to
    change what it guards, shared to read it.  Without `create`, a lock file nobody made means
    nobody ever wrote there: nothing to lock against."""

    def __init__(self, dfd: int, lock_name: str, path: str, exclusive: bool, create: bool) -> None:
        self.fd: Optional[int] = None
        flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
        try:
            self.fd = open_in(dfd, lock_name, path, flags, writing=create)
        except SafeFileError as exc:
            if create or exc.errno != errno.ENOENT:
                raise
            return
        fcntl.flock(self.fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)

    def __enter__(self) -> "Locked":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
