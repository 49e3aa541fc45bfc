"""Issue 17, through the CLI as root: what a local user (or a flood) must not be able to steer;
the rows that need a Slurm cluster are in tests/slurm/test_trust.py.

Each test ran against the code before the fix and failed.
"""

from __future__ import annotations

import json as _json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.xidflood import write_flood

FORGED_79 = (time.strftime("%b %d %H:%M:%S") + " gpu-a backup[4242]: NVRM: Xid (PCI:0000:18:00): 79, "
             "pid=4242, GPU has fallen off the bus.\n")


def test_xid_a_line_written_by_a_user_program_into_a_messages_file_drains_nothing(node):
    node.kernel_log.write_text(FORGED_79)
    result = node.run("--node", "--json")
    assert result.rc == 0 and result.json["verdict"] == "pass"
    [note] = [f for f in result.json["findings"] if f["check"] == "xid"]
    assert note["severity"] == "info" and "not written by the kernel" in note["message"]
    # the kernel's own line, in the same file, still counts
    with node.kernel_log.open("a") as handle:
        handle.write(FORGED_79.replace("backup[4242]", "kernel"))
    result = node.run("--node", "--json")
    assert result.rc == 2 and "xid" in result.checks("fail")


def test_xid_two_hundred_thousand_xid_31_lines_give_one_finding_per_gpu_and_a_small_report(node):
    write_flood(node.kernel_log, 200_000)
    result = node.run("--node", "--json")
    xids = [f for f in result.json["findings"] if f["check"] == "xid"]
    assert len(xids) == 8 and all("(25000 times)" in f["message"] for f in xids)
    assert len(result.stdout) < 64 * 1024
    # Xid 31 is the application's fault, but repeated on one GPU NVIDIA's catalogue advises a
    # diagnostic: a warning (exit 1), never a drain
    assert result.rc == 1 and all(f["severity"] == "warn" for f in xids)


# --- state files: no symlink, no other owner, no FIFO ------------------------------------

JOB = {"SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "0,1"}


def test_a_fifo_at_the_history_file_or_its_rotation_blocks_nothing_even_after_sigterm(node):
    node.state_dir.mkdir(mode=0o700)
    os.mkfifo(node.state_dir / "history.jsonl")
    result = node.run("--prolog", "--json", env=JOB, timeout=60)  # the timeout is the bound
    assert result.rc == 0 and "history.jsonl is not a regular file" in result.stderr
    # slurmd's SIGTERM at PrologEpilogTimeout: the handler writes a TERMINATED line, and must
    # not block on the FIFO either
    node.write_config("[probe]\ntimeout_s = 600")
    node.scenario.write_text("gpus = 8\ngpu.0.cuda.hang_s = 3600\n")
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--prolog"], env=node.env(JOB),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    for _ in range(600):  # the probe child exists: the run is past its NVML read
        if children.exists() and children.read_text().split():
            break
        subprocess.run(["sleep", "0.05"])
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "not a regular file" in err
    os.unlink(node.state_dir / "history.jsonl")
    os.mkfifo(node.state_dir / "history.jsonl.1")
    node.write_config()
    node.run("--node", scenario="gpus = 8\n", timeout=60)
    result = node.run("--history", timeout=60)
    assert result.rc != 0 or "history.jsonl.1" in result.stderr


def test_a_short_write_to_the_history_file_is_truncated_back_and_the_next_record_survives(node):
    assert node.run("--node").rc == 0
    history = node.state_dir / "history.jsonl"
    size = history.stat().st_size

    def disk_nearly_full() -> None:  # the write gets 50 bytes in, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 50, size + 50))

    done = subprocess.run([sys.executable, "-m", "healthcheck.cli", "--node"], env=node.env(),
                          preexec_fn=disk_nearly_full, capture_output=True, text=True, timeout=120)
    assert "short write" in done.stderr
    assert history.stat().st_size == size  # no half line left behind
    assert node.run("--node").rc == 0
    records = [_json.loads(line) for line in history.read_text().splitlines()]
    assert len(records) == 2 and all(r["mode"] == "node" for r in records)


def test_a_line_cut_short_by_a_crash_does_not_swallow_the_next_record(node):
    node.state_dir.mkdir(mode=0o700)
    (node.state_dir / "history.jsonl").write_text('{"mode": "node", "verdict": "pa')
    assert node.run("--node").rc == 0
    result = node.run("--history", "--json")
    assert [r["verdict"] for r in result.json] == ["pass"]


def test_escape_sequences_and_newlines_in_a_process_name_reach_neither_the_table_nor_the_log(node):
    name = "\x1b[2K\x1b[1Aevil\nFORGED: gpu-healthcheck: all good"
    proc = subprocess.Popen(["bash", "-c", 'exec -a "$NAME" sleep 600'], env={"NAME": name, "PATH": "/usr/bin:/bin"})
    try:
        node.scenario.write_text(f"gpus = 8\ngpu.0.processes = {proc.pid}:100\n")
        for args in (("--node",), ("--prolog",)):
            result = node.run(*args, env=JOB)
            out = result.stdout + result.stderr
            assert "evil" in out and "\x1b" not in out
            assert not any(line.startswith("FORGED") for line in out.splitlines())
        history = (node.state_dir / "history.jsonl").read_text()
        assert "\\u001b" not in history and "evil" in history
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("value", ["1234_5", "1234;5", "0", "99999999999", "12 34"])
def test_a_job_id_that_is_not_slurms_never_reaches_jobid(node, value):
    result = node.run("--prolog", "--json", env={**JOB, "SLURM_JOB_ID": value})
    assert result.json["job_id"] is None
    assert "is not a Slurm job id" in result.stderr
    assert not (node.state_dir / "jobs" / f"{value}.json").exists()
