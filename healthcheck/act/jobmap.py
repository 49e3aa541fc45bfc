"""Writes dcgm-exporter's HPC job mapping (config `hpc_job_mapping_dir`): the prolog of a job
that starts adds its id to the file of each of its GPUs, the epilog takes it out again.

    events = job_map_events(config, outcome, Mode.PROLOG)   # by sinks.emit, prolog and epilog

    /run/dcgm-job-map/0      1234          # GPU 0 runs job 1234
    /run/dcgm-job-map/3      77\\n1234      # GPU 3 is shared by jobs 77 and 1234

decide/jobmap.py says what the files hold and why (dcgm-exporter's format).  Here:
- one writer at a time: flock on `.gpu-healthcheck.lock` in the directory, waited for at most
  LOCK_WAIT_S (two jobs' prologs or epilogs on one node run at once);
- each file replaced whole (a temp file beside it, then rename), so dcgm-exporter reads the
  old list or the new one, never half of one; files are 0644 for an exporter that is not root;
- the directory is created 0755 where missing, and refused where others may write to it (a
  user's symlink there would have us copy a file of theirs choosing); files are opened with
  O_NOFOLLOW.

It is a record, as the metrics textfile is: it is written under `drain.report_only` too.  A
failure is one warning (journal, slurmd's log), never a failed job: the job's GPUs then lack
the hpc_job label, nothing else.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from typing import TYPE_CHECKING, List, Optional, Sequence

from ..decide.jobmap import Changes, is_gpu_file, on_end, on_start, valid_job_id

if TYPE_CHECKING:
    from ..config import Config
    from ..model import LogEvent, Mode, RunOutcome

LOCK_NAME = ".gpu-healthcheck.lock"
LOCK_WAIT_S = 5.0  # seconds; a writer holds the lock for a few file writes
MAX_FILE_BYTES = 1 << 16  # a GPU's list: a few job ids; more is not a file of ours


class JobMapError(OSError):
    """The mapping directory cannot be used or written, with the path."""


def job_map_events(config: "Config", outcome: "RunOutcome", mode: "Mode") -> List["LogEvent"]:
    """Carry out the job's start or end in `config.hpc_job_mapping_dir`; the events to log
    (one INFO line of what changed, or one WARNING of why nothing did).  Never raises."""
    from ..model import INFO, WARNING, LogEvent, Mode

    directory = config.hpc_job_mapping_dir
    snapshot = outcome.snapshot
    job = snapshot.job if snapshot is not None else None
    if not directory or job is None or not valid_job_id(job.job_id):
        return []
    job_id = job.job_id or ""
    fields = {"GPU_HEALTHCHECK_MODE": mode.value, "SLURM_JOB_ID": job_id}
    if mode is Mode.PROLOG:
        if outcome.exit_code != 0:
            return []  # the job does not start here: no GPU of this node runs it
        if job.gpu_ids is None or job.gpu_ids_error or snapshot is None or not snapshot.selected:
            if job.gpu_ids_error:
                return [LogEvent("error", WARNING, f"hpc_job_mapping_dir {directory}: job {job_id} not "
                                 f"written: its GPUs are not known ({job.gpu_ids_error})", fields)]
            return []  # a job without GPUs
        gpus: Optional[Sequence[int]] = snapshot.selected
    else:
        gpus = None
    try:
        changed = update(directory, job_id, gpus)
    except OSError as exc:
        return [LogEvent("error", WARNING, f"hpc_job_mapping_dir: job {job_id} not "
                         f"{'written' if gpus is not None else 'removed'}: {exc.strerror or exc}", fields)]
    if not changed:
        return []
    what = (f"job {job_id} added to GPU(s) {','.join(changed)}" if gpus is not None
            else f"job {job_id} taken out of GPU(s) {','.join(changed)}")
    return [LogEvent("jobmap", INFO, f"hpc_job_mapping_dir {directory}: {what}", fields)]


def update(directory: str, job_id: str, gpus: Optional[Sequence[int]],
           lock_wait_s: float = LOCK_WAIT_S) -> List[str]:
    """The job starts on `gpus` (NVML indices), or ends (gpus None).  Returns the GPU file
    names changed.  Raises JobMapError (or OSError) naming the path."""
    if not os.path.isabs(directory):  # slurmd's working directory is no place to guess
        raise JobMapError(errno.EINVAL, f"{directory} is not an absolute path")
    if gpus is None and not os.path.isdir(directory):
        return []  # nothing was ever written: nothing to take out
    _usable_dir(directory, create=gpus is not None)
    lock = _lock(directory, lock_wait_s)
    try:
        names = [str(g) for g in gpus] if gpus is not None else [n for n in os.listdir(directory) if is_gpu_file(n)]
        current = {n: text for n in names for text in (_read(os.path.join(directory, n)),) if text is not None}
        changes: Changes = on_start(job_id, gpus, current) if gpus is not None else on_end(job_id, current)
        for name, text in changes.items():
            _apply(directory, name, text)
        return sorted(changes, key=int)
    finally:
        os.close(lock)


def _usable_dir(directory: str, create: bool) -> None:
    if create and not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=0o755, exist_ok=True)
            os.chmod(directory, 0o755)  # whatever slurmd's umask: dcgm-exporter may not be root
        except OSError as exc:
            raise JobMapError(exc.errno, f"cannot create {directory}: {exc.strerror}") from None
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise JobMapError(errno.ENOTDIR, f"{directory} is not a directory")
    if st.st_mode & 0o022 or st.st_uid not in (0, os.geteuid()):
        raise JobMapError(errno.EPERM, f"{directory} may be written by others "
                          f"(mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}): refused")


def _lock(directory: str, wait_s: float) -> int:
    path = os.path.join(directory, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise JobMapError(errno.EAGAIN, f"{path}: another writer held the lock for "
                                  f"{wait_s:g} s") from None
            time.sleep(0.01)


def _read(path: str) -> Optional[str]:
    """A GPU file's text, or None where there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JobMapError(exc.errno, f"cannot read {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise JobMapError(errno.EINVAL, f"{path} is not a plain file")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise JobMapError(errno.EFBIG, f"{path} holds over {MAX_FILE_BYTES} bytes: not a job list")
    return data.decode("utf-8", "replace")


def _apply(directory: str, name: str, text: Optional[str]) -> None:
    path = os.path.join(directory, name)
    if text is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)  # whatever the umask: dcgm-exporter may not run as root
            data = text.encode()
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise JobMapError(exc.errno, f"cannot write {path}: {exc.strerror}") from None

