"""A GPU lost before any run of ours saw it, on the real test Slurm: GPU 3 of 8 fell off the bus
(Xid 79) before known-gpus.json recorded it, and the boots never bring it back.  Its reboots are
counted in one ledger, so it is rebooted exactly repair.max_attempts times; the RMA names it by
what the node still knows (the PCI address the driver logged in the Xid 79 line, the gres
layout's /dev/nvidia3 that no present GPU has), and the evidence says how it was named."""

from __future__ import annotations

import json

import pytest

from tests.lib.gpucluster import GpuCluster, pci, require_slurm, serial
from tests.lib.repair import enable_repair

pytestmark = pytest.mark.slurm

XID79 = "NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


@pytest.fixture
def reboot_cluster(tmp_path, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path, fakegpu, reboot_timeout_s=300)
    for node in c.nodes:
        enable_repair(c, node)
    config = c.wd / "config" / "gpu-a.toml"
    config.write_text("expected_gpus = 8\n" + config.read_text())
    with c.cluster:
        yield c


def reboot_requests(c: GpuCluster, node: str) -> int:
    log = (c.cluster.log_dir / "slurmctld.log").read_text()
    return sum(1 for line in log.splitlines() if line.endswith(f"reboot request queued for nodes {node}"))


def boot(c: GpuCluster, node: str, before: str) -> str:
    """Wait for slurmctld to register the node's boot; its new BootTime."""
    info = c.cluster.wait_node(node, lambda i: "REBOOT" not in i.get("State", "")
                               and i.get("BootTime", "") > before, 120)
    return info["BootTime"]


def seven_without_gpu3(c: GpuCluster, node: str) -> str:
    """After a boot without GPU 3: NVML lists seven GPUs, the old 4-7 as NVML's 3-6, each with
    its own address, serial and device file."""
    lines = [f"gpus = 7\ngpu.*.fabric.state = not_supported\ngpu.*.memory.total_mib = 1024\n"
             f"kernel_log = {c.wd / 'kern' / f'{node}.log'}\n"]
    for now in range(3, 7):
        lines.append(f"gpu.{now}.pci_bus_id = {pci(now + 1)}\ngpu.{now}.serial = {serial(now + 1)}\n"
                     f"gpu.{now}.uuid = GPU-fa4e0000-0000-4000-8000-{now + 1:012x}\n"
                     f"gpu.{now}.minor_number = {now + 1}\n")
    return "".join(lines)


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
