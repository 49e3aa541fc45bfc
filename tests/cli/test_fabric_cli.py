"""The multi-node commands' command line, through the real CLI: options that go with them and
those that do not (before this was checked, the sweep itself died in the option check with
StopIteration), --internode-sweep when scontrol cannot be asked (exit 3, nothing drained), and
the old names (`--fabric-sweep`, the config's `[fabric]`): the same run, with a note on stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.lib.fakenode import ROOT


def cli(tmp_path: Path, *args: str, section: str = "internode", **env: str) -> subprocess.CompletedProcess:
    config = tmp_path / "config.toml"
    nosuch = tmp_path / "nosuch"  # never the host's Slurm: every door points nowhere
    config.write_text(f'state_dir = "{tmp_path / "state"}"\njournal = false\nscontrol = "{nosuch}"\n'
                      f'[{section}]\nsbatch = "{nosuch}"\nsqueue = "{nosuch}"\nscancel = "{nosuch}"\nsrun = "{nosuch}"\n')
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPU_HEALTHCHECK"))}
    full.update(GPU_HEALTHCHECK_CONFIG=str(config), PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-m", "healthcheck.cli", *args], env=full, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args, says", [
    (["--history", "--nodes", "gpu-a"], "--nodes means nothing with --history"),
    (["--node", "--partition", "gpu"], "--partition means nothing with --node"),
    (["--internode-sweep", "--gpus", "0"], "--gpus means nothing with --internode-sweep"),
    (["--fabric-sweep", "--gpus", "0"], "--gpus means nothing with --internode-sweep"),
    (["--fabric-sweep", "--internode-sweep"], "not allowed with"),
])
def test_fabric_options_that_mean_nothing_exit_3(tmp_path: Path, args, says) -> None:
    done = cli(tmp_path, *args)
    assert done.returncode == 3 and says in done.stderr, done.stderr


def test_fabric_sweep_without_scontrol_is_a_clear_error(tmp_path: Path) -> None:
    done = cli(tmp_path, "--internode-sweep", "--act")
    assert done.returncode == 3 and f"{tmp_path / 'nosuch'} not found; nothing drained" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


OLD_FLAG_NOTE = "gpu-healthcheck: --fabric-sweep is deprecated, use --internode-sweep (the same command)"


def _old_section_notes(config: Path, keys) -> List[str]:
    return [f"gpu-healthcheck: config warning: {config}: fabric.{k} is deprecated, read as internode.{k}: "
            f"rename it (docs/configuration.md#old-names)" for k in keys]


@pytest.mark.parametrize("flag, section", [("--internode-sweep", "internode"), ("--fabric-sweep", "fabric")])
def test_fabric_sweep_sigterm_cancels_its_jobs_and_drains_nothing(tmp_path: Path, flag: str, section: str) -> None:
    """The idle-sweep timer's deadline (or systemd stopping it) sends SIGTERM: the sweep
    scancels the jobs it submitted, drains nothing and exits 3, saying why.  The old flag and
    the old section run the same sweep, each saying on stderr (only) what it is now called."""
    import signal

    from tests.lib.slurmcluster import _wait_until

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = bin_dir / "calls.log"
    stand_ins = {
        "scontrol": 'for n in gpu-a gpu-b; do echo "NodeName=$n Arch=x86_64 Gres=gpu:8 State=IDLE Partitions=gpu"; done',
        "squeue": 'case "$*" in *" -j "*) echo "101|RUNNING";; esac',  # the pair job runs on and on
        "sbatch": f'touch "{bin_dir}/submitted"; echo 101',
        "scancel": "exit 0",
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n{body}\n')
        (bin_dir / name).chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\njournal = false\nscontrol = "{bin_dir / "scontrol"}"\n'
                      f'[drain]\nmax_fraction = 1.0\n'
                      f'[{section}]\nsbatch = "{bin_dir / "sbatch"}"\nsqueue = "{bin_dir / "squeue"}"\n'
                      f'scancel = "{bin_dir / "scancel"}"\ntime_limit_s = 600\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPU_HEALTHCHECK"))}
    env.update(GPU_HEALTHCHECK_CONFIG=str(config), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", flag, "--act"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_until(lambda: (bin_dir / "submitted").exists() and "squeue -h -t all -j 101" in log.read_text(),
                    60, what="the pair job submitted and followed")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, out + err
    assert "stopped by SIGTERM; nothing drained" in err and "Traceback" not in err, err
    calls = log.read_text().splitlines()
    assert "scancel 101" in calls
    assert not [c for c in calls if c.startswith("scontrol update")]
    notes = [OLD_FLAG_NOTE] + _old_section_notes(config, ("sbatch", "squeue", "scancel", "time_limit_s"))
    said = [line for line in err.splitlines() if "deprecated" in line]
    assert said == (notes if flag == "--fabric-sweep" else []), err
    assert "deprecated" not in out


@pytest.mark.parametrize("args", [["--act"], ["--act", "--json"], ["--json", "--nodes", "gpu-[a-b]"]])
def test_the_old_flag_and_section_run_the_same_sweep_as_the_new(tmp_path: Path, args: List[str]) -> None:
    """`--fabric-sweep` with `[fabric]` keys: the same exit, stdout and stderr as
    `--internode-sweep` with `[internode]`, but for one line on stderr per old name."""
    new = cli(tmp_path, "--internode-sweep", *args)
    old = cli(tmp_path, "--fabric-sweep", *args, section="fabric")
    notes = [OLD_FLAG_NOTE] + _old_section_notes(tmp_path / "config.toml", ("sbatch", "squeue", "scancel", "srun"))
    assert (old.returncode, old.stdout) == (new.returncode, new.stdout) and new.returncode == 3
    assert old.stderr.splitlines() == notes + new.stderr.splitlines(), old.stderr
    assert "deprecated" not in new.stderr + new.stdout + old.stdout


def test_the_old_names_are_in_help_and_check_config_as_deprecated(tmp_path: Path) -> None:
    helped = cli(tmp_path, "--help")
    assert helped.returncode == 0 and "--internode-sweep" in helped.stdout
    assert re.search(r"--fabric-sweep\s+deprecated: the old name of --internode-sweep", helped.stdout), helped.stdout
    checked = cli(tmp_path, "--check-config", "--json", section="fabric")
    doc = json.loads(checked.stdout)
    assert checked.returncode == 0 and doc["valid"], checked.stdout
    notes = _old_section_notes(tmp_path / "config.toml", ("sbatch", "squeue", "scancel", "srun"))
    assert [w for w in doc["warnings"] if "deprecated" in w] == [n.split("config warning: ", 1)[1] for n in notes]
    assert doc["values"]["internode.srun"] == {"value": str(tmp_path / "nosuch"), "source": str(tmp_path / "config.toml")}
    both = tmp_path / "both.toml"
    both.write_text("[fabric]\npartners = 3\n[internode]\npartners = 2\n")
    refused = cli(tmp_path, "--check-config", "--config", str(both))
    assert refused.returncode == 3
    assert f"{both}: internode: set twice, here and as fabric (one is the old name of the other)" in refused.stderr
