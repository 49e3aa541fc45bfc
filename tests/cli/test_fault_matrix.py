"""The fault matrix (docs/failures.md, "Failure behaviour"): one test per row, named after its
row; here the rows without a Slurm cluster (the others: tests/slurm/test_fault_matrix.py).

Each runs the real CLI against the fake GPU libraries.  Each asserts the documented outcome and
that nothing is lost: every finding, drain and refusal reaches the history file (and the journal
where one runs; tests/cli/test_journal.py proves the journal path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from tests.lib.fakenode import history, logged

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1"}


def test_journald_absent_fallback_sink(node, tmp_path):
    from tests.cli.test_journal import NO_NAMESPACES, run_in_namespace
    if NO_NAMESPACES:
        pytest.skip(NO_NAMESPACES)
    done = run_in_namespace(node, None, ["--epilog"], env={**JOB, "SLURMD_NODENAME": "gpu-a"},
                            scenario="gpus = 8\ngpu.2.ecc.volatile.uncorrected = 1\n")
    assert done.returncode == 1
    assert "journal unavailable" in done.stderr and "GPU_SERIAL=1650522003802" in done.stderr
    assert "ecc.volatile_uncorrected" in logged(node.state_dir)


@pytest.mark.parametrize("state", ["unwritable", "full", "corrupt baseline", "corrupt pending"])
def test_state_dir_unwritable_full_or_corrupt_clear_message_epilog_falls_back_never_a_crash(node, tmp_path, state):
    env = {**JOB, "SLURMD_NODENAME": "gpu-a"}
    dbe = "gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n"
    if state == "unwritable":
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("")
        node.state_dir = blocker / "state"
        node.write_config()
        expect = "cannot write the baseline for job 4242"
    elif state == "full":
        if not Path("/dev/full").exists():
            pytest.skip("no /dev/full")
        node.write_config('history_file = "/dev/full"')
        expect = "history sink failed"
    elif state == "corrupt baseline":
        assert node.run("--prolog", env=env).rc == 0
        (node.state_dir / "jobs" / "4242.json").write_text("{not json")
        expect = None
    else:
        node.state_dir.mkdir(mode=0o700)
        (node.state_dir / "pending-drain.json").write_text("garbage")
        expect = "corrupt pending drain"
    first = node.run("--prolog", env=env) if state != "corrupt baseline" else None
    if first is not None:
        assert first.rc == 0 and "Traceback" not in first.stderr
    if expect:
        assert expect in first.stderr
    result = node.run("--epilog", "--json", env=env, scenario=dbe)
    assert result.rc == 1 and "Traceback" not in result.stderr  # the DBE is still caught
    assert "ecc.volatile_uncorrected" in result.checks("fail")
    if state == "corrupt baseline":
        assert any("corrupt baseline" in f["message"] for f in result.json["findings"])


def test_config_file_invalid_clear_error_naming_file_and_key(node):
    node.config_path.write_text("[probe]\ntimeout_s = 'soon'\n")
    result = node.run("--node")
    assert result.rc == 3
    assert f"{node.config_path}: probe.timeout_s: expected float, got 'soon'" in result.stderr
    result = node.run("--prolog", env={**JOB, "SLURMD_NODENAME": "gpu-a"},
                      scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n")
    assert f"{node.config_path}: probe.timeout_s" in result.stderr
    assert result.rc == 1  # the checks still protect the next job, with the built-in defaults


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rule applies to root")
@pytest.mark.parametrize("mode,owner", [(0o666, 0), (0o644, 1000)])
def test_config_file_world_writable_or_not_owned_by_root_refused_checks_run_with_defaults_critical_log(node, mode, owner):
    os.chown(node.config_path, owner, 0)
    os.chmod(node.config_path, mode)
    result = node.run("--node", "--json", scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n")
    assert "CRITICAL" in result.stderr and "refused" in result.stderr
    assert str(node.config_path) in result.stderr
    assert result.checks("fail") == ["ecc.volatile_uncorrected"]  # checks ran
    # ... and acted on nothing: could not check as configured (issue 36, case 12)
    assert result.rc == 3 and str(node.config_path) in result.json["config_refused"]


def test_xid_kernel_log_unreadable_unknown_for_the_xid_check_only(node, tmp_path):
    node.kernel_log = tmp_path / "unreadable"
    node.write_config()
    result = node.run("--epilog", "--json", env={**JOB, "SLURMD_NODENAME": "gpu-a"})
    assert result.rc == 0
    assert [(f["check"], f["severity"]) for f in result.json["findings"] if f["check"] != "state.baseline"] == [
        ("xid", "unknown")]
    assert "Xid events not checked" in logged(node.state_dir)


@pytest.mark.parametrize("value", ["0,,1", "abc", "0;reboot", "$(reboot)", "0-99999", "9"])
def test_slurm_job_gpus_malformed_unknown_no_drain_logged(node, value):
    result = node.run("--prolog", "--json", env={**JOB, "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": value},
                      scenario="gpus = 8\ngpu.0.cuda.alloc_error = 214\n")
    assert result.rc == 0
    assert result.json["verdict"] == "unknown" and result.checks("unknown") == ["slurm.job_gpus"]
    assert result.json["probes"] == [] and not (node.state_dir / "pending-drain.json").exists()
    assert "slurm.job_gpus" in logged(node.state_dir)


def test_sixteen_prologs_at_once_on_one_node_all_complete_no_lost_or_mixed_baselines(node):
    procs = []
    for job in range(100, 116):
        env = node.env({"SLURM_JOB_ID": str(job), "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": str(job % 8)})
        procs.append(subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--prolog"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    jobs = node.state_dir / "jobs"
    assert sorted(p.name for p in jobs.iterdir()) == [f"{job}.json" for job in range(100, 116)]
    for job in range(100, 116):
        assert json.loads((jobs / f"{job}.json").read_text())["job_id"] == str(job)
    assert sorted(r["job_id"] for r in history(node.state_dir)) == [str(j) for j in range(100, 116)]


def test_an_exception_injected_into_a_check_exit_0_traceback_logged_no_drain(node):
    code = ("import sys\n"
            "from healthcheck import checks\n"
            "spec = checks.CATALOGUE['ecc.volatile_uncorrected']\n"
            "def boom(gpu, node, ctx):\n"
            "    raise ZeroDivisionError('injected')\n"
            "checks.CATALOGUE['ecc.volatile_uncorrected'] = spec._replace(fn=boom)\n"
            "from healthcheck.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    for mode in ("--prolog", "--epilog"):
        done = subprocess.run([sys.executable, "-c", code, mode], env=node.env({**JOB, "SLURMD_NODENAME": "gpu-a"}),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0
        assert "ZeroDivisionError: injected" in done.stderr
    assert not (node.state_dir / "pending-drain.json").exists()
    records = history(node.state_dir)
    assert records and all(r["verdict"] == "unknown" for r in records[-2:])
    assert "ZeroDivisionError: injected" in logged(node.state_dir)


def _prolog_with_two_hung_probes(node) -> Tuple[subprocess.Popen, List[int]]:
    """A prolog in its own process group (as slurmd starts it) whose probes of GPUs 0 and 1
    hang; returns once both probe children exist."""
    node.write_config("[probe]\ntimeout_s = 600")
    node.scenario.write_text("gpus = 8\ngpu.0.cuda.hang_s = 3600\ngpu.1.cuda.hang_s = 3600\n")
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--prolog"],
                            env=node.env({**JOB, "SLURMD_NODENAME": "gpu-a"}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    children: List[int] = []
    while time.monotonic() < deadline and len(children) < 2:
        children = _probe_children(proc.pid)
        time.sleep(0.05)
    assert len(children) == 2
    return proc, children


def test_sigterm_from_slurmd_at_prolog_epilog_timeout_children_killed_pending_state_consistent(node):
    proc, children = _prolog_with_two_hung_probes(node)
    os.killpg(proc.pid, signal.SIGTERM)  # slurmd signals the script's whole process group
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and "terminated by SIGTERM" in err
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    [record] = history(node.state_dir)  # the timeout is findable per node and job
    assert record["terminated"] is True and record["job_id"] == "4242" and record["mode"] == "prolog"
    # nothing half-written: no pending drain, no baseline, no temporary files
    assert not (node.state_dir / "pending-drain.json").exists()
    leftovers = [p for p in node.state_dir.rglob("*") if p.name.startswith(".")] if node.state_dir.exists() else []
    assert leftovers == []


# --- Slurm's clocks (issue 13) -------------------------------------------------------------

def _hanging_scontrol(tmp_path: Path) -> Path:
    """A slurmctld that never answers: every scontrol call blocks for an hour."""
    stub = tmp_path / "scontrol-hangs"
    stub.write_text("#!/bin/sh\nexec sleep 3600\n")
    stub.chmod(0o755)
    return stub


def _probe_children(pid: int) -> List[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _is_fork_of_checker(pid: int) -> bool:
    try:
        return b"healthcheck.cli" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _gone(pid: int) -> bool:
    """Exited (or a zombie waiting for init to reap it: it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _wait_gone(pids: List[int], timeout: float = 30) -> List[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def test_every_nvml_cuda_and_scontrol_call_hanging_node_act_ends_within_its_50_s_budget(node, tmp_path):
    """HealthCheckProgram's worst case with the shipped defaults (nvml 10 s, probe 30 s,
    scontrol 10 s: 70 s before): NVML hangs on half the GPUs, CUDA hangs on the rest, slurmctld
    never answers, and a pending drain makes the run call scontrol before it starts.  Slurm kills
    HealthCheckProgram at 60 s; the run must end by itself inside act_budget_s = 50 s (the
    subprocess timeout below is the proof), keep its drain pending, and leave no probe child."""
    node.write_config(f'scontrol = "{_hanging_scontrol(tmp_path)}"')
    node.state_dir.mkdir(mode=0o700)
    (node.state_dir / "pending-drain.json").write_text(json.dumps(
        {"reason": "gpu-healthcheck: gpu1 gpu.lost=GPU_IS_LOST prolog job=1", "node": "gpu-a",
         "mode": "prolog", "job_id": "1", "created_at": time.time()}))
    node.scenario.write_text("gpus = 8\ngpu.*.cuda.hang_s = 3600\n"
                             + "".join(f"gpu.{i}.nvml.hang_s = 3600\n" for i in range(4)))
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--node", "--act", "--json"],
                            env=node.env({"SLURMD_NODENAME": "gpu-a"}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    children: List[int] = []
    deadline = time.monotonic() + 40
    forks: List[int] = []  # the probe children: forks of the checker, not scontrol
    while time.monotonic() < deadline and len(forks) < 4 and proc.poll() is None:
        children = sorted(set(children) | set(_probe_children(proc.pid)))
        forks = [p for p in children if _is_fork_of_checker(p)]
        time.sleep(0.05)
    # Slurm's limit is 60 s, our budget 50 s from the run's own start: the run's own clock is the
    # assertion (the hangs last an hour; a wall-clock limit here would also count a loaded
    # host's interpreter start-up, which Slurm's budget has no say in)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, err
    doc = json.loads(out)
    assert doc["duration_s"] < 60, doc["duration_s"]
    assert {(f["check"], f["gpu"], f["value"]) for f in doc["findings"] if f["severity"] == "fail"} == \
        {("gpu.lost", i, "TIMEOUT") for i in range(4)} | {("cuda.probe", i, "timeout") for i in range(4, 8)}
    assert doc["action"]["pending"] is True and "not called" in doc["action"]["detail"]
    probes = [p for p in children if p in forks]
    assert len(probes) == 4 and _wait_gone(children) == []  # probes and scontrol alike
    assert "gpu.lost=TIMEOUT" in (node.state_dir / "pending-drain.json").read_text() or \
        "gpu.lost=GPU_IS_LOST" in (node.state_dir / "pending-drain.json").read_text()


def test_nvml_init_hanging_is_bounded_by_nvml_timeout_fail_drain(node):
    node.write_config("nvml_timeout_s = 2")
    result = node.run("--node", "--json", scenario="gpus = 8\nnvml.init_hang_s = 3600\n", timeout=60)
    assert result.rc == 2
    [finding] = result.json["findings"]
    assert (finding["check"], finding["value"], finding["action"]) == ("nvml.init", "TIMEOUT", "drain")


@pytest.mark.parametrize("how", ["parent", "group"])
def test_cuda_probe_children_die_with_their_parent_sigkill_of_the_parent_or_its_process_group(node, how):
    """slurmd SIGKILLs the script's process group after PrologEpilogTimeout; an OOM killer or
    an admin may SIGKILL the parent alone.  Either way no probe child outlives it."""
    proc, children = _prolog_with_two_hung_probes(node)
    if how == "group":
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert _wait_gone(children) == []
