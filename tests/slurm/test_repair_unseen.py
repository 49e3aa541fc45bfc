"""A GPU lost before any run of ours saw it, on the real test Slurm: GPU 3 of 8 fell off the bus
(Xid 79) before known-gpus.json recorded it, and the boots never bring it back.  Its reboots are
counted in one ledger, so it is rebooted exactly repair.max_attempts times; the RMA names it by
what the node still knows (the PCI address the driver logged in the Xid 79 line, the gres
layout's /dev/nvidia3 that no present GPU has), and the evidence says how it was named."""

from __future__ import annotations

import json

import pytest

from tests.lib.gpucluster import GpuCluster, pci
# the reboot cluster (expected_gpus = 8 on gpu-a), the boot and its count, as the test of a GPU
# an earlier run had listed has them
from tests.slurm.test_repair_blame import XID79, boot, reboot_cluster, reboot_requests, seven_without_gpu3  # noqa: F401

pytestmark = pytest.mark.slurm


def story(c: GpuCluster, node: str) -> str:
    """What the runs did, for a failing assertion: each ledger and the repair's steps."""
    from tests.lib.repair import repair_events

    ledgers = {p.name: [(a["action"], a["trigger"], a["outcome"]) for a in json.loads(p.read_text())["attempts"]]
               for p in sorted((c.state(node) / "repair").glob("*.json"))}
    return f"ledgers {ledgers}; steps {[e['message'][:160] for e in repair_events(c, node)]}"


def test_a_gpu_lost_before_any_run_saw_it_is_rebooted_max_attempts_times_and_named_by_what_the_node_knows(reboot_cluster):
    c = reboot_cluster
    assert not (c.state("gpu-a") / "known-gpus.json").exists()  # no run has listed its GPUs
    c.after_boot("gpu-a").write_text(seven_without_gpu3(c, "gpu-a"))  # GPU 3 never comes back
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("gpu.3.lost = 1\n")
    with (c.wd / "kern" / "gpu-a.log").open("a") as log:
        log.write(XID79)
    boot_time = c.cluster.node_info("gpu-a")["BootTime"]
    runs = []
    for _ in range(8):  # drain and reboot, validate after each boot, until rma (bounded)
        done = c.check("gpu-a", "--node", "--act")
        runs.append((done.returncode, c.reason("gpu-a"), done.stderr[-2000:]))
        if "rma" in c.reason("gpu-a").split():
            break
        if "REBOOT" in c.cluster.node_info("gpu-a").get("State", ""):
            boot_time = boot(c, "gpu-a", boot_time)
    reason = c.reason("gpu-a")
    assert reboot_requests(c, "gpu-a") == 2, story(c, "gpu-a")  # repair.max_attempts = 2, exactly
    assert reason.startswith(f"gpu-healthcheck: pci={pci(3)} repair.attempts=2 rma"), (reason, story(c, "gpu-a"))
    # one ledger for the one GPU, keyed by the address the driver logged
    assert sorted(p.name for p in (c.state("gpu-a") / "repair").iterdir()) == ["~index3@0000-48-00.0.json"], story(c, "gpu-a")
    ledger = json.loads((c.state("gpu-a") / "repair" / "~index3@0000-48-00.0.json").read_text())
    assert [a["action"] for a in ledger["attempts"]] == ["reboot", "reboot"], ledger
    # the evidence says how the GPU was named
    [named] = [p for p in (c.state("gpu-a") / "evidence").iterdir() if p.name.endswith("-named.json")]
    why = json.loads(named.read_text())
    assert why["pci"] == pci(3) and why["device"].endswith("/gpu-a/nvidia3"), why  # gres.conf's File=
    assert any("Xid 79" in s for s in why["named_by"]) and any("gres.conf" in s for s in why["named_by"]), why
