"""Hermetic tests, proven: the risky paths leave the host's state, journald and Slurm alone.

The risky paths are the ones that fall back to the built-in defaults (a refused or invalid
config: state_dir=/var/lib/gpu-healthcheck, scontrol from PATH or /usr/bin/scontrol with the
host's slurm.conf, the journald socket). tests/lib/hermetic.py puts the session in private mount
and network namespaces. Here:

- a control run shows the risk is real: without the isolation of its own, the CLI on a
  refused config writes the state directory it sees, calls scontrol with the slurm.conf it
  sees, and reaches the journald socket it sees;
- the same selection of tests, in a fresh pytest, leaves a planted "host" untouched (state
  files, a slurm.conf whose controller is a listening socket of ours, a journald socket);
- a fresh pytest started in the host's own namespaces leaves the real host's paths as it found
  them, compared from outside the session.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from tests.lib import hermetic
from tests.lib.fakenode import ROOT


# The fault-matrix rows and CLI tests that fall back to the defaults.
RISKY = ["tests/cli/test_fault_matrix.py", "tests/cli/test_node_cli.py", "-k",
         "config_file_invalid or world_writable or config_error or journald_absent"]
DBE = "gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n"
PLANTED = {"var/lib/gpu-healthcheck/history.jsonl": '{"planted": "history"}\n',
           "var/lib/gpu-healthcheck/jobs/4242.json": '{"planted": "baseline"}\n',
           "etc/gpu-healthcheck/config.toml": "# planted\n"}


def _tree(paths) -> Dict[str, Dict]:
    return {p: hermetic.snapshot(p) for p in paths}


class PlantedHost:
    """In this session's private namespaces: files where the defaults point, a slurm.conf whose
    controller is our listening socket, and a journald socket we read."""

    def __init__(self, tmp: Path) -> None:
        for rel, text in PLANTED.items():
            path = Path("/") / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        os.chmod("/etc/gpu-healthcheck/config.toml", 0o644)
        self.controller = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.controller.bind(("127.0.0.1", 0))
        self.controller.listen(8)
        self.controller.setblocking(False)
        port = self.controller.getsockname()[1]
        Path("/etc/slurm").mkdir(exist_ok=True)
        Path("/etc/slurm/slurm.conf").write_text(
            f"ClusterName=host\nSlurmctldHost=host(127.0.0.1)\nSlurmctldPort={port}\n"
            "AuthType=auth/munge\nNodeName=gpu-a NodeAddr=127.0.0.1 CPUs=1\n"
            "PartitionName=p Nodes=gpu-a Default=YES\n")
        Path("/run/systemd/journal").mkdir(parents=True, exist_ok=True)
        self.journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.journal.bind("/run/systemd/journal/socket")
        self.journal.setblocking(False)
        self.paths = ["/var/lib/gpu-healthcheck", "/etc/gpu-healthcheck", "/etc/slurm"]

    def controller_contacted(self) -> bool:
        try:
            conn, _ = self.controller.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def journal_received(self) -> bool:
        try:
            self.journal.recv(1 << 20)
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        self.controller.close()
        self.journal.close()


@pytest.fixture
def planted(tmp_path, isolation):
    host = PlantedHost(tmp_path)
    try:
        yield host
    finally:
        host.close()


def _pytest(args: List[str], prefix: List[str] = (), pass_fds=()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=str(ROOT), capture_output=True, text=True, timeout=600,
                          pass_fds=pass_fds)


def test_control_without_isolation_the_defaults_reach_state_scontrol_and_journal(node, planted):
    """The risk is real, and our comparison sees it: the CLI run directly (not under pytest's
    isolation) on a refused config uses the planted state dir, slurm.conf and journal (the
    prolog acts on nothing, exit 0; --cluster reads the controller)."""
    before = _tree(planted.paths)
    os.chmod(node.config_path, 0o666)  # refused: the built-in defaults apply
    # SLURM_CONF as slurmd sets it on a node whose slurm.conf is the default one
    result = node.run("--prolog", env={"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1",
                                       "SLURMD_NODENAME": "gpu-a",
                                       "SLURM_CONF": "/etc/slurm/slurm.conf"}, scenario=DBE)
    assert result.rc == 0 and "refused" in result.stderr, result.stderr
    changed = hermetic.differences(before, _tree(planted.paths))
    assert "/var/lib/gpu-healthcheck/jobs/4242.json: changed" in changed
    assert "/var/lib/gpu-healthcheck/history.jsonl: changed" in changed
    # a refused config acts on nothing (issue 36, case 12): the prolog calls no scontrol, but a
    # reading mode on the same defaults finds the planted slurm.conf's controller
    assert not planted.controller_contacted()
    node.run("--cluster", env={"SLURM_CONF": "/etc/slurm/slurm.conf"})
    assert planted.controller_contacted()
    if "journal unavailable" not in result.stderr:
        assert planted.journal_received()


def test_the_risky_tests_leave_a_planted_host_untouched(planted):
    before = _tree(planted.paths)
    done = _pytest(RISKY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "deselected" in done.stdout
    assert hermetic.differences(before, _tree(planted.paths)) == []
    assert not planted.controller_contacted()
    assert not planted.journal_received()


@pytest.mark.skipif(os.geteuid() != 0, reason="entering the host's namespaces needs root")
def test_the_risky_tests_started_on_the_real_host_leave_it_as_they_found_it(isolation):
    """A fresh pytest in the host's own mount and network namespaces (so its conftest isolates
    from the real host, as `make test` does), compared from outside through the host's root."""
    host = isolation.host
    before = hermetic.host_snapshot(host)
    # --root: the session's own root (the same as the host's, unless we run in a chroot)
    done = _pytest(RISKY, prefix=["nsenter", f"--mount=/proc/self/fd/{host.mnt_fd}",
                                  f"--net=/proc/self/fd/{host.net_fd}",
                                  f"--root=/proc/self/fd/{host.root_fd}", f"--wd={ROOT}", "--"],
                   pass_fds=(host.mnt_fd, host.net_fd, host.root_fd))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hermetic: session isolated" in done.stdout
    changed = hermetic.differences(before, hermetic.host_snapshot(host))
    assert changed == [], ("the host changed while the risky tests ran (by them, or by another "
                           "process on this machine): %s" % changed)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None, reason="useradd as root")
