"""Issue 17, through the CLI as root: what a local user (or a flood) must not be able to steer.

Each test ran against the code before the fix and failed; the unprivileged user is a real
account created with useradd and removed afterwards.
"""

from __future__ import annotations

import json as _json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.bench.xidflood import write_flood
from tests.gpucluster import HEALTHY, GpuCluster, pci, require_slurm

FORGED_79 = (time.strftime("%b %d %H:%M:%S") + " gpu-a backup[4242]: NVRM: Xid (PCI:0000:18:00): 79, "
             "pid=4242, GPU has fallen off the bus.\n")


def test_an_xid_line_written_by_a_user_program_into_a_messages_file_drains_nothing(node):
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


def test_two_hundred_thousand_xid_31_lines_give_one_finding_per_gpu_and_a_small_report(node):
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
HER_REASON = "Maintenance by ops - do not resume until 2027"


class LocalUser(NamedTuple):
    name: str
    pw_uid: int
    pw_gid: int


@pytest.fixture(scope="module")
def local_user(isolation):
    """A real unprivileged account, made with useradd for this module and removed after it.
    The session's /etc is private (tests/hermetic.py): useradd replaces the session's
    /etc/passwd, never the host's; -l keeps it out of the host's lastlog and faillog."""
    name = f"hc17{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-l", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True)
    try:
        with open("/etc/passwd") as handle:
            [entry] = [line.split(":") for line in handle if line.startswith(name + ":")]
        yield LocalUser(name, int(entry[2]), int(entry[3]))
    finally:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def shared_dir():
    """A directory every user may write into, sticky, as /tmp is."""
    path = Path(tempfile.mkdtemp(prefix="hc17-shared-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def as_user(user, script: str) -> None:
    subprocess.run(["sh", "-c", script], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                   check=True, env={"PATH": "/usr/bin:/bin"}, timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("trust"), fakegpu)
    with c.cluster:
        yield c


@pytest.mark.slurm
@pytest.mark.parametrize("how", ["state_dir is her symlink", "state_dir is her directory"])
def test_a_local_user_cannot_plant_a_pending_drain_nor_make_root_unlink_her_file(cluster, local_user, shared_dir, how):
    pending = _json.dumps({"reason": f"gpu-healthcheck: {HER_REASON}", "node": "gpu-b", "mode": "node",
                           "job_id": None, "created_at": 0})
    if how == "state_dir is her symlink":
        as_user(local_user, f"mkdir {shared_dir}/hers && printf '%s' '{pending}' > {shared_dir}/hers/pending-drain.json"
                            f" && ln -s {shared_dir}/hers {shared_dir}/state")
        planted = shared_dir / "hers" / "pending-drain.json"
    else:
        as_user(local_user, f"mkdir -m 0700 {shared_dir}/state && printf '%s' '{pending}' > {shared_dir}/state/pending-drain.json")
        planted = shared_dir / "state" / "pending-drain.json"
    cluster.write_config("gpu-b", state_dir=shared_dir / "state")
    try:
        done = cluster.check("gpu-b", "--node", "--act", "--json")
    finally:
        cluster.write_config("gpu-b")
    assert not cluster.drained("gpu-b"), cluster.reason("gpu-b")
    assert HER_REASON not in done.stderr  # never drained with her text, not even for a moment
    assert planted.exists()  # root removed nothing of hers
    assert f"{shared_dir}/state" in done.stderr
    assert done.returncode == 0  # a refused state_dir is our problem, not the node's


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


@pytest.mark.slurm
def test_a_node_down_not_responding_with_a_dbe_is_drained_with_our_reason_and_stays_out_when_slurmd_returns(cluster):
    c = cluster
    c.cluster.stop_slurmd("gpu-c")
    try:
        c.cluster.wait_node("gpu-c", lambda info: "DOWN" in info.get("State", "")
                            and "Not responding" in (info.get("Reason") or ""), 120)
        c.scenario("gpu-c").write_text(HEALTHY + "gpu.1.ecc.volatile.uncorrected = 2\n")
        done = c.check("gpu-c", "--node", "--act", "--json")
        assert done.returncode == 2, done.stderr
        assert c.reason("gpu-c").startswith(f"gpu-healthcheck: gpu1 pci={pci(1)} ")
    finally:
        c.cluster.start_slurmd("gpu-c")
    # slurmd answers again: ReturnToService clears DOWN, our DRAIN keeps the bad GPU out
    info = c.cluster.wait_node("gpu-c", lambda i: "DOWN" not in i.get("State", "") and "*" not in i.get("State", ""), 120)
    assert "DRAIN" in info["State"] and c.reason("gpu-c").startswith("gpu-healthcheck: gpu1 ")
    c.scenario("gpu-c").write_text(HEALTHY)
    c.cluster.resume("gpu-c")


@pytest.mark.slurm
def test_a_serial_with_spaces_keeps_the_rma_token_and_the_node_is_never_resumed(cluster):
    c = cluster
    c.scenario("gpu-a").write_text(HEALTHY + 'gpu.2.serial = 1650 5220 0380 2\ngpu.2.remap.failure = 1\n')
    done = c.check("gpu-a", "--node", "--act")
    assert done.returncode == 2
    reason = c.reason("gpu-a")
    assert " sn=1650_5220_0380_2 remap.failure=1 rma " in reason
    c.scenario("gpu-a").write_text(HEALTHY)  # the board looks fine again: still RMA
    done = c.check("gpu-a", "--node", "--act")
    assert c.drained("gpu-a") and "RMA" in done.stderr + done.stdout
    c.cluster.resume("gpu-a")
