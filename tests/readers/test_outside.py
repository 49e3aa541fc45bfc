"""healthcheck/outside.py, the one way we run an outside program: its output kept up to a cap
while the rest is read and dropped, its whole process group ended at the deadline (SIGTERM
first, then SIGKILL), and its failures as fields of the result, never exceptions."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import psutil

from healthcheck.outside import run_bounded


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def wait_for(predicate, deadline_s: float = 10.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_outside_output_past_the_cap_is_read_and_dropped_not_kept():
    # 64 MiB on stdout, 8 MiB on stderr; we keep 1 MiB of each and the program runs to its end
    code = ("import sys; b = b'x' * (1 << 20)\n"
            "for _ in range(64): sys.stdout.buffer.write(b)\n"
            "for _ in range(8): sys.stderr.buffer.write(b)\n")
    ran = run_bounded([sys.executable, "-c", code], 60, cap_bytes=1 << 20)
    assert ran.ok and ran.returncode == 0 and not ran.timed_out
    assert ran.truncated
    assert len(ran.stdout) == 1 << 20 and len(ran.stderr) == 1 << 20


def test_outside_output_under_the_cap_is_kept_whole_and_not_truncated():
    ran = run_bounded([sys.executable, "-c", "print('a' * 1000); import sys; sys.exit(3)"], 60)
    assert ran.returncode == 3 and not ran.ok and not ran.truncated
    assert ran.text().strip() == "a" * 1000
    assert ran.why() == f"{sys.executable} exited 3"


def test_outside_deadline_sends_sigterm_first_so_the_program_can_stop_its_children(tmp_path):
    # dcgmi's case: on SIGTERM it stops the diagnostic's children and exits
    marker = tmp_path / "terminated"
    prog = script(tmp_path, "polite", f"trap 'echo term > {marker}; exit 0' TERM\n"
                                      "while :; do sleep 0.1; done\n")
    ran = run_bounded([prog], 0.5, term_grace_s=10)
    assert ran.timed_out and ran.returncode is None
    assert "did not finish within 0.5 s" in (ran.error or "") and prog in (ran.error or "")
    assert marker.read_text().strip() == "term"


def test_outside_deadline_kills_the_whole_group_when_sigterm_is_ignored(tmp_path):
    pidfile = tmp_path / "child.pid"
    # a child in the background that ignores SIGTERM too, and holds our pipe open
    prog = script(tmp_path, "stubborn", "trap '' TERM\n"
                                        f"(trap '' TERM; echo $$ > /dev/null; sh -c 'echo $$ > {pidfile}; "
                                        "trap \"\" TERM; while :; do sleep 0.1; done') &\n"
                                        "while :; do sleep 0.1; done\n")
    ran = run_bounded([prog], 0.5, term_grace_s=0.5)
    assert ran.timed_out
    assert wait_for(pidfile.exists)
    child = int(pidfile.read_text())
    assert wait_for(lambda: not psutil.pid_exists(child) or
                    psutil.Process(child).status() == psutil.STATUS_ZOMBIE)


def test_outside_missing_or_unexecutable_program_is_an_error_naming_it(tmp_path):
    missing = run_bounded([str(tmp_path / "nope"), "x"], 5)
    assert missing.returncode is None and not missing.ok
    assert missing.error == f"{tmp_path / 'nope'} not found"
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    denied = run_bounded([str(plain)], 5)
    assert denied.error == f"{plain} is not executable"


def test_outside_merge_stderr_keeps_one_stream_in_order(tmp_path):
    prog = script(tmp_path, "both", "echo one; echo two >&2; echo three\n")
    ran = run_bounded([prog], 10, merge_stderr=True)
    assert ran.ok and ran.text().split() == ["one", "two", "three"] and ran.stderr == b""


def test_outside_a_program_that_closes_its_output_but_lingers_is_ended_at_the_deadline(tmp_path):
    prog = script(tmp_path, "linger", "exec >/dev/null 2>&1\nsleep 600\n")
    ran = run_bounded([prog], 0.5, term_grace_s=1)
    assert ran.timed_out and ran.returncode is None


def test_outside_environment_and_directory_are_the_callers(tmp_path):
    prog = script(tmp_path, "env", 'echo "$HC_X $(pwd)"\n')
    ran = run_bounded([prog], 10, env={"HC_X": "seen", "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                      cwd=str(tmp_path))
    assert ran.text().split() == ["seen", str(tmp_path)]
