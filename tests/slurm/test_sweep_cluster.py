"""deploy/slurm/gpu-healthcheck-sweep, the shipped script itself, against the real test cluster:
a hidden root-only partition over the nodes as deploy/slurm/slurm.conf.example documents it,
fake GPUs where gpu-a has a stuck HBM bit on GPU 5 (a deep-level fault the quick level never
sees) and gpu-b is healthy, and gpu-c busy with a user's job.  The sweep submits one job per
idle node, the deep level drains gpu-a through the normal path naming GPU 5, gpu-b stays idle,
gpu-c is never swept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib.fakenode import ROOT
from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.slurmcluster import _wait_until

pytestmark = pytest.mark.slurm

SCRIPT = ROOT / "deploy" / "slurm" / "gpu-healthcheck-sweep"
# deploy/slurm/slurm.conf.example's line, over this cluster's nodes
PARTITION = ("PartitionName=gpu-healthcheck-sweep Nodes=ALL Hidden=YES RootOnly=YES PriorityTier=0 "
             "MaxTime=30 OverSubscribe=EXCLUSIVE State=UP")
# small fake boards and bandwidth buffers (tests/cli/test_deep_level.py): the fake runs the
# deep kernels on the host
DEEP = "gpus = 8\ngpu.*.memory.total_mib = 24\n"
DEEP_CONFIG = "[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


def sweep(c: GpuCluster, exe: Path, *args: str) -> subprocess.CompletedProcess:
    # the script runs commands/idlesweep.py of this checkout's package
    return subprocess.run([sys.executable, str(SCRIPT), "--exec", str(exe), *args],
                          env=dict(c.cluster.env, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=120)


def sweep_jobs(c: GpuCluster) -> dict:
    """{node: state} of every gpu-healthcheck-sweep job slurmctld knows (hidden ones too)."""
    r = c.cluster.run(["squeue", "--all", "-h", "-t", "all", "-n", "gpu-healthcheck-sweep", "-o", "%n %T"])
    assert r.returncode == 0, r.stderr
    return dict(line.split() for line in r.stdout.splitlines() if line.strip())


def test_sweep_drains_the_node_with_a_deep_fault_and_leaves_the_rest(tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    c = GpuCluster(tmp_path, fakegpu)
    c.cluster.extra_conf.append(PARTITION)
    for node in c.nodes:
        c.scenario(node).write_text(DEEP + ("gpu.5.mem.stuck_bits = 0x200043:3\n" if node == "gpu-a" else ""))
        config = c.wd / "config" / f"{node}.toml"
        config.write_text(config.read_text() + DEEP_CONFIG)
    with c.cluster:
        go = tmp_path / "go"
        busy = c.cluster.sbatch(["-w", "gpu-c", "--gres=gpu:1"],
                                f"echo started\nwhile [ ! -e {go} ]; do sleep 0.1; done\n")
        c.wait_running(busy, timeout=120)
        # the sweep jobs' gpu-healthcheck waits for `held` to go: a sweep while they run
        held = tmp_path / "held"
        exe = tmp_path / "held-gpu-healthcheck"
        exe.write_text(f'#!/bin/sh\nwhile [ ! -e {held} ]; do sleep 0.1; done\nexec "{c.exec_wrapper}" "$@"\n')
        exe.chmod(0o755)
        r = sweep(c, exe, "--dry-run")
        assert r.returncode == 0, r.stderr
        assert [line.split(" -w ")[1].split()[0] for line in r.stdout.splitlines()] == ["gpu-a", "gpu-b"]
        r = sweep(c, exe)
        assert r.returncode == 0, r.stderr
        assert [line.split(":")[0] for line in r.stdout.splitlines()] == ["gpu-a", "gpu-b"], r.stdout
        _wait_until(lambda: sweep_jobs(c) == {"gpu-a": "RUNNING", "gpu-b": "RUNNING"}, 120,
                    what="one running sweep job per idle node")
        # the script's own query sees the jobs of the hidden partition (run as root), and a
        # second sweep while they run submits nothing more
        seen = c.cluster.run(["squeue", "-h", "-n", "gpu-healthcheck-sweep", "-o", "%n"])
        assert sorted(seen.stdout.split()) == ["gpu-a", "gpu-b"], (seen.stdout, seen.stderr)
        again = sweep(c, exe)
        assert again.returncode == 0 and "gpu-a:" not in again.stdout and "gpu-b:" not in again.stdout, again.stdout
        held.write_text("")
        _wait_until(lambda: set(sweep_jobs(c).values()) <= {"COMPLETED", "FAILED"}, 600,
                    what="both sweep jobs ended")
        reason = c.wait_reason("gpu-a", timeout=60)
        assert reason.startswith("gpu-healthcheck: gpu5 "), reason
        assert "deep.memory=" in reason and "rma" in reason, reason
        assert c.drained("gpu-a")
        info = c.cluster.node_info("gpu-b")
        assert info["State"] == "IDLE" and not c.reason("gpu-b"), info
        assert not c.drained("gpu-c") and "gpu-c" not in sweep_jobs(c)
        go.write_text("")
        c.cluster.wait_job(busy, timeout=120)


def test_sweep_fabric_first_drains_the_slow_node_then_deep_jobs_go_to_the_rest(tmp_path: Path, fakegpu: Path) -> None:
    """The timer's run with --internode on 4 nodes where gpu-c's path is slow (the fake
    nccl-tests, tests/fakegpu/fabric.py): the internode sweep's exclusive jobs run in the hidden
    partition and drain gpu-c, and only then are deep jobs submitted, to gpu-a, gpu-b and gpu-d."""
    require_slurm()
    nodes = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    c = GpuCluster(tmp_path, fakegpu, nodes=nodes, scripts=False, weights={})
    c.cluster.extra_conf.append(PARTITION)
    (tmp_path / "fabric.scenario").write_text("node.gpu-c.busbw_gbps = 41.2\n")
    (tmp_path / "sweep.toml").write_text(
        f'state_dir = "{tmp_path / "sweep-state"}"\nscontrol = "{c.scontrol}"\njournal = false\n'
        f'[drain]\nmax_fraction = 0.5\n'
        # time_limit_s 30, as test_fabric_sweep_cluster.py: on a loaded machine 15 cut healthy runs short
        f'[internode]\nbusbw_floor_gbps = 100.0\ntasks_per_node = 2\ntime_limit_s = 30\n'
        f'collective_args = ["-b", "256M", "-e", "1G", "-f", "2", "-g", "1"]\n')
    # --exec: the checkout's CLI for the internode sweep on this host; on the nodes the deep jobs'
    # gpu-healthcheck only says it ran (the deep level itself is the first test's)
    exe = tmp_path / "exec-gpu-healthcheck"
    exe.write_text(f'#!/bin/sh\ncase "$1" in\n  --internode-sweep) exec "{sys.executable}" -m healthcheck.cli "$@";;\n'
                   f'  *) echo "deep $*";;\nesac\n')
    exe.chmod(0o755)
    env = dict(c.cluster.env, FAKEGPU_FABRIC=str(tmp_path / "fabric.scenario"),
               PATH=f"{c.fake}:{c.cluster.env['PATH']}", GPU_HEALTHCHECK_CONFIG=str(tmp_path / "sweep.toml"),
               PYTHONPATH=str(ROOT))  # the Debian 13 root's venv has no install of this checkout
    with c.cluster:
        done = subprocess.run([sys.executable, str(SCRIPT), "--exec", str(exe), "--internode", "--internode-timeout", "300"],
                              env=env, capture_output=True, text=True, timeout=400, cwd=str(tmp_path))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "gpu-healthcheck-sweep: internode sweep: exit 2: bad node(s) found, drained" in done.stdout, done.stdout
        reason = c.reason("gpu-c")
        assert reason.startswith("gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-"), reason
        # the internode sweep's table came before the deep submissions, which left gpu-c out
        lines = done.stdout.splitlines()
        submitted = [line.split(":")[0] for line in lines if line.endswith(tuple("0123456789")) and ": " in line
                     and line.split(":")[0] in nodes]
        assert submitted == ["gpu-a", "gpu-b", "gpu-d"], done.stdout
        assert lines.index(next(line for line in lines if line.startswith("gpu-c "))) < \
            lines.index(next(line for line in lines if line.startswith("gpu-a: ")))
        _wait_until(lambda: set(sweep_jobs(c)) == {"gpu-a", "gpu-b", "gpu-d"}, 60, what="the three deep jobs")
        assert [n for n in nodes if c.drained(n)] == ["gpu-c"]