def test_an_account_added_in_the_session_never_reaches_the_hosts_etc(isolation):
    name = "hchermetic%d" % os.getpid()
    subprocess.run(["useradd", "-l", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True)
    try:
        assert any(line.startswith(name + ":") for line in open("/etc/passwd"))
        for path in ("/etc/passwd", "/etc/group", "/etc/shadow"):
            with open(isolation.host.path(path)) as handle:
                assert not any(line.startswith(name + ":") for line in handle), path
    finally:
        subprocess.run(["userdel", name], check=False)


# A session started inside this one: this session's private view is its "host".  It isolates,
# says so, and once told looks at each hidden path: what it lists there, then writes a file.
INNER_SESSION = """
import json, os, sys
from tests.lib import hermetic
hermetic.isolate()
print("isolated", flush=True)
sys.stdin.readline()
seen = {}
for path in hermetic.HIDDEN:
    seen[path] = sorted(os.listdir(path)) if os.path.isdir(path) else None
    try:
        with open(os.path.join(path, "written-by-the-session"), "w") as handle:
            handle.write("session")
    except OSError as exc:
        seen[path] = [f"cannot write: {exc.strerror}"]
print(json.dumps(seen), flush=True)
"""


def test_a_hidden_path_the_host_removes_and_recreates_stays_hidden(isolation):
    """The host may remove a hidden path and make it again while a session runs (a package
    purged and reinstalled, a configuration tool that replaces /etc/slurm).  A tmpfs mounted
    over the host's directory went with it, and the session then saw, and wrote, the host's
    new directory; the hidden path is now a directory of the session's own tmpfs over its
    parent.  Here this session's private view is the host of a session started inside it."""
    for path in hermetic.HIDDEN:  # exist on the inner session's host when it starts
        os.makedirs(path, exist_ok=True)
    # a directory this session mounted over cannot be removed here (EBUSY); the others can
    removable = [path for path in hermetic.HIDDEN if not os.path.ismount(path)]
    assert "/var/lib/gpu-healthcheck" in removable
    inner = subprocess.Popen([sys.executable, "-c", INNER_SESSION], cwd=str(ROOT), text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert inner.stdout.readline() == "isolated\n", inner.communicate(timeout=60)
        for path in removable:  # the host removes each and makes it again, with content
            shutil.rmtree(path)
            os.mkdir(path)
            Path(path, "planted-by-the-host").write_text("host\n")
        out, err = inner.communicate("look\n", timeout=60)
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
    assert inner.returncode == 0, err
    seen = json.loads(out)
    assert seen == {path: [] for path in hermetic.HIDDEN}, seen
    for path in removable:
        assert os.listdir(path) == ["planted-by-the-host"], path
