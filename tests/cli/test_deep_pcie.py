"""The deep level's host<->device copies: bound to the GPU's NUMA node (sysfs numa_node and the
node's cpulist, under sysfs_root), one GPU at a time (a lock file every GPU's child takes in
turn), on the fake GPUs through the real CLI and the gate itself across forked children."""

from __future__ import annotations

import json
import os
from pathlib import Path

from healthcheck.model import GpuSnapshot
from healthcheck.read.deeplinks import host_gates

CONFIG = "[probe]\nfull_fraction = 0.35\n[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


def bus(i: int) -> str:
    return f"0000:{0x18 + i * 0x10:02x}:00.0"


def numa_sysfs(root: Path, nodes: dict, cpus: dict) -> None:
    for gpu, node in nodes.items():
        d = root / "bus" / "pci" / "devices" / bus(gpu)
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text(f"{node}\n")
    for node, text in cpus.items():
        d = root / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(text + "\n")


def test_host_gates_read_numa_node_and_its_cpus(tmp_path):
    numa_sysfs(tmp_path, {0: 0, 1: 1, 2: -1}, {0: "0-1,4", 1: "2-3"})
    gpus = [GpuSnapshot(i, pci_bus_id=f"00000000:{0x18 + i * 0x10:02X}:00.0") for i in range(4)]
    gates = host_gates(gpus, str(tmp_path), str(tmp_path / "lock"))
    assert [(g.pci, g.numa_node, g.cpus) for g in gates] == [
        (bus(0), 0, (0, 1, 4)), (bus(1), 1, (2, 3)), (bus(2), None, ()), (bus(3), None, ())]
    assert {g.lock for g in gates} == {str(tmp_path / "lock")}


def test_deep_host_copies_run_bound_to_the_gpus_numa_node(node):
    usable = sorted(os.sched_getaffinity(0))
    numa_sysfs(node.sysfs, {0: 0, 1: 1}, {0: str(usable[0]), 1: str(usable[-1])})
    node.write_config(CONFIG)
    result = node.run("--node", "--level", "deep", "--json",
                      scenario="gpus = 3\ngpu.*.memory.total_mib = 24\n", timeout=300)
    rows = {r["gpu"]: r for r in result.json["deep"]["gpus"]}
    assert [rows[g]["host_numa_node"] for g in range(3)] == [0, 1, None]
    assert all(round(rows[g]["h2d_gbps"]) == 50 for g in range(3))


CHILD = """
import json, sys
from healthcheck.read.cudaprobe import ProbeTarget
from healthcheck.read.deep import DeepPlan, run_deep
from healthcheck.read.deeplinks import HostGate
ts = [ProbeTarget(i, 'GPU-fa4e0000-0000-4000-8000-%012x' % i) for i in range(2)]
gates = tuple(HostGate('0000:%02x:00.0' % (0x18 + i * 0x10), sys.argv[1]) for i in range(2))
run = run_deep(ts, [], DeepPlan(bandwidth_mib=2, host_mib=2, host_gates=gates, duration_s=0.2), float(sys.argv[2]))
print(json.dumps([[g.index, g.status, g.h2d_gbps] for g in run.gpus]))
"""


def test_host_copies_wait_for_the_gate_and_run_once_it_is_free(fakegpu, tmp_path):
    # the test holds the copies' lock: both GPUs' children wait at their host copies, and are
    # killed at the deadline (the memory test and HBM bandwidth before them ran); once it is
    # free, the same run passes
    import fcntl
    import subprocess
    import sys

    scenario = tmp_path / "scenario"
    scenario.write_text("gpus = 2\ngpu.*.memory.total_mib = 32\n")
    env = {**os.environ, "LD_LIBRARY_PATH": str(fakegpu), "FAKEGPU_SCENARIO": str(scenario),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    lock = tmp_path / "host-copies.lock"

    def run(timeout_s: float):
        done = subprocess.run([sys.executable, "-c", CHILD, str(lock), str(timeout_s)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert [(g, status) for g, status, _ in run(3.0)] == [(0, "timeout"), (1, "timeout")]
    assert [(g, status, round(h2d)) for g, status, h2d in run(120.0)] == [(0, "ok", 50), (1, "ok", 50)]
