"""Modes that could not check never claim success (issue 36, case 13), through the real CLI
in a child process: an scontrol stand-in that fails as it does when slurmctld is unreachable
(tests/lib/shownodes.fake_scontrol: "Unable to contact slurm controller", exit 1) makes
--repair, --cluster and --internode-sweep exit 3 and say what to do beyond scontrol's words; and
--job-report outside a job exits 3 instead of calling "the job's GPUs (none)" healthy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.lib.fakenode import ROOT
from tests.lib.shownodes import fake_scontrol

ADVICE = "set SLURM_CONF to the cluster's slurm.conf, or run on a host that has the cluster's slurm.conf"


def unreachable(tmp_path: Path) -> Path:
    scontrol = tmp_path / "scontrol"
    fake_scontrol(scontrol, "", rc=1)
    return scontrol


def test_could_not_check_repair_with_slurmctld_unreachable_exits_3_and_says_what_to_do(node, tmp_path) -> None:
    node.write_config(f'scontrol = "{unreachable(tmp_path)}"\n')
    result = node.run("--repair", scenario="gpus = 8\n")
    assert result.rc == 3, (result.stdout, result.stderr)
    assert "--repair could not run: slurmctld did not answer (" in result.stdout
    assert "Unable to contact slurm controller" in result.stdout and ADVICE in result.stdout
    assert "nothing repaired" in result.stdout
    doc = node.run("--repair", "--json", scenario="gpus = 8\n")
    assert doc.rc == 3 and ADVICE in json.loads(doc.stdout)["repair_error"]


def test_could_not_check_node_act_is_unchanged_by_an_unreachable_slurmctld(node, tmp_path) -> None:
    """--node --act on a healthy node still exits by its verdict: only --repair asked for
    what slurmctld had to answer."""
    node.write_config(f'scontrol = "{unreachable(tmp_path)}"\n')
    assert node.run("--node", "--act", scenario="gpus = 8\n").rc == 0


def _cli(tmp_path: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    config = tmp_path / "config.toml"
    fails = unreachable(tmp_path)  # every Slurm command fails as it does without slurmctld
    config.write_text(f'state_dir = "{tmp_path / "state"}"\njournal = false\nscontrol = "{fails}"\n'
                      f'[internode]\nsbatch = "{fails}"\nsqueue = "{fails}"\nscancel = "{fails}"\nsrun = "{fails}"\n')
    config.chmod(0o644)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPU_HEALTHCHECK"))}
    full.update(GPU_HEALTHCHECK_CONFIG=str(config), PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "healthcheck.cli", *args], env=full, capture_output=True,
                          text=True, timeout=60)


def test_could_not_check_cluster_and_fabric_sweep_say_what_to_do(tmp_path) -> None:
    for args in (["--cluster"], ["--internode-sweep", "--act"]):
        done = _cli(tmp_path, *args)
        assert done.returncode == 3, (args, done.stderr)
        assert "Unable to contact slurm controller" in done.stderr and ADVICE in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_could_not_check_job_report_outside_a_job_exits_3(node) -> None:
    result = node.run("--job-report", env={"GPU_HEALTHCHECK_REPORT": "task-exit"})
    assert result.rc == 3, (result.stdout, result.stderr)
    assert "SLURM_JOB_ID is unset, nothing checked" in result.stdout and "look healthy" not in result.stdout
    inside = node.run("--job-report", env={"GPU_HEALTHCHECK_REPORT": "task-exit", "SLURM_JOB_ID": "7",
                                           "SLURM_JOB_GPUS": "0,1"})
    assert inside.rc == 0 and "look healthy" in inside.stdout, (inside.stdout, inside.stderr)
