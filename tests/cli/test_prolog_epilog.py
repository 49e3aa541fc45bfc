"""--prolog and --epilog through the real CLI on the fake GPUs, without a Slurm cluster.

Here scontrol is absent or a stub that fails or hangs (faults injected at the boundary); the
real cluster is in tests/slurm/test_slurm.py, and the fault matrix in tests/cli/ and tests/slurm/
test_fault_matrix.py.
"""

import json
import os
import stat
import subprocess
import sys



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


def test_processes_leftover_on_a_job_gpu_fails_the_prolog(node, tmp_path):
    result = node.run("--prolog", "--json", scenario=f"gpus = 8\ngpu.1.processes = {os.getpid()}:1000\n", env=JOB)
    assert result.rc == 1
    [finding] = result.json["findings"]
    assert finding["check"] == "processes.leftover" and finding["gpu"] == 1
    assert f"pid {os.getpid()} (root:" in finding["message"] or f"pid {os.getpid()} (" in finding["message"]


# --- scontrol faults (the matrix rows themselves are in test_fault_matrix.py) ----------

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
    result = node.run("--prolog", scenario="gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n", env=JOB)
    assert result.rc == 1 and "no answer within 1 s" in result.stderr
    assert pending(node) is not None


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


def test_state_baseline_epilog_without_baseline_says_so_and_judges_absolute_counters(node):
    result = node.run("--epilog", "--json", env=JOB)
    assert result.rc == 0
    [finding] = result.json["findings"]
    assert finding["check"] == "state.baseline" and "no prolog baseline for job 42" in finding["message"]


def test_internal_error_outside_the_checks_exits_0_from_prolog_and_3_from_node(node):
    code = ("import sys\n"
            "from healthcheck.commands import node as orchestrate\n"
            "def boom(*a, **k):\n"
            "    raise RuntimeError('bug in our own code')\n"
            "orchestrate.judge = boom\n"
            "from healthcheck.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    for mode, rc in (("--prolog", 0), ("--epilog", 0), ("--node", 3)):
        done = subprocess.run([sys.executable, "-c", code, mode], env=node.env(JOB),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == rc, done.stderr
        assert "INTERNAL ERROR" in done.stderr and "bug in our own code" in done.stderr
    assert pending(node) is None


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
