"""The repair loop blames the right GPU, on the real test Slurm: a GPU gone from the bus for
good is named (serial, PCI address) by the drain, the ledger and the RMA, is rebooted at most
repair.max_attempts times, and healthy GPU 0 is never marked; RMA names the GPU whose fault
recurs after its repair, never one that came back clean because it was repaired more often;
a reset that never ran (no nvidia-smi at its path, nv-hostengine holding the GPU) is "repair
blocked", shown in --cluster and the metrics and naming the holder, and never an attempt."""

from __future__ import annotations

import json
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.lib.gpucluster import GpuCluster, pci, require_slurm, serial
from tests.lib.repair import drain_by_epilog, enable_repair, ledger_file, ledger_outcomes, repair_events

pytestmark = pytest.mark.slurm

XID79 = "NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def uuid(index: int) -> str:
    return f"GPU-fa4e0000-0000-4000-8000-{index:012x}"


def test_repair_rma_names_gpu5_whose_dbe_recurs_not_gpu2_repaired_before_that_came_back_clean(repair_cluster, tmp_path):
    c = repair_cluster
    drain_by_epilog(c, tmp_path)  # GPU 2's DBE: drained, reset, proved healthy, resumed
    assert c.check("gpu-a", "--node", "--act").returncode == 0
    assert ledger_outcomes(c, "gpu-a", 2) == ["resumed"]
    c.cluster.wait_node("gpu-a", lambda i: "NOT_RESPONDING" not in i.get("State", ""), 30)
    with c.scenario("gpu-a").open("a") as scenario:  # both DBE; only GPU 5's comes back
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\ngpu.5.ecc.volatile.uncorrected = 1\n"
                       "gpu.5.fault.recurs = 1\n")
    assert c.check("gpu-a", "--node", "--act").returncode == 2  # drains, resets 2 and 5
    reason = c.reason("gpu-a")
    # GPU 2 has 2 repairs in the window now, GPU 5 one: GPU 2 passed its check, GPU 5 did not
    assert reason.startswith(f"gpu-healthcheck: gpu5 pci={pci(5)} sn={serial(5)} ecc.volatile_uncorrected=1 node"), reason
    assert "rma" not in reason.split()
    assert ledger_outcomes(c, "gpu-a", 2) == ["resumed", "passed"]
    assert ledger_outcomes(c, "gpu-a", 5) == ["still_failing: ecc.volatile_uncorrected"]
    assert c.check("gpu-a", "--repair").returncode == 2  # GPU 5 alone, its second repair
    reason = c.reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: gpu5 pci={pci(5)} sn={serial(5)} repair.attempts=2 rma"), reason
    assert ledger_outcomes(c, "gpu-a", 2) == ["resumed", "passed"]  # not reset again
    [rma] = [e for e in repair_events(c, "gpu-a") if "marked rma" in e["message"]]
    assert f"gpu5 pci={pci(5)}" in rma["message"] and "gpu2" not in rma["message"]


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
    """The scenario after a boot that did not bring GPU 3 back: NVML lists seven GPUs, and the
    old GPUs 4-7 are NVML's 3-6 (their addresses, serials and UUIDs go with them)."""
    lines = [f"gpus = 7\ngpu.*.fabric.state = not_supported\ngpu.*.memory.total_mib = 1024\n"
             f"kernel_log = {c.wd / 'kern' / f'{node}.log'}\n"]
    for now in range(3, 7):
        lines.append(f"gpu.{now}.pci_bus_id = {pci(now + 1)}\ngpu.{now}.serial = {serial(now + 1)}\n"
                     f"gpu.{now}.uuid = {uuid(now + 1)}\ngpu.{now}.minor_number = {now + 1}\n")
    return "".join(lines)


def test_repair_gpu_gone_from_the_bus_is_named_rebooted_at_most_max_attempts_and_rma_names_it_not_gpu0(reboot_cluster):
    c = reboot_cluster
    assert c.check("gpu-a", "--node", "--act").returncode == 0  # healthy: its 8 GPUs are known
    c.after_boot("gpu-a").write_text(seven_without_gpu3(c, "gpu-a"))  # GPU 3 never comes back
    boot_time = c.cluster.node_info("gpu-a")["BootTime"]
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("gpu.3.lost = 1\n")
    with (c.wd / "kern" / "gpu-a.log").open("a") as log:
        log.write(XID79)
    assert c.check("gpu-a", "--node", "--act").returncode == 2  # drains, asks for reboot 1
    # the lost GPU is named by what the earlier run knew of it
    assert c.reason("gpu-a").startswith(f"gpu-healthcheck: gpu3 pci={pci(3)} sn={serial(3)} "), c.reason("gpu-a")
    boot_time = boot(c, "gpu-a", boot_time)
    assert c.check("gpu-a", "--node", "--act").returncode == 2  # validation after boot 1: 7 GPUs
    reason = c.reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: pci={pci(3)} sn={serial(3)} gpu.count=7 node"), reason
    assert ledger_outcomes(c, "gpu-a", 3) == ["still_failing: gpu.count"]
    assert c.check("gpu-a", "--node", "--act").returncode == 2  # reboot 2, for the missing GPU 3
    assert reboot_requests(c, "gpu-a") == 2
    boot(c, "gpu-a", boot_time)
    assert c.check("gpu-a", "--node", "--act").returncode == 2  # validation after boot 2: rma
    reason = c.reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: pci={pci(3)} sn={serial(3)} repair.attempts=2 rma node"), reason
    for _ in range(2):  # never rebooted again
        c.check("gpu-a", "--node", "--act")
    assert reboot_requests(c, "gpu-a") == 2 and c.reason("gpu-a") == reason
    # each attempt went into GPU 3's ledger alone: no other GPU has one, GPU 0 least of all
    assert ledger_outcomes(c, "gpu-a", 3) == ["still_failing: gpu.count", "still_failing: gpu.count"]
    assert sorted(p.name for p in (c.state("gpu-a") / "repair").iterdir()) == [ledger_file(c, "gpu-a", 3).name]
    evidence = [p.name for p in (c.state("gpu-a") / "evidence").iterdir()]
    assert any(serial(3) in name and name.endswith("-ledger.json") for name in evidence), evidence
    known = json.loads((c.state("gpu-a") / "known-gpus.json").read_text())
    assert serial(3) in [g["serial"] for g in known["gpus"]]


