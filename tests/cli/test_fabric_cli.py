"""The fabric commands' command line, through the real CLI: options that go with them and
those that do not (before this was checked, `--fabric-sweep` itself died in the option check
with StopIteration), and --fabric-sweep when scontrol cannot be asked (exit 3, nothing drained)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.fakenode import ROOT


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    config = tmp_path / "config.toml"
    nosuch = tmp_path / "nosuch"  # never the host's Slurm: every door points nowhere
    config.write_text(f'state_dir = "{tmp_path / "state"}"\njournal = false\nscontrol = "{nosuch}"\n'
                      f'[fabric]\nsbatch = "{nosuch}"\nsqueue = "{nosuch}"\nscancel = "{nosuch}"\nsrun = "{nosuch}"\n')
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPU_HEALTHCHECK"))}
    full.update(GPU_HEALTHCHECK_CONFIG=str(config), PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-m", "healthcheck.cli", *args], env=full, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args, says", [
    (["--history", "--nodes", "gpu-a"], "--nodes means nothing with --history"),
    (["--node", "--partition", "gpu"], "--partition means nothing with --node"),
    (["--fabric-sweep", "--gpus", "0"], "--gpus means nothing with --fabric-sweep"),
])
def test_fabric_options_that_mean_nothing_exit_3(tmp_path: Path, args, says) -> None:
    done = cli(tmp_path, *args)
    assert done.returncode == 3 and says in done.stderr, done.stderr


def test_fabric_sweep_without_scontrol_is_a_clear_error(tmp_path: Path) -> None:
    done = cli(tmp_path, "--fabric-sweep", "--act")
    assert done.returncode == 3 and f"{tmp_path / 'nosuch'} not found; nothing drained" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
