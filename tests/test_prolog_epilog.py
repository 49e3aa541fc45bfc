"""--prolog and --epilog through the real CLI on the fake GPUs, without a Slurm cluster.

Here scontrol is absent or a stub that fails or hangs (faults injected at the boundary); the
real cluster is in test_slurm.py.  These are most rows of the fault matrix.
"""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

JOB = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "0,1"}


def baseline_path(node, job="42"):
    return node.state_dir / "jobs" / f"{job}.json"


def pending(node):
    path = node.state_dir / "pending-drain.json"
    return json.loads(path.read_text()) if path.exists() else None


def stub(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_healthy_prolog_passes_and_writes_a_private_baseline(node):
    result = node.run("--prolog", "--json", env=JOB)
    assert result.rc == 0, result.stderr
    doc = result.json
    assert doc["mode"] == "prolog" and doc["job_id"] == "42" and doc["verdict"] == "pass"
    assert sorted(p["gpu"] for p in doc["probes"]) == [0, 1]
    path = baseline_path(node)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(node.state_dir.stat().st_mode) == 0o700
    data = json.loads(path.read_text())
    assert data["job_id"] == "42" and len(data["gpus"]) == 8
    assert data["kernel_log"]["offset"] == 0 and pending(node) is None


def test_prolog_probes_only_the_jobs_gpus_and_never_the_others(node):
    scenario = "gpus = 8\n" + "".join(f"gpu.{i}.cuda.alloc_error = 2\ngpu.{i}.processes = 1:70000\n"
                                      for i in (0, 1, 2, 3))
    result = node.run("--prolog", "--json", scenario=scenario,
                      env={**JOB, "SLURM_JOB_GPUS": "4,5,6,7"})
    assert result.rc == 0, result.stdout
    assert sorted(p["gpu"] for p in result.json["probes"]) == [4, 5, 6, 7]
    assert not result.checks("fail")


def test_job_gpus_map_through_minor_numbers_not_nvml_order(node):
    scenario = "gpus = 2\ngpu.0.minor_number = 1\ngpu.1.minor_number = 0\ngpu.1.cuda.alloc_error = 214\n"
    result = node.run("--prolog", "--json", scenario=scenario, env={**JOB, "SLURM_JOB_GPUS": "0"})
    assert result.rc == 1
    [finding] = result.json["findings"]
    assert (finding["check"], finding["gpu"]) == ("cuda.probe", 1)


def test_cuda_visible_devices_is_the_fallback(node):
    env = {k: v for k, v in JOB.items() if k != "SLURM_JOB_GPUS"}
    result = node.run("--prolog", "--json", env={**env, "CUDA_VISIBLE_DEVICES": "3"})
    assert [p["gpu"] for p in result.json["probes"]] == [3]


def test_job_without_gpus_gets_the_cheap_checks_only(node):
    env = {k: v for k, v in JOB.items() if k != "SLURM_JOB_GPUS"}
    result = node.run("--prolog", "--json", env=env, scenario="gpus = 8\ngpu.0.processes = 1:100\n")
    assert result.rc == 0 and result.json["probes"] == []


def test_leftover_process_on_a_job_gpu_fails_the_prolog(node, tmp_path):
    result = node.run("--prolog", "--json", scenario=f"gpus = 8\ngpu.1.processes = {os.getpid()}:1000\n", env=JOB)
    assert result.rc == 1
    [finding] = result.json["findings"]
    assert finding["check"] == "processes.leftover" and finding["gpu"] == 1
    assert f"pid {os.getpid()} (root:" in finding["message"] or f"pid {os.getpid()} (" in finding["message"]


# --- fault matrix rows -----------------------------------------------------------------

def test_nvml_init_fails_driver_not_loaded_drain(node):
    result = node.run("--prolog", "--json", scenario="nvml.init_error = 9\n", env=JOB)
    assert result.rc == 1
    assert pending(node)["reason"] == "gpu-healthcheck: nvml.init=DRIVER_NOT_LOADED prolog job=42"


def test_nvml_init_fails_rm_version_mismatch_drain(node):
    result = node.run("--prolog", scenario="nvml.init_error = 18\n", env=JOB)
    assert result.rc == 1
    assert "nvml.init=LIB_RM_VERSION_MISMATCH" in pending(node)["reason"]


def test_a_gpu_is_lost_drain(node):
    result = node.run("--prolog", scenario="gpus = 8\ngpu.1.lost = 1\n", env=JOB)
    assert result.rc == 1
    assert pending(node)["reason"] == "gpu-healthcheck: gpu1 gpu.lost=GPU_IS_LOST prolog job=42"


def test_nvml_hangs_on_one_gpu_bounded_by_the_deadline(node):
    node.write_config("nvml_timeout_s = 2")
    started = time.monotonic()
    result = node.run("--prolog", "--json", scenario="gpus = 8\ngpu.1.nvml.hang_s = 3600\n", env=JOB)
    assert time.monotonic() - started < 30
    assert result.rc == 1
    assert [(f["check"], f["gpu"], f["value"]) for f in result.json["findings"]] == [("gpu.lost", 1, "TIMEOUT")]


def test_cuda_probe_hangs_bounded_by_the_deadline(node):
    node.write_config("[probe]\ntimeout_s = 2")
    result = node.run("--prolog", "--json", scenario="gpus = 8\ngpu.0.cuda.hang_s = 3600\n", env=JOB)
    assert result.rc == 1
    assert [(f["check"], f["gpu"], f["value"]) for f in result.json["findings"]] == [("cuda.probe", 0, "timeout")]


def test_cuda_probe_crashes_child_killed_by_a_signal(node):
    result = node.run("--prolog", "--json", scenario="gpus = 8\ngpu.1.cuda.crash = 6\n", env=JOB)
    assert result.rc == 1
    [finding] = result.json["findings"]
    assert (finding["check"], finding["value"]) == ("cuda.probe", "crashed")
    assert "signal 6" in finding["message"]


def test_scontrol_missing_keeps_a_pending_drain(node):
    result = node.run("--epilog", scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n", env=JOB)
    assert result.rc == 1
    assert "not found" in result.stderr
    assert pending(node)["reason"].endswith("ecc.volatile_uncorrected=1 epilog job=42")


def test_scontrol_non_zero_keeps_a_pending_drain(node, tmp_path):
    failing = stub(tmp_path, "scontrol", "echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1")
    node.write_config(f'scontrol = "{failing}"')
    result = node.run("--prolog", scenario="gpus = 8\ngpu.0.remap.failure = 1\n", env=JOB)
    assert result.rc == 1
    assert "Unable to contact slurm controller" in result.stderr
    assert "remap.failure=1 rma prolog job=42" in pending(node)["reason"]


def test_scontrol_hanging_keeps_a_pending_drain_within_the_timeout(node, tmp_path):
    hanging = stub(tmp_path, "scontrol", "exec sleep 3600")
    node.write_config(f'scontrol = "{hanging}"\nscontrol_timeout_s = 1')
    started = time.monotonic()
    result = node.run("--prolog", scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n", env=JOB)
    assert time.monotonic() - started < 20
    assert result.rc == 1 and "no answer within 1 s" in result.stderr
    assert pending(node) is not None


def test_state_dir_unwritable_is_a_clear_message_not_a_crash(node, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    node.state_dir = blocker / "state"
    node.write_config()
    result = node.run("--prolog", "--json", env=JOB)
    assert result.rc == 0
    assert "cannot write the baseline for job 42" in result.stderr
    result = node.run("--epilog", "--json", env=JOB, scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n")
    assert result.rc == 1  # falls back to absolute counters; the drain is pending, and says why
    assert "state.baseline" in result.checks("info")
    assert "could not be written either" in result.stderr


def test_state_dir_full_is_a_clear_message_not_a_crash(node):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    node.write_config('history_file = "/dev/full"')
    result = node.run("--prolog", env=JOB)
    assert result.rc == 0, result.stderr


def test_corrupt_baseline_falls_back_to_absolute_counters(node):
    assert node.run("--prolog", env=JOB).rc == 0
    baseline_path(node).write_text("{not json")
    result = node.run("--epilog", "--json", env=JOB, scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n")
    assert result.rc == 1
    infos = [f for f in result.json["findings"] if f["check"] == "state.baseline"]
    assert infos and "corrupt baseline" in infos[0]["message"]


def test_corrupt_pending_file_is_reported_and_ignored(node):
    node.state_dir.mkdir(mode=0o700)
    (node.state_dir / "pending-drain.json").write_text("garbage")
    result = node.run("--prolog", env=JOB)
    assert result.rc == 0 and "corrupt pending drain" in result.stderr


def test_epilog_attributes_new_errors_and_xids_to_the_job_and_removes_the_baseline(node):
    node.kernel_log.write_text("[ 5.0] NVRM: Xid (PCI:0000:38:00): 48, pid=1, before the job\n")
    assert node.run("--prolog", env=JOB).rc == 0
    with node.kernel_log.open("a") as log:
        log.write("[ 9.0] NVRM: Xid (PCI:0000:28:00): 79, pid=2, GPU has fallen off the bus.\n")
    result = node.run("--epilog", "--json", env=JOB,
                      scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\ngpu.0.ecc.aggregate.uncorrected = 1\n")
    assert result.rc == 1
    checks = {(f["check"], f["gpu"]) for f in result.json["findings"] if f["severity"] == "fail"}
    assert checks == {("ecc.volatile_uncorrected", 0), ("ecc.aggregate_uncorrected", 0), ("xid", 1)}
    assert "(1 new during job)" in next(f["message"] for f in result.json["findings"]
                                        if f["check"] == "ecc.volatile_uncorrected")
    assert not baseline_path(node).exists()
    assert pending(node)["reason"].startswith("gpu-healthcheck: gpu1 pci=00000000:28:00.0 sn=1650522003801 xid=79 epilog job=42")


def test_epilog_without_baseline_says_so_and_judges_absolute_counters(node):
    result = node.run("--epilog", "--json", env=JOB)
    assert result.rc == 0
    [finding] = result.json["findings"]
    assert finding["check"] == "state.baseline" and "no prolog baseline for job 42" in finding["message"]


def test_kernel_log_unreadable_is_unknown_for_xid_only(node, tmp_path):
    node.kernel_log = tmp_path / "absent.log"
    node.write_config()
    result = node.run("--epilog", "--json", env=JOB)
    assert result.rc == 0
    assert [(f["check"], f["severity"]) for f in result.json["findings"]
            if f["check"] != "state.baseline"] == [("xid", "unknown")]
    assert pending(node) is None


@pytest.mark.parametrize("value", ["0,,1", "abc", "0;reboot", "$(reboot)", "0-99999"])
def test_malformed_slurm_job_gpus_is_unknown_no_drain(node, value):
    result = node.run("--prolog", "--json", env={**JOB, "SLURM_JOB_GPUS": value},
                      scenario="gpus = 8\ngpu.0.cuda.alloc_error = 214\n")
    assert result.rc == 0
    assert result.json["verdict"] == "unknown"
    assert result.checks("unknown") == ["slurm.job_gpus"]
    assert result.json["probes"] == [] and pending(node) is None
    assert "cannot tell the job's GPUs" in result.stderr


def test_job_gpu_that_matches_no_gpu_is_unknown_no_drain(node):
    result = node.run("--prolog", "--json", env={**JOB, "SLURM_JOB_GPUS": "9"})
    assert result.rc == 0 and result.checks("unknown") == ["slurm.job_gpus"]


def test_config_file_invalid_is_a_clear_error_and_checks_still_run(node):
    node.config_path.write_text("[drain]\nmax_fraction = 'half'\n")
    result = node.run("--prolog", env=JOB, scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n")
    assert f"{node.config_path}: drain.max_fraction: expected float" in result.stderr
    assert result.rc == 1  # the defaults still protect the next job


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rule applies to root")
@pytest.mark.parametrize("mode,owner", [(0o666, 0), (0o644, 1000)])
def test_config_file_world_writable_or_not_root_is_refused(node, mode, owner):
    os.chown(node.config_path, owner, 0)
    os.chmod(node.config_path, mode)
    result = node.run("--node", "--json")
    assert "refused" in result.stderr and "CRITICAL" in result.stderr
    assert result.json["verdict"] in ("pass", "unknown", "warn", "fail")  # the checks still ran
    assert len(result.json["gpus"]) == 8


def test_exception_injected_into_a_check_exit_0_traceback_logged_no_drain(node):
    code = ("import sys\n"
            "from healthcheck import checks\n"
            "spec = checks.CATALOGUE['ecc.volatile_uncorrected']\n"
            "def boom(gpu, node, ctx):\n"
            "    raise ZeroDivisionError('injected')\n"
            "checks.CATALOGUE['ecc.volatile_uncorrected'] = checks.CheckSpec(spec.check_id, 'gpu', boom)\n"
            "from healthcheck.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    env = node.env({**JOB})
    done = subprocess.run([sys.executable, "-c", code, "--prolog", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "ZeroDivisionError: injected" in done.stderr
    assert json.loads(done.stdout)["verdict"] == "unknown"
    assert pending(node) is None


def test_internal_error_outside_the_checks_exits_0_from_prolog_and_3_from_node(node):
    code = ("import sys\n"
            "from healthcheck import runner\n"
            "def boom(*a, **k):\n"
            "    raise RuntimeError('bug in our own code')\n"
            "runner.judge = boom\n"
            "from healthcheck.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    for mode, rc in (("--prolog", 0), ("--epilog", 0), ("--node", 3)):
        done = subprocess.run([sys.executable, "-c", code, mode], env=node.env(JOB),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == rc, done.stderr
        assert "INTERNAL ERROR" in done.stderr and "bug in our own code" in done.stderr
    assert pending(node) is None


def test_sigterm_at_prolog_epilog_timeout_kills_the_probe_children(node):
    node.write_config("[probe]\ntimeout_s = 600")
    node.scenario.write_text("gpus = 8\ngpu.0.cuda.hang_s = 3600\ngpu.1.cuda.hang_s = 3600\n")
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--prolog"], env=node.env(JOB),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    children = []
    while time.monotonic() < deadline and len(children) < 2:
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        time.sleep(0.05)
    assert len(children) == 2
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "terminated by SIGTERM" in err
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert pending(node) is None
    assert baseline_path(node).exists() is False  # never written half-way: the run stopped before it


def test_sixteen_prologs_at_once_keep_their_own_baselines(node):
    procs = []
    for job in range(100, 116):
        env = node.env({"SLURM_JOB_ID": str(job), "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": str(job % 8)})
        procs.append((job, subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--prolog"], env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for job, proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    files = sorted((node.state_dir / "jobs").iterdir())
    assert [f.name for f in files] == [f"{job}.json" for job in range(100, 116)]
    for job in range(100, 116):
        assert json.loads((node.state_dir / "jobs" / f"{job}.json").read_text())["job_id"] == str(job)
    assert not [f for f in (node.state_dir / "jobs").iterdir() if f.name.startswith(".")]


def test_symlink_planted_in_state_dir_is_not_followed(node, tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious")
    (node.state_dir / "jobs").mkdir(parents=True, mode=0o700)
    os.symlink(target, node.state_dir / "jobs" / "42.json")
    assert node.run("--prolog", env=JOB).rc == 0
    assert target.read_text() == "precious"
    assert not (node.state_dir / "jobs" / "42.json").is_symlink()  # replaced by rename, not written through


def test_state_dir_that_is_a_symlink_is_refused(node, tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    os.symlink(real, node.state_dir)
    result = node.run("--prolog", env=JOB)
    assert result.rc == 0 and "symlink is refused" in result.stderr
    assert list(real.iterdir()) == []