def samples(path):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(path.read_text()) for s in family.samples}


def cluster_row(c: GpuCluster, node: str) -> dict:
    done = c.check(node, "--cluster", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {row["node"]: row for row in json.loads(done.stdout)}[node]


def test_repair_blocked_by_no_nvidia_smi_or_nv_hostengine_is_never_an_attempt_and_names_the_holder(repair_cluster, tmp_path):
    c = repair_cluster
    metrics = tmp_path / "gpu_healthcheck.prom"
    config = c.wd / "config" / "gpu-a.toml"
    good = config.read_text()
    real = f'nvidia_smi = "{c.fake / "nvidia-smi"}"'
    assert real in good
    config.write_text(f'metrics_file = "{metrics}"\n'
                      + good.replace(real, f'nvidia_smi = "{tmp_path / "no-such-dir" / "nvidia-smi"}"'))
    drain_by_epilog(c, tmp_path)
    for _ in range(3):  # repair.max_attempts = 2: three runs that reset nothing
        assert c.check("gpu-a", "--node", "--act").returncode == 2
    assert "rma" not in c.reason("gpu-a").split() and c.drained("gpu-a")
    assert "# fakegpu nvidia-smi" not in c.scenario("gpu-a").read_text()
    outcomes = ledger_outcomes(c, "gpu-a", 2)
    assert len(outcomes) == 3 and all(o.startswith("blocked: nvidia-smi is not at ") for o in outcomes), outcomes
    assert cluster_row(c, "gpu-a")["repair"] == "blocked"
    got = samples(metrics)
    assert got[("gpu_healthcheck_repairs_blocked_total", (("action", "reset"), ("cause", "no_nvidia_smi")))] == 3
    assert got[("gpu_healthcheck_repair_state", (("state", "blocked"),))] == 1
    assert got[("gpu_healthcheck_repairs_attempted_reset_total", ())] == 0
    # nvidia-smi is back, but DCGM's host engine holds GPU 2
    config.write_text(f'metrics_file = "{metrics}"\n' + good)
    engine = subprocess.Popen(["bash", "-c", "exec -a nv-hostengine sleep 300"], start_new_session=True)
    try:
        with c.scenario("gpu-a").open("a") as scenario:
            scenario.write(f"gpu.2.processes = {engine.pid}:64\n")
        for _ in range(2):
            assert c.check("gpu-a", "--node", "--act").returncode == 2
        assert "rma" not in c.reason("gpu-a").split()
        assert "--gpu-reset" not in c.scenario("gpu-a").read_text()  # no reset was run
        blocked = [e["message"] for e in repair_events(c, "gpu-a") if "repair blocked" in e["message"]]
        assert len(blocked) == 5 and f"held by nv-hostengine pid {engine.pid}" in blocked[-1], blocked
        comment = c.cluster.node_info("gpu-a").get("Comment", "")
        assert comment.startswith("gpu-healthcheck: repair blocked gpus=2 ") and f"by=nv-hostengine_pid_{engine.pid}" in comment, comment
        row = cluster_row(c, "gpu-a")
        assert (row["repair"], row["held_by"]) == ("blocked", f"nv-hostengine_pid_{engine.pid}"), row
        assert samples(metrics)[("gpu_healthcheck_repairs_blocked_total", (("action", "reset"), ("cause", "in_use")))] == 2
    finally:
        engine.kill()
        engine.wait()
    with c.scenario("gpu-a").open("a") as scenario:  # it stopped: GPU 2 is free
        scenario.write("gpu.2.processes = \n")
    done = c.check("gpu-a", "--node", "--act")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not c.drained("gpu-a") and ledger_outcomes(c, "gpu-a", 2)[-1] == "resumed"
    assert c.cluster.node_info("gpu-a").get("Comment") in (None, "", "(null)")
