"""`gpu-healthcheck --cluster` shows each node's repair state from what the real slurmctld
says: a node whose Comment holds a repair claim (resetting), an rma node, a drained node a job
still runs on (waiting_for_idle) and, once that job ends, the same node waiting for the repair
budget the claim holds."""

from __future__ import annotations

import json

import pytest

from healthcheck.decide.repair import mark_text, rma_finding
from healthcheck.decide.verdict import drain_reason
from healthcheck.model import GpuSnapshot, Mode
from tests.lib.gpucluster import GpuCluster, pci, require_slurm, serial

pytestmark = pytest.mark.slurm

WAIT_FOR_GO = "echo started\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"


def our_reason(gpu: int = 2) -> str:
    return f"gpu-healthcheck: gpu{gpu} pci={pci(gpu)} sn={serial(gpu)} ecc.volatile_uncorrected=1 epilog job=7"


def cluster_view(c: GpuCluster) -> dict:
    done = c.check("gpu-a", "--cluster", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {row["node"]: row for row in json.loads(done.stdout)}


def test_cluster_shows_resetting_rma_waiting_for_idle_and_waiting_for_budget(tmp_path, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path, fakegpu)
    with c.cluster:
        # gpu-a: drained by us, its repair claimed (what act.repair writes before a reset)
        c.cluster.drain("gpu-a", our_reason())
        c.cluster.run(["scontrol", "update", "NodeName=gpu-a",
                       "Comment=" + mark_text("resetting", [2], "2027-01-15T08:00:00Z")], check=True)
        # gpu-b: marked rma, with the reason the repair loop writes
        gpus = [GpuSnapshot(index=i, serial=serial(i), pci_bus_id=pci(i)) for i in range(8)]
        rma = drain_reason([rma_finding(2, 2, None)], gpus, Mode.NODE, None)
        assert rma is not None
        c.cluster.drain("gpu-b", rma)
        # gpu-c: drained by us while a job still runs on it
        go = tmp_path / "go"
        job = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-c"], WAIT_FOR_GO.format(go=go))
        c.wait_running(job)
        c.cluster.drain("gpu-c", our_reason(5))

        view = cluster_view(c)
        assert {n: view[n]["repair"] for n in ("gpu-a", "gpu-b", "gpu-c")} == {
            "gpu-a": "resetting", "gpu-b": "rma", "gpu-c": "waiting_for_idle"}, view
        assert view["gpu-b"]["raw_reason"] == rma and view["gpu-a"]["check"] == "ecc.volatile_uncorrected"

        # the job ends: gpu-c is idle, and waits for the budget gpu-a's claim holds (max 1)
        go.touch()
        c.cluster.wait_job(job, timeout=60)
        c.cluster.wait_node("gpu-c", lambda info: "IDLE" in info.get("State", "")
                            and "COMPLETING" not in info.get("State", ""), timeout=60)
        assert cluster_view(c)["gpu-c"]["repair"] == "waiting_for_budget"

        # the table has the column, with the same words
        table = c.check("gpu-a", "--cluster").stdout.splitlines()
        header = table[0].split()
        assert header[-1] == "REPAIR", table
        last = {line.split()[0]: line.split()[-1] for line in table[1:4]}
        assert last == {"gpu-a": "resetting", "gpu-b": "rma", "gpu-c": "waiting_for_budget"}, table
