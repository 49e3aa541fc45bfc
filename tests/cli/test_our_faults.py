"""Our faults are ours (issue 13): command-line mistakes exit 3 in one line, a broken install is
an internal error that never drains nor fails a job, config values that cannot be meant are
refused at load.  Through the real CLI on the fake GPUs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.lib.fakenode import ROOT

HEALTHY = "gpus = 4\n"
JOB = {"SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "0"}


@pytest.mark.parametrize("args", [
    ("--node", "--bogus"),
    (),
    ("--node", "--gpus", "abc"),
    ("--node", "--gpus", "9"),
    ("--node", "--gpus", "2,9,12"),
    ("--node", "--level", "huge"),
    ("--prolog", "--act"),
    ("--history", "0"),
    ("--history", "-3"),
    ("--history", "many"),
])
def test_a_usage_mistake_prints_one_line_and_exits_unknown(node, args):
    result = node.run(*args, scenario=HEALTHY)
    assert result.rc == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-healthcheck: "), result.stderr
    assert result.stdout == ""
    assert not (node.state_dir / "pending-drain.json").exists()


def test_a_nonexistent_gpu_index_names_the_gpus_the_node_has(node):
    result = node.run("--node", "--gpus", "9", scenario=HEALTHY)
    assert "--gpus 9" in result.stderr and "4 GPU(s), NVML indices 0-3" in result.stderr


def test_an_existing_gpu_index_still_works(node):
    result = node.run("--node", "--json", "--gpus", "3", scenario=HEALTHY)
    assert result.rc == 0 and [g["index"] for g in result.json["gpus"]] == [3]


def test_history_into_a_closed_pipe_ends_quietly(node):
    for _ in range(3):
        assert node.run("--node", scenario=HEALTHY).rc == 0
    shell = f"{sys.executable} -m healthcheck.cli --history 200 --json | head -1"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], env=node.env(),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout == "[\n" and "Traceback" not in done.stderr and "Error" not in done.stderr
    assert done.returncode == 0, done.stderr


def _broken_module(tmp_path, name: str) -> str:
    """A site where `import name` fails, as on a node where the package was half removed."""
    site = tmp_path / "broken-site"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(
        f"raise ImportError('simulated broken install: {name} is missing')\n")
    return f"{site}:{ROOT}"


@pytest.mark.parametrize("module,scenario", [
    ("pynvml", HEALTHY),
    ("psutil", HEALTHY + "gpu.0.processes = 1:100\n"),
])
def test_a_missing_python_dependency_is_an_internal_error_never_a_drain(node, tmp_path, module, scenario):
    node.scenario.write_text(scenario)
    env = {"PYTHONPATH": _broken_module(tmp_path, module)}
    for mode, rc in (("--prolog", 0), ("--epilog", 0), ("--node", 3)):
        result = node.run(mode, "--json", env={**JOB, **env})
        assert result.rc == rc, result.stderr
        assert "INTERNAL ERROR" in result.stderr and f"{module} is missing" in result.stderr
        assert "reinstall gpu-healthcheck" in result.stderr
        assert "LIBRARY_NOT_FOUND" not in result.stdout + result.stderr
    assert not (node.state_dir / "pending-drain.json").exists()
    result = node.run("--node", "--act", env=env)
    assert result.rc == 3 and "no action taken" in result.stderr


@pytest.mark.parametrize("line", ["nvml_timeout_s = nan", "[probe]\ntimeout_s = inf",
                                  "[probe]\ntimeout_s = 0", "[probe]\nquick_mib = 1000000"])
def test_a_config_value_that_cannot_be_meant_never_reaches_the_checks(node, line):
    """`--node` refuses to run (exit 3, file and key named); the prolog runs with the built-in
    defaults, so a healthy node passes and its job starts."""
    node.write_config(line)
    result = node.run("--node", scenario=HEALTHY)
    key = line.replace("[probe]\n", "probe.").split(" =")[0]
    assert result.rc == 3 and f"{node.config_path}: {key}: " in result.stderr
    # on the built-in defaults gres.conf is found beside $SLURM_CONF (the node's own)
    result = node.run("--prolog", "--json", env={**JOB, "SLURM_CONF": str(node.tmp / "slurm.conf")})
    assert result.rc == 0, result.stdout
    assert result.json["verdict"] == "pass" and result.json["probes"][0]["status"] == "ok"
    assert f"{key}: " in result.stderr


def test_cuda_probe_size_larger_than_this_gpu_tests_half_of_it(node):
    node.write_config("[probe]\nquick_mib = 4096")
    result = node.run("--node", "--json", scenario="gpus = 1\ngpu.0.memory.total_mib = 1024\n")
    assert result.rc == 0, result.stdout
    assert result.json["probes"][0]["detail"].startswith("512 MiB allocated")


def test_the_driver_age_comes_from_the_uptime_under_proc_root(node, tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uptime").write_text("61.25 100.00\n")
    node.write_config(f'proc_root = "{proc}"')
    result = node.run("--node", "--json", scenario=HEALTHY + "gpu.1.persistence_mode = 0\n")
    assert result.json["driver_age_s"] == 61.25
    assert "persistence_mode" not in result.checks()  # inside the default 300 s grace
    (proc / "uptime").write_text("86400.00 100.00\n")
    assert "persistence_mode" in node.run("--node", "--json").checks()
