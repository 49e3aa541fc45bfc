"""A config the tool refuses (issue 36, case 12): not owned by root, or group- or
world-writable (config.unsafe_ownership), through the real CLI in a child process as root
(tests/conftest.py's simulated node).  The built-in defaults stand in for the checks, and no
mode acts on them: no scontrol update (a stub scontrol first on PATH, as the defaults find it,
logs every call), the refusal said on stdout, exit 3 for --node and --check-config, 0 for the
prolog and epilog (Slurm drains nothing for our own config)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

DBE = "gpus = 8\ngpu.0.ecc.volatile.uncorrected = 1\n"  # a drain under any trusted config
STUB = """#!/bin/sh
echo "$@" >> "{calls}"
case "$*" in *show\\ node*) echo "NodeName=gpu-a State=IDLE Partitions=gpu";; esac
exit 0
"""


@pytest.fixture
def refused(node, tmp_path: Path):
    """The node's config says report_only = true, at mode 0666 (refused); scontrol on PATH is
    the stub.  Returns (node, env, the stub's call log)."""
    if os.geteuid() != 0:
        pytest.skip("the refusal applies to a process running as root")
    node.write_config("[drain]\nreport_only = true\n")
    os.chmod(node.config_path, 0o666)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol.calls"
    (bin_dir / "scontrol").write_text(STUB.format(calls=calls))
    (bin_dir / "scontrol").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMD_NODENAME": "gpu-a"}
    return node, env, calls


def _updates(calls: Path):
    return [line for line in (calls.read_text().splitlines() if calls.exists() else []) if "update" in line]


def test_config_refused_node_act_drains_nothing_exits_3_and_says_why_on_stdout(refused) -> None:
    node, env, calls = refused
    result = node.run("--node", "--act", env=env, scenario=DBE)
    assert result.rc == 3, (result.stdout, result.stderr)
    assert "CONFIG REFUSED: " in result.stdout and "world-writable" in result.stdout
    assert "nothing was acted on (no drain, resume, reset, reboot or RMA)" in result.stdout
    assert "chmod 0644, 0640 or 0600" in result.stdout
    assert _updates(calls) == []
    doc = node.run("--node", "--act", "--json", env=env, scenario=DBE)
    assert doc.rc == 3 and json.loads(doc.stdout)["config_refused"].endswith("config.toml: world-writable")
    assert json.loads(doc.stdout)["action"]["taken"] != "drain"
    assert _updates(calls) == []


@pytest.mark.parametrize("mode", ["--prolog", "--epilog"])
def test_config_refused_prolog_and_epilog_exit_0_and_drain_nothing(refused, mode) -> None:
    node, env, calls = refused
    result = node.run(mode, env={**env, "SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1"}, scenario=DBE)
    assert result.rc == 0, (result.stdout, result.stderr)
    assert "refused" in result.stderr and _updates(calls) == []


def test_config_refused_check_config_exits_3(refused) -> None:
    node, env, _ = refused
    result = node.run("--check-config", env=env)
    assert result.rc == 3 and "world-writable" in result.stderr, result.stderr


def test_config_refused_repair_exits_3_and_acts_on_nothing(refused) -> None:
    node, env, calls = refused
    result = node.run("--repair", env=env, scenario=DBE)
    assert result.rc == 3 and "CONFIG REFUSED" in result.stdout, (result.stdout, result.stderr)
    assert _updates(calls) == []


def test_config_refused_ack_stops_before_writing(refused) -> None:
    node, env, _ = refused
    result = node.run("--ack", env=env)
    assert result.rc == 3 and "CONFIG REFUSED" in result.stdout, (result.stdout, result.stderr)


def test_config_refused_control_the_same_node_under_a_trusted_config_drains_through_the_stub(refused) -> None:
    """The stub sees a drain when the config is trusted: the empty call logs above are real."""
    node, env, calls = refused
    node.write_config(f'scontrol = "{calls.parent / "bin" / "scontrol"}"\n[drain]\nmax_fraction = 1.0\n')
    result = node.run("--node", "--act", env=env, scenario=DBE)
    assert result.rc == 2 and "CONFIG REFUSED" not in result.stdout
    assert any("State=DRAIN" in line for line in _updates(calls)), calls.read_text()


def test_config_refused_sets_the_gauge_in_the_last_trusted_textfile(refused, tmp_path: Path) -> None:
    """The refused file's own metrics_file is not trusted: the refusal goes to the textfile the
    last trusted run wrote (named in the metrics state under the default state_dir)."""
    node, env, _ = refused
    textfile = tmp_path / "textfile" / "gpu_healthcheck.prom"
    textfile.parent.mkdir()
    node.write_config(f'state_dir = "/var/lib/gpu-healthcheck"\nmetrics_file = "{textfile}"\n')
    assert node.run("--node", env=env).rc in (0, 1)
    assert "\ngpu_healthcheck_config_refused 0\n" in textfile.read_text()
    os.chmod(node.config_path, 0o666)
    result = node.run("--node", env=env)
    assert result.rc == 3, result.stderr
    text = textfile.read_text()
    assert "# TYPE gpu_healthcheck_config_refused gauge\ngpu_healthcheck_config_refused 1\n" in text
    os.chmod(node.config_path, 0o644)  # trusted again: the gauge falls back to 0
    node.run("--node", env=env)
    assert "\ngpu_healthcheck_config_refused 0\n" in textfile.read_text()
