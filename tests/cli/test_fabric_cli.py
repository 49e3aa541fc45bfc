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


def test_fabric_sweep_sigterm_cancels_its_jobs_and_drains_nothing(tmp_path: Path) -> None:
    """The idle-sweep timer's deadline (or systemd stopping it) sends SIGTERM: the sweep
    scancels the jobs it submitted, drains nothing and exits 3, saying why."""
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
                      f'[fabric]\nsbatch = "{bin_dir / "sbatch"}"\nsqueue = "{bin_dir / "squeue"}"\n'
                      f'scancel = "{bin_dir / "scancel"}"\ntime_limit_s = 600\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPU_HEALTHCHECK"))}
    env.update(GPU_HEALTHCHECK_CONFIG=str(config), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--fabric-sweep", "--act"], env=env,
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
