"""Run one outside program with a deadline and a cap on what we keep of its output.

    ran = run_bounded(["/usr/bin/dcgmi", "diag", "-r", "2", "-j"], timeout_s=600, cap_bytes=4 << 20)
    ran.ok, ran.returncode, ran.stdout, ran.truncated, ran.timed_out, ran.error

Every door to an outside program (dcgmi, nvidia-smi, scontrol, sbatch, the fabric's tools)
goes through here, so each gets the same three guarantees:
- **Bounded memory.** Output is read as it comes, and only the first `cap_bytes` of each stream
  are kept; the rest is read and dropped, so a program printing 1 GiB costs us `cap_bytes`, and
  the program never blocks on a full pipe.  `truncated` says it happened.
- **A deadline that ends the whole program.** It runs in a session of its own; past `timeout_s`
  its process group gets SIGTERM (dcgmi stops its nvvs children on SIGTERM, not on SIGKILL:
  DCGM's dcgmi/Diag.cpp), then SIGKILL after `term_grace_s` if anything of it is still there.
- **No exception for the program's failures.** A missing or unexecutable program, a timeout
  and a non-zero exit are fields of the result; `error` says which, in words that name the
  program.

A leaf module (no imports from the package): readers and effectors both use it.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from typing import IO, Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

DEFAULT_CAP_BYTES = 4 << 20
DEFAULT_TERM_GRACE_S = 5.0
_CHUNK = 64 << 10


class Ran(NamedTuple):
    """What an outside program did.  `returncode` is None where it never started or was ended
    by us at its deadline."""

    argv: Sequence[str]
    returncode: Optional[int]
    stdout: bytes = b""
    stderr: bytes = b""
    truncated: bool = False  # a stream exceeded cap_bytes: what is kept is its first cap_bytes
    timed_out: bool = False
    error: Optional[str] = None  # why it did not run to an exit status of its own
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    def text(self, stream: str = "stdout") -> str:
        return (self.stdout if stream == "stdout" else self.stderr).decode("utf-8", "replace")

    def why(self) -> str:
        """One line for a log or a finding: the error, or the exit status and stderr's last line."""
        if self.error:
            return self.error
        last = [line for line in self.text("stderr").splitlines() if line.strip()]
        return f"{self.argv[0]} exited {self.returncode}" + (f": {last[-1].strip()}" if last else "")


def run_bounded(argv: Sequence[str], timeout_s: float, *, cap_bytes: int = DEFAULT_CAP_BYTES,
                term_grace_s: float = DEFAULT_TERM_GRACE_S, merge_stderr: bool = False,
                env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                as_user: Optional[Tuple[int, int, Sequence[int]]] = None) -> Ran:
    """Run `argv` to its end or its deadline; see the module docstring.  `merge_stderr` sends
    stderr into stdout (one stream, one cap).  `as_user` (uid, gid, groups), as root: the child
    drops to exactly those ids before it execs (setgroups, setgid, setuid)."""
    argv = list(argv)
    started = time.monotonic()
    ids: Dict[str, Any] = ({"user": as_user[0], "group": as_user[1], "extra_groups": list(as_user[2])}
                           if as_user is not None else {})
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                                env=dict(env) if env is not None else None, cwd=cwd,
                                start_new_session=True, **ids)
    except FileNotFoundError:
        return Ran(argv, None, error=f"{argv[0]} not found")
    except PermissionError:
        return Ran(argv, None, error=f"{argv[0]} is not executable")
    except OSError as exc:
        return Ran(argv, None, error=f"cannot run {argv[0]}: {exc.strerror or exc}")
    kept: Dict[str, List[bytes]] = {"stdout": [], "stderr": []}
    sizes = {"stdout": 0, "stderr": 0}
    truncated = timed_out = False
    deadline = started + max(0.0, timeout_s)
    streams: Dict[str, Optional[IO[bytes]]] = {"stdout": proc.stdout, "stderr": proc.stderr}
    with selectors.DefaultSelector() as sel:
        for name, stream in streams.items():
            if stream is not None:
                sel.register(stream, selectors.EVENT_READ, name)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                name = key.data
                room = cap_bytes - sizes[name]
                if room > 0:
                    kept[name].append(chunk[:room])
                if len(chunk) > room:
                    truncated = True
                sizes[name] += len(chunk)
    returncode: Optional[int] = None
    if not timed_out:
        try:
            returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True  # it closed its output but did not exit in time
    if timed_out:
        _end_group(proc, term_grace_s)
    for stream in streams.values():
        if stream is not None:
            stream.close()
    error = None
    if timed_out:
        error = f"{' '.join(argv)} did not finish within {timeout_s:g} s; ended"
    return Ran(argv, returncode, b"".join(kept["stdout"]), b"".join(kept["stderr"]), truncated,
               timed_out, error, time.monotonic() - started)


def _end_group(proc: "subprocess.Popen[bytes]", term_grace_s: float) -> None:
    """SIGTERM to the program's process group, then SIGKILL to what is left after the grace
    period (the group may outlive its leader: a child that kept running)."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=term_grace_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=term_grace_s)
    except subprocess.TimeoutExpired:
        pass  # unkillable (D state): left to the kernel; the caller has its answer already


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the whole group is gone already


def run_attached(argv: Sequence[str], timeout_s: float, term_grace_s: float) -> Optional[int]:
    """Run `argv` to its end with our stdout and stderr (its output is ours: the journal, for a
    timer's run), no stdin; its exit status (negative: killed by that signal), or None once it
    passed `timeout_s`: then SIGTERM, SIGKILL after `term_grace_s`.  The program alone is
    signalled, so that it can end its own children in its way (a fabric sweep cancels its
    jobs).  OSError: it cannot start."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=term_grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return None


def start_detached(argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
                   cwd: Optional[str] = None) -> "tuple[Optional[int], Optional[str]]":
    """Start `argv` in a session of its own, not waited for: it outlives this run (slurmd's
    kill of HealthCheckProgram's process group does not reach it), and bounds itself.
    (pid, None), or (None, why it did not start)."""
    argv = list(argv)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=dict(env) if env is not None else None,
                                cwd=cwd, start_new_session=True, close_fds=True)
    except OSError as exc:
        return None, f"cannot run {argv[0]}: {exc.strerror or exc}"
    return proc.pid, None
