"""journald entries through the real native protocol, received on a socket of our own.

The CLI runs in a child under `unshare -m`, whose /run is a fresh tmpfs with our socket's
directory bound on /run/systemd/journal: libsystemd in the child sends to the path it always
uses, and the test reads the datagrams and parses them as journald would.  Nothing is mocked
between `journal.sendv` and the socket.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from healthcheck.act.journal import MESSAGE_IDS
from tests.lib.fakenode import ROOT
from tests.lib.journalsock import FakeJournal, private_run_argv

DBE = ("gpus = 4\ngpu.2.ecc.volatile.uncorrected = 3\ngpu.2.serial = 1650522003802\n"
       "gpu.2.pci_bus_id = 00000000:38:00.0\n")
JOB_ENV = {"SLURM_JOB_ID": "1234", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "2"}


def _namespaces_work() -> Optional[str]:
    """None when `unshare -m` and mount are permitted here, else why not."""
    if os.geteuid() != 0:
        return "needs root for unshare -m and mount"
    try:
        done = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /run"],
                              capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return "unshare(1) is not installed"
    if done.returncode != 0:
        return f"unshare -m / mount not permitted here: {done.stderr.strip()}"
    return None


NO_NAMESPACES = _namespaces_work()
needs_namespaces = pytest.mark.skipif(NO_NAMESPACES is not None, reason=str(NO_NAMESPACES))
def _have_systemd_python() -> bool:
    try:
        from systemd import journal  # noqa: F401
    except ImportError:
        return False
    return True


needs_systemd_python = pytest.mark.skipif(not _have_systemd_python(),
                                          reason="systemd-python (extra [journald]) is not installed")


def run_in_namespace(node, journal_dir: Optional[Path], args: List[str],
                     env: Optional[Dict[str, str]] = None, scenario: Optional[str] = None,
                     fake: Optional[FakeJournal] = None) -> subprocess.CompletedProcess:
    """The real CLI with a private /run: our socket on /run/systemd/journal, or no journal."""
    if scenario is not None:
        node.scenario.write_text(scenario)
    proc = subprocess.Popen(private_run_argv(journal_dir, [sys.executable, "-m", "healthcheck.cli", *args]),
                            env=node.env(env), cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if fake is not None:
        fake.drain_while(proc)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


# --- the real thing ----------------------------------------------------------------------

@needs_namespaces
@needs_systemd_python
def test_dbe_epilog_entries_reach_the_journal_socket(node, tmp_path):
    fake = FakeJournal(tmp_path / "journal")
    try:
        done = run_in_namespace(node, fake.directory, ["--epilog"], env=JOB_ENV, scenario=DBE, fake=fake)
    finally:
        fake.close()
    assert done.returncode == 1, done.stderr
    assert "journal unavailable" not in done.stderr
    ours = [e for e in fake.entries if e.get("SYSLOG_IDENTIFIER") == "gpu-healthcheck"]
    assert ours and len(ours) == len(fake.entries)
    [finding] = [e for e in ours if e.get("GPU_HEALTHCHECK_CHECK") == "ecc.volatile_uncorrected"]
    assert finding["MESSAGE_ID"] == MESSAGE_IDS["finding"] == "9e324a751d354f1485506bf1ca25bc23"
    assert finding["PRIORITY"] == "3"
    assert finding["GPU_SERIAL"] == "1650522003802"
    assert finding["GPU_PCI_BUS_ID"] == "00000000:38:00.0"
    assert finding["GPU_INDEX"] == "2" and finding["GPU_UUID"].startswith("GPU-")
    assert finding["GPU_HEALTHCHECK_SEVERITY"] == "fail" and finding["GPU_HEALTHCHECK_VALUE"] == "3"
    assert finding["SLURM_JOB_ID"] == "1234" and finding["SLURMD_NODENAME"] == "gpu-a"
    assert finding["GPU_HEALTHCHECK_MODE"] == "epilog"
    assert "3 volatile uncorrected ECC errors" in finding["MESSAGE"]
    [summary] = [e for e in ours if e["GPU_HEALTHCHECK_EVENT"] == "summary"]
    assert summary["MESSAGE_ID"] == MESSAGE_IDS["summary"]
    assert summary["GPU_HEALTHCHECK_VERDICT"] == "fail" and summary["SLURM_JOB_ID"] == "1234"
    assert summary["PRIORITY"] == "3" and "epilog on gpu-a: fail" in summary["MESSAGE"]
    [pending] = [e for e in ours if e["GPU_HEALTHCHECK_EVENT"] == "pending"]
    assert pending["MESSAGE_ID"] == MESSAGE_IDS["pending"] and pending["PRIORITY"] == "2"
    # every entry can be found by job, and says which mode wrote it
    assert all(e["GPU_HEALTHCHECK_MODE"] == "epilog" for e in ours)
    assert all(e.get("SLURM_JOB_ID") == "1234" for e in ours if e["GPU_HEALTHCHECK_EVENT"] != "finding"
               or "GPU_INDEX" in e)
    # the history is written as well
    assert (node.state_dir / "history.jsonl").read_text().count("\n") == 1


@needs_namespaces
@needs_systemd_python
def test_multiline_and_large_entries_arrive_whole(node, tmp_path):
    """A traceback has newlines (binary form); a huge one may come as a memfd."""
    fake = FakeJournal(tmp_path / "journal")
    trace = "Traceback (most recent call last):\n" + "  File \"x.py\", line 1, in f\n" * 20000 + "KeyError: 'x'\n"
    (tmp_path / "trace.txt").write_text(trace)
    code = ("import sys; from healthcheck.act.sinks import emit_internal_error; "
            f"emit_internal_error('prolog', open({str(tmp_path / 'trace.txt')!r}).read())")
    script = (f"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && mount --bind "
              f"{shlex.quote(str(fake.directory))} /run/systemd/journal && exec "
              f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}")
    proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], env=node.env(), cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        fake.drain_while(proc)
    finally:
        fake.close()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    [entry] = fake.entries
    assert entry["MESSAGE_ID"] == MESSAGE_IDS["internal-error"] == "1a75330f8bb64044a2fb11fa4b2c0613"
    assert entry["PRIORITY"] == "2" and entry["GPU_HEALTHCHECK_MODE"] == "prolog"
    assert entry["MESSAGE"].endswith(trace) and "INTERNAL ERROR in prolog" in entry["MESSAGE"]
    history = (node.state_dir / "history.jsonl").read_text()
    assert '"internal_error":true' in history and "KeyError" in history


@needs_namespaces
def test_without_a_journal_events_go_to_stderr_and_history(node, tmp_path):
    done = run_in_namespace(node, None, ["--epilog"], env=JOB_ENV, scenario=DBE)
    assert done.returncode == 1  # as with a journal: the epilog drained (pending)
    lines = done.stderr.splitlines()
    [notice] = [l for l in lines if "journal sink" in l]
    assert "journal unavailable" in notice and str(node.state_dir / "history.jsonl") in notice
    [finding] = [l for l in lines if "3 volatile uncorrected ECC errors" in l]
    assert "GPU_SERIAL=1650522003802" in finding and "GPU_PCI_BUS_ID=00000000:38:00.0" in finding
    assert "GPU_INDEX=2" in finding and "SLURM_JOB_ID=1234" in finding
    assert "GPU_HEALTHCHECK_CHECK=ecc.volatile_uncorrected" in finding
    assert any("[summary" in l for l in lines)
    # an INFO event that the normal stderr rule hides is still printed when there is no journal
    assert any("no prolog baseline for job 1234" in l for l in lines)
    history = (node.state_dir / "history.jsonl").read_text()
    assert '"verdict":"fail"' in history and "1650522003802" in history


@needs_namespaces
def test_node_mode_without_journal_keeps_its_exit_code(node, tmp_path):
    done = run_in_namespace(node, None, ["--node", "--json"], scenario=DBE)
    assert done.returncode == 2
    assert '"verdict": "fail"' in done.stdout  # stdout stays one JSON document
    assert "GPU_SERIAL=1650522003802" in done.stderr


@needs_namespaces
@needs_systemd_python
def test_journal_false_sends_nothing(node, tmp_path):
    node.write_config("journal = false")
    fake = FakeJournal(tmp_path / "journal")
    try:
        done = run_in_namespace(node, fake.directory, ["--epilog"], env=JOB_ENV, scenario=DBE, fake=fake)
    finally:
        fake.close()
    assert done.returncode == 1 and fake.entries == []
    assert "journal sink" not in done.stderr and "[finding" not in done.stderr  # no fallback dump
    assert (node.state_dir / "history.jsonl").exists()


@needs_namespaces
@needs_systemd_python
def test_an_xid_acknowledgement_reaches_the_journal(node, tmp_path):
    """`--ack` changes what later runs judge: the node's journal says what was acknowledged."""
    node.kernel_log.write_text("[ 1234.500000] NVRM: Xid (PCI:0000:18:00): 48, pid=1, DBE\n")
    fake = FakeJournal(tmp_path / "journal")
    try:
        done = run_in_namespace(node, fake.directory, ["--ack"], fake=fake)
    finally:
        fake.close()
    assert done.returncode == 0, done.stderr
    [entry] = [e for e in fake.entries if e.get("GPU_HEALTHCHECK_OUTCOME") == "acknowledged"]
    assert entry["GPU_HEALTHCHECK_MODE"] == "ack" and "0000:18:00 Xid 48 x1" in entry["MESSAGE"]
