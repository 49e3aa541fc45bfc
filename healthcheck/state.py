"""State files in `state_dir`: the prolog's per-job baseline and a not-yet-applied drain.

    store = StateStore("/var/lib/gpu-healthcheck")
    store.write_baseline(Baseline(job_id="1234", ...))      # jobs/1234.json, mode 0600
    baseline, error = store.read_baseline("1234")
    store.write_pending(PendingDrain(reason="gpu-healthcheck: ...", ...))

We run as root in a directory a user might reach: every write goes to a new file created with
O_EXCL|O_NOFOLLOW relative to a directory opened with O_NOFOLLOW, then renamed into place, so
a planted symlink is never followed and a reader never sees half a file.  Reads and unlinks
go through the same directory descriptor, reads with O_NOFOLLOW|O_NONBLOCK and a regular-file
check.  A directory owned by another user or writable by group or others is refused (a user
who owns state_dir could plant a pending drain with her own reason).  Directories are 0700.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from typing import Any, Dict, Optional, Tuple

from .model import Baseline, GpuBaseline, KernelLogPosition
from .records import NamedTuple

JOBS = "jobs"
PENDING = "pending-drain.json"
ACKS = "xid-acks.json"
OUR_DRAIN = "our-drain.json"


class StateError(OSError):
    """state_dir cannot be used, with the path and what is wrong."""


class PendingDrain(NamedTuple):
    reason: str
    node: str
    mode: str
    job_id: Optional[str]
    created_at: float
    admin_comment_job: Optional[str] = None


class XidAck(NamedTuple):
    """Up to where one GPU's Xids are dealt with (an admin's --ack, or the resume of our drain).

    Xids logged after `position` count again.  `boot` is the boot (btime) it belongs to: after
    a reboot the kernel log starts over and the ack no longer applies.  `count` is how many
    acknowledgements dealt with a failing Xid on this GPU, over its life: past
    `xid_escalate_after` a new one escalates instead of asking for another reset."""

    pci: str  # kernel form dddd:bb:dd
    position: KernelLogPosition
    acked_at: float
    boot: Optional[float] = None
    count: int = 0  # type: ignore[assignment]  # tuple.count is never used here
    by: str = "ack"  # "ack" (gpu-healthcheck --ack) | "resume" (an admin resumed our drain)


class OurDrain(NamedTuple):
    """The drain we applied to this node, so that a later run can tell the admin resumed it."""

    node: str
    reason: str
    drained_at: float
    # (kernel PCI address, volatile ECC errors corrected + uncorrected) of each GPU that had any
    # when we drained: a GPU reset (or driver reload) starts these counters over, which deals
    # with that GPU's Xids even where the kernel log shows no init line
    volatile_ecc: Tuple[Tuple[str, int], ...] = ()


def check_dir_owner(path: str, st: os.stat_result) -> None:
    """Refuse a directory a local user could plant files in or swap files out of.

    Raises:
        StateError: owned by someone other than us (root in production), or writable by group
            or others (sticky or not: a user's own file in it is still hers to point elsewhere).
    """
    if st.st_uid != os.geteuid():
        raise StateError(0, f"{path} is owned by uid {st.st_uid}, not by us (uid {os.geteuid()}): "
                            f"refusing to use it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateError(0, f"{path} is writable by group or others (mode "
                            f"{stat.S_IMODE(st.st_mode):04o}): refusing to use it")


def _open_dir_nofollow(path: str) -> int:
    """An O_DIRECTORY|O_NOFOLLOW descriptor of `path`; a symlink or non-directory is refused."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise StateError(exc.errno, f"{path} is not a directory we can use ({exc.strerror}; "
                                    f"a symlink is refused)") from None


def open_private_dir(path: str, create: bool) -> int:
    """Open (creating it 0700 if asked) a directory we own, refusing a symlink, one owned by
    another user, or one writable by group or others; tighten a readable one to 0700.

    The checks are made on the opened descriptor (fstat), so the path cannot be swapped between
    the check and the use; every file in it is then opened relative to that descriptor.
    """
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StateError(exc.errno, f"cannot create {path}: {exc.strerror}") from None
    fd = _open_dir_nofollow(path)
    try:
        st = os.fstat(fd)
        check_dir_owner(path, st)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


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
        dfd = open_private_dir(directory, create_dir)
    else:
        dfd = _open_dir_nofollow(directory)
        try:
            # its mode is the exporter's to choose, but not who may write into it
            check_dir_owner(directory, os.fstat(dfd))
        except StateError:
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


def open_in(dfd: int, name: str, path: str) -> int:
    """Open dfd/name for reading: no symlink, no FIFO or device (O_NONBLOCK, then a regular
    file check before any read).  Raises FileNotFoundError when absent, StateError otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StateError(exc.errno, f"cannot open {path}: {exc.strerror}"
                                    + ("; a symlink is refused" if exc.errno == errno.ELOOP else "")) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StateError(0, f"{path} is not a regular file: refusing to read it")
    return fd


def read_file(directory: str, name: str, limit: int = 1 << 20) -> Optional[bytes]:
    """Contents of directory/name, opened relative to the checked directory (see
    open_private_dir), never through a symlink; None when the directory or file is absent.

    Raises:
        StateError: the directory or the file cannot be trusted or read.
    """
    try:
        dfd = open_private_dir(directory, create=False)
    except StateError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    try:
        try:
            fd = open_in(dfd, name, os.path.join(directory, name))
        except FileNotFoundError:
            return None
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def unlink_file(directory: str, name: str) -> None:
    """Remove directory/name relative to the checked directory; absent is fine."""
    try:
        dfd = open_private_dir(directory, create=False)
    except StateError as exc:
        if exc.errno == errno.ENOENT:
            return
        raise
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)


def _check_fields(cls: Any, data: Any) -> Dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"expected an object for {cls.__name__}")
    names = set(cls._fields)
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)} in {cls.__name__}")
    return data


def _plain(value: Any) -> Any:
    """Records as JSON objects (json.dumps would write a NamedTuple as a list)."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def baseline_to_json(baseline: Baseline) -> bytes:
    return json.dumps(_plain(baseline), sort_keys=True).encode()


def baseline_from_json(raw: bytes) -> Baseline:
    """Raises ValueError (or a subclass) on anything that is not a baseline we wrote."""
    data = _check_fields(Baseline, json.loads(raw.decode("utf-8")))
    gpus = tuple(GpuBaseline(**_check_fields(GpuBaseline, g)) for g in data.get("gpus") or ())
    for gpu in gpus:
        for name in GpuBaseline._fields:
            value = getattr(gpu, name)
            if name == "uuid":
                if not isinstance(value, str):
                    raise ValueError("uuid must be a string")
            elif value is not None and not isinstance(value, (int, bool)):
                raise ValueError(f"{name} must be a number")
    log = data.get("kernel_log")
    position = KernelLogPosition(**_check_fields(KernelLogPosition, log)) if log else None
    if not isinstance(data.get("job_id"), str) or not isinstance(data.get("taken_at"), (int, float)):
        raise ValueError("job_id and taken_at are required")
    return Baseline(job_id=data["job_id"], taken_at=float(data["taken_at"]), gpus=gpus,
                    kernel_log=position)


def _job_file(job_id: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "._-+" else "_" for ch in job_id)[:64]
    return f"{safe}.json"


class StateStore:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.jobs_dir = os.path.join(state_dir, JOBS)

    def write_baseline(self, baseline: Baseline) -> None:
        _open_and_close(self.state_dir)
        # not fsynced: every job start pays for it, and a lost baseline only costs attribution
        atomic_write(self.jobs_dir, _job_file(baseline.job_id), baseline_to_json(baseline),
                     durable=False)

    def read_baseline(self, job_id: str) -> Tuple[Optional[Baseline], Optional[str]]:
        """(baseline, None), or (None, why there is none) — never raises."""
        path = os.path.join(self.jobs_dir, _job_file(job_id))
        try:
            raw = read_file(self.jobs_dir, _job_file(job_id))
        except OSError as exc:
            return None, f"cannot read baseline {path}: {exc.strerror or exc}"
        if raw is None:
            return None, f"no prolog baseline for job {job_id} ({path})"
        try:
            baseline = baseline_from_json(raw)
        except (ValueError, TypeError) as exc:
            return None, f"corrupt baseline {path}: {exc}"
        if baseline.job_id != job_id:
            return None, f"baseline {path} belongs to job {baseline.job_id}, not {job_id}"
        return baseline, None

    def remove_baseline(self, job_id: str) -> None:
        unlink_file(self.jobs_dir, _job_file(job_id))

    def write_pending(self, pending: PendingDrain) -> None:
        atomic_write(self.state_dir, PENDING, json.dumps(_plain(pending), sort_keys=True).encode())

    def read_pending(self) -> Tuple[Optional[PendingDrain], Optional[str]]:
        path = os.path.join(self.state_dir, PENDING)
        try:
            raw = read_file(self.state_dir, PENDING)
        except OSError as exc:
            return None, f"cannot read pending drain {path}: {exc.strerror or exc}"
        if raw is None:
            return None, None
        try:
            data = _check_fields(PendingDrain, json.loads(raw.decode("utf-8")))
            pending = PendingDrain(**data)
            if not isinstance(pending.reason, str) or not isinstance(pending.node, str):
                raise ValueError("reason and node must be strings")
        except (ValueError, TypeError) as exc:
            return None, f"corrupt pending drain {path}: {exc}"
        return pending, None

    def clear_pending(self, expected: Optional[PendingDrain] = None) -> None:
        """Remove the pending drain; with `expected`, only if it is still that one."""
        if expected is not None:
            current, _ = self.read_pending()
            if current is not None and current != expected:
                return
        unlink_file(self.state_dir, PENDING)


def _open_and_close(path: str) -> None:
    os.close(open_private_dir(path, True))


def acks_to_json(acks: Dict[str, XidAck]) -> bytes:
    return json.dumps({pci: _plain(a) for pci, a in sorted(acks.items())}, sort_keys=True).encode()


def acks_from_json(raw: bytes) -> Dict[str, XidAck]:
    """Raises ValueError (or a subclass) on anything that is not an acks file we wrote."""
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("expected an object")
    acks = {}
    for pci, entry in data.items():
        entry = dict(_check_fields(XidAck, entry))
        entry["position"] = KernelLogPosition(**_check_fields(KernelLogPosition, entry.get("position")))
        ack = XidAck(**entry)
        if ack.pci != pci or not isinstance(ack.count, int) or not isinstance(ack.acked_at, (int, float)):
            raise ValueError(f"malformed entry for {pci}")
        acks[pci] = ack
    return acks


def read_acks(store: "StateStore") -> Tuple[Dict[str, XidAck], Optional[str]]:
    """({pci: ack}, None), or ({}, why) — never raises."""
    path = os.path.join(store.state_dir, ACKS)
    try:
        raw = read_file(store.state_dir, ACKS)
    except OSError as exc:
        return {}, f"cannot read Xid acknowledgements {path}: {exc.strerror or exc}"
    if raw is None:
        return {}, None
    try:
        return acks_from_json(raw), None
    except (ValueError, TypeError) as exc:
        return {}, f"corrupt Xid acknowledgements {path}: {exc}"


def write_acks(store: "StateStore", acks: Dict[str, XidAck]) -> None:
    atomic_write(store.state_dir, ACKS, acks_to_json(acks))


def read_our_drain(store: "StateStore") -> Optional[OurDrain]:
    try:
        raw = read_file(store.state_dir, OUR_DRAIN)
        if raw is None:
            return None
        data = dict(_check_fields(OurDrain, json.loads(raw.decode("utf-8"))))
        data["volatile_ecc"] = tuple((str(p), int(n)) for p, n in data.get("volatile_ecc") or ())
        return OurDrain(**data)
    except (OSError, ValueError, TypeError):
        return None  # an unreadable note only costs the automatic acknowledgement


def write_our_drain(store: "StateStore", drain: OurDrain) -> None:
    atomic_write(store.state_dir, OUR_DRAIN, json.dumps(_plain(drain), sort_keys=True).encode())


def clear_our_drain(store: "StateStore") -> None:
    unlink_file(store.state_dir, OUR_DRAIN)
