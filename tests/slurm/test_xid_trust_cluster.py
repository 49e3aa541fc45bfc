"""Issue 22, items 1 and 11, on the real Slurm cluster (munge, slurmctld, slurmd, the real
scontrol): an admin's resume of our drain deals with the Xids logged while the node was
drained, never with those logged after it; a run killed right after its drain keeps the note
that makes the drain ours."""

from __future__ import annotations

import json
import shutil
from typing import Dict

import pytest

from tests.lib.gpucluster import HEALTHY, GpuCluster, pci, require_slurm, serial


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("xidtrust"), fakegpu, nodes=["gpu-a", "gpu-b"])
    with c.cluster:
        yield c


@pytest.fixture
def c(cluster):
    cluster.scenario("gpu-a").write_text(HEALTHY)
    cluster.write_config("gpu-a")
    shutil.rmtree(cluster.state("gpu-a"), ignore_errors=True)
    (cluster.wd / "kern" / "gpu-a.log").write_text("")
    if cluster.drained("gpu-a"):
        cluster.cluster.resume("gpu-a")
    cluster.cluster.wait_node("gpu-a", lambda info: "DRAIN" not in info.get("State", ""), 30)
    return cluster


def _xid(stamp: float, xid: int = 119) -> str:
    return (f"[{stamp:12.6f}] NVRM: Xid (PCI:0000:18:00): {xid}, pid=4242, name=python, "
            f"Timeout after 6s of waiting for RPC response from GPU0 GSP!\n")


def _node_act(c: GpuCluster) -> Dict:
    result = c.check("gpu-a", "--node", "--act", "--json")
    return json.loads(result.stdout)


@pytest.mark.slurm
def test_xid_logged_after_the_admins_resume_drains_again(c):
    """Item 1: an Xid 119 drain; the admin resets the GPU and resumes the node; GPU 0 then logs
    a new Xid 119 (a GSP timeout, which NVML does not see) before the next HealthCheckProgram
    run.  Before, that run acknowledged every Xid up to the log's end, the new one too, and
    every later run passed for the rest of the boot."""
    kern = c.wd / "kern" / "gpu-a.log"
    kern.write_text(_xid(1234.5))
    assert _node_act(c)["action"]["taken"] == "drain"
    assert c.reason("gpu-a").startswith(f"gpu-healthcheck: gpu0 pci={pci(0)} sn={serial(0)} xid=119")
    with kern.open("a") as log:
        log.write(_xid(1300.0))  # still failing while drained
    assert _node_act(c)["action"]["taken"] == "none" and c.drained("gpu-a")
    c.cluster.resume("gpu-a")  # the admin reset the GPU and resumes the node ...
    with kern.open("a") as log:
        log.write(_xid(2000.0))  # ... and the GSP times out again before the next run
    doc = _node_act(c)
    assert doc["action"]["taken"] == "drain", doc
    [finding] = [f for f in doc["findings"] if f["check"] == "xid"]
    # the new line alone: the two logged while drained were dealt with by the resume
    assert finding["severity"] == "fail" and finding["value"] == 119 and " times)" not in finding["message"]
    assert c.reason("gpu-a").startswith(f"gpu-healthcheck: gpu0 pci={pci(0)} sn={serial(0)} xid=119")


@pytest.mark.slurm
def test_xid_drain_killed_before_its_note_is_still_ours_and_the_admins_resume_holds(c):
    """Item 11: SIGKILL between the drain and the note (a wrapper around the real scontrol
    kills the run as soon as slurmctld took the drain).  Before, the note was written after the
    drain and was lost: the admin's resume then acknowledged nothing and the next run drained
    the node again for the same old Xid."""
    kern = c.wd / "kern" / "gpu-a.log"
    kern.write_text(_xid(1234.5))
    killer = c.wd / "bin" / "scontrol-kill-after-drain"
    killer.write_text(f'#!/bin/sh\n"{c.scontrol}" "$@"\nrc=$?\n'
                      f'case "$*" in *State=DRAIN*) kill -9 $PPID ;; esac\nexit $rc\n')
    killer.chmod(0o755)
    c.write_config("gpu-a", scontrol=str(killer))
    killed = c.check("gpu-a", "--node", "--act", "--json")
    assert killed.returncode == -9, (killed.returncode, killed.stderr)
    assert c.reason("gpu-a").startswith(f"gpu-healthcheck: gpu0 pci={pci(0)} sn={serial(0)} xid=119")
    c.write_config("gpu-a")
    c.cluster.resume("gpu-a")  # the admin reset the GPU and resumes the node
    for _ in range(2):
        doc = _node_act(c)
        assert doc["verdict"] == "pass" and doc["action"]["taken"] == "none", doc
        assert not c.drained("gpu-a")
