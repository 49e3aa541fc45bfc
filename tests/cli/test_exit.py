"""cli.leave(): the process ends at once with its exit status, skipping the interpreter's
teardown (a prolog-speed measure), but what an orderly exit does that matters still happens:
stdout and stderr reach their readers and atexit handlers run.  A reader that went away does not
change the status, which for a prolog decides whether a job may start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.lib.fakenode import ROOT


def _python(code: str, **kwargs: object) -> subprocess.Popen:
    # stdout block-buffered, as slurmd's pipe gets it: PYTHONUNBUFFERED would write at once
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                            **kwargs)  # type: ignore[call-overload]


def test_leave_flushes_both_streams_runs_atexit_and_keeps_the_status() -> None:
    proc = _python("""
        import atexit, sys
        from healthcheck.cli import leave
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("report")      # buffered: only leave() flushes it
        sys.stderr.write("warning\\n")
        leave(3)
        print("not reached")
    """, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert out == "reportatexit ran\n" and err == "warning\n"


def test_a_reader_that_left_does_not_change_the_status() -> None:
    """Python's own exit would print "Exception ignored ... BrokenPipeError" and exit 120."""
    proc = _python("""
        import sys
        from healthcheck.cli import leave
        sys.stdout.write("x" * 100)
        sys.stdin.read()                # until the test has closed the reading end
        leave(0)
    """, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert b"BrokenPipe" not in proc.stderr.read()


def test_the_process_entry_points_exit_through_leave() -> None:
    """`python3 -m healthcheck.cli` and the console script's target: entry(), not main()."""
    done = subprocess.run([sys.executable, "-m", "healthcheck.cli", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("gpu-healthcheck ")
    usage = subprocess.run([sys.executable, "-m", "healthcheck.cli", "--node", "--gpus", "x"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 3 and "--gpus" in usage.stderr
