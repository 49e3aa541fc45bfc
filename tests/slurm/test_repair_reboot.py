"""The repair loop's reboot on the real test Slurm: the node's RebootProgram is
tests/lib/fake-reboot, which stops the slurmd that ran it and starts it again in a fresh time
namespace (/proc/uptime near 0), as a booted node comes back.  An Xid 79 (GPU 3 fallen off the
bus) leads to one `scontrol reboot` keeping our reason; no job runs on the node between the
boot and the full check that passes; then it is resumed.  A fault the boot does not fix keeps it
drained with the new finding; report_only does nothing; no second reboot while one is pending;
a reboot slurmctld times out is left alone."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.lib.gpucluster import GpuCluster, pci, require_slurm, serial
from tests.lib.repair import enable_repair  # [repair] on, the PCIe scenario of base_scenario

pytestmark = pytest.mark.slurm

XID79 = "NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
# SlurmdTimeout=30 in the harness: slurmctld pings every 10 s, and with ReturnToService=2 a
# DOWN node answering a ping goes IDLE (seen: `nextstate=DOWN` nodes were IDLE 12 s after the
# boot on 22.05 and 24.11).  Watching the job over two ping rounds covers that.
PING_ROUNDS_S = 25


def base_scenario(c: GpuCluster, node: str) -> str:
    # what enable_repair writes: a PCIe node (single GPUs, no fabric) of 1 GiB GPUs
    return (f"gpus = 8\ngpu.*.fabric.state = not_supported\ngpu.*.memory.total_mib = 1024\n"
            f"kernel_log = {c.wd / 'kern' / f'{node}.log'}\n")


def make_cluster(tmp_path: Path, fakegpu, timeout_s: int) -> GpuCluster:
    require_slurm()
    c = GpuCluster(tmp_path, fakegpu, reboot_timeout_s=timeout_s)
    for node in c.nodes:
        enable_repair(c, node)
    return c


@pytest.fixture
def reboot_cluster(tmp_path, fakegpu):
    # ResumeTimeout: a loaded 2-core machine boots our slurmd in seconds, never minutes
    c = make_cluster(tmp_path, fakegpu, timeout_s=300)
    with c.cluster:
        yield c


def gpu3_falls_off_the_bus(c: GpuCluster, node: str = "gpu-a") -> None:
    with c.scenario(node).open("a") as scenario:
        scenario.write("gpu.3.lost = 1\n")
    with (c.wd / "kern" / f"{node}.log").open("a") as log:
        log.write(XID79)


def reboot_requests(c: GpuCluster, node: str) -> int:
    """How many `scontrol reboot` slurmctld queued for the node (its log, info level)."""
    log = (c.cluster.log_dir / "slurmctld.log").read_text()
    return sum(1 for line in log.splitlines() if line.endswith(f"reboot request queued for nodes {node}"))


def repair_events(c: GpuCluster, node: str):
    lines = (c.state(node) / "history.jsonl").read_text().splitlines()
    return [e for line in lines for e in json.loads(line).get("events", []) if e["kind"] == "repair"]


# the words of each repair step in its journal entry and history line (act/repair.py)
STEP_WORDS = {"claimed": "calls for a reboot", "reboot": "asked Slurm to reboot it",
              "rebooting": "waiting for the reboot", "booted": "booted after our reboot",
              "resumed": "reboot worked", "still_failing": "reboot did not fix it",
              "reboot_timed_out": "did not come back within"}


def steps(c: GpuCluster, node: str):
    """The repair steps of the node's history, in order."""
    return [step for e in repair_events(c, node) for step, words in STEP_WORDS.items()
            if words in e["message"]]


def only_ledger(c: GpuCluster, node: str):
    """The node's one repair ledger: GPU 3's, keyed by its index and the address the driver
    logged in its Xid 79 line (NVML had lost the GPU, so its serial and PCI address were
    unknown when the reboot was asked for, and no earlier run had listed it)."""
    [path] = (c.state(node) / "repair").iterdir()
    assert path.name == "~index3@0000-48-00.0.json", path
    return json.loads(path.read_text())


def booted(c: GpuCluster, node: str, before: str, timeout: float = 120):
    """slurmctld registered the node's boot: no reboot flag, a newer BootTime."""
    return c.cluster.wait_node(node, lambda i: "REBOOT" not in i.get("State", "")
                               and i.get("BootTime", "") > before, timeout)


def test_repair_reboot_after_xid_79_one_scontrol_reboot_no_job_before_the_full_check_then_resumed(reboot_cluster, capsys):
    c = reboot_cluster
    c.after_boot("gpu-a").write_text(base_scenario(c, "gpu-a"))  # the power cycle brings GPU 3 back
    boot_before = c.cluster.node_info("gpu-a")["BootTime"]
    gpu3_falls_off_the_bus(c)
    t0 = time.monotonic()
    first = c.check("gpu-a", "--node", "--act")  # drains for the Xid 79, then asks for the reboot
    assert first.returncode == 2, first.stdout + first.stderr
    # our reason; slurmctld appends " : reboot issued" once it has sent the reboot to slurmd,
    # which may already be so when we read it
    reason = c.reason("gpu-a").split(" : reboot issued")[0]
    assert reason.startswith("gpu-healthcheck: gpu3 gpu.lost=GPU_IS_LOST node"), reason  # NVML lost it: no pci, sn
    assert reboot_requests(c, "gpu-a") == 1
    comment = c.cluster.node_info("gpu-a").get("Comment", "")
    assert comment.startswith("gpu-healthcheck: repair rebooting gpus=0,1,2,3,4,5,6,7 at="), comment
    # a job for gpu-a, submitted while it reboots
    job = c.cluster.sbatch(["--gres=gpu:8", "-w", "gpu-a", "-J", "after-boot"], "echo ran\n")
    info = booted(c, "gpu-a", boot_before)
    t_registered = time.monotonic() - t0
    # the drain survived the boot, and our reason with it (slurmctld appended its own words)
    assert info["State"] == "IDLE+DRAIN", info
    assert c.reason("gpu-a").startswith(reason + " : reboot issued"), c.reason("gpu-a")
    # no job starts on it until our check: watched past slurmctld's pings of the booted node
    deadline = time.monotonic() + PING_ROUNDS_S
    while time.monotonic() < deadline:
        state = c.cluster.job_info(job).get("JobState")
        assert state == "PENDING", (state, c.cluster.node_info("gpu-a"))
        assert "DRAIN" in c.cluster.node_info("gpu-a").get("State", "")
        time.sleep(0.5)
    done = c.check("gpu-a", "--node", "--act", "--json")  # the first run after the boot
    t_resumed = time.monotonic() - t0
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["action"]["taken"] == "resume", report["action"]
    assert not c.drained("gpu-a"), c.reason("gpu-a")
    assert c.cluster.node_info("gpu-a").get("Comment") in (None, "", "(null)")
    assert reboot_requests(c, "gpu-a") == 1
    ran = c.cluster.wait_job(job, timeout=60)
    assert ran["NodeList"] == "gpu-a"
    seen = steps(c, "gpu-a")
    for step in ("claimed", "reboot", "booted", "resumed"):
        assert step in seen, seen
    ledger = only_ledger(c, "gpu-a")
    [attempt] = ledger["attempts"]
    assert (attempt["action"], attempt["outcome"], attempt["gpu"]) == ("reboot", "resumed", 3)
    with capsys.disabled():
        print(f"\nREBOOT-TIMING scontrol reboot -> registered {t_registered:.1f} s; "
              f"-> resumed {t_resumed:.1f} s (of which {PING_ROUNDS_S} s watching the job)")


def test_repair_reboot_pending_is_not_repeated_and_a_fault_the_boot_leaves_keeps_it_drained(reboot_cluster):
    c = reboot_cluster
    c.hold_boot("gpu-a").touch()  # the node stays "off" until the test lets it boot
    boot_before = c.cluster.node_info("gpu-a")["BootTime"]
    gpu3_falls_off_the_bus(c)
    assert c.check("gpu-a", "--node", "--act").returncode == 2
    c.cluster.wait_node("gpu-a", lambda i: "REBOOT_ISSUED" in i.get("State", ""), 60)
    # runs while it reboots: no second reboot, nothing resumed
    assert c.check("gpu-a", "--node", "--act").returncode == 2
    assert c.check("gpu-a", "--repair").returncode == 2
    assert reboot_requests(c, "gpu-a") == 1
    assert steps(c, "gpu-a").count("reboot") == 1 and "rebooting" in steps(c, "gpu-a")
    c.hold_boot("gpu-a").unlink()  # boots; no after-boot scenario: GPU 3 is still lost
    booted(c, "gpu-a", boot_before)
    assert c.check("gpu-a", "--node", "--act").returncode == 2
    reason = c.reason("gpu-a")
    # the address the repair named it by before the boot (known-gpus.json) names it now
    assert reason.startswith("gpu-healthcheck: gpu3 pci=00000000:48:00.0 gpu.lost=GPU_IS_LOST node"), reason
    assert "reboot issued" not in reason  # the new finding's reason, written by the full check
    assert c.drained("gpu-a")
    assert c.cluster.node_info("gpu-a").get("Comment") in (None, "", "(null)")
    ledger = only_ledger(c, "gpu-a")
    [attempt] = ledger["attempts"]
    assert (attempt["action"], attempt["outcome"]) == ("reboot", "still_failing: gpu.lost"), attempt
    assert "still_failing" in steps(c, "gpu-a") and reboot_requests(c, "gpu-a") == 1


def test_repair_reboot_report_only_says_would_reboot_and_does_nothing(reboot_cluster):
    c = reboot_cluster
    enable_repair(c, "gpu-a", report_only=True)
    gpu3_falls_off_the_bus(c)
    c.cluster.drain("gpu-a", f"gpu-healthcheck: gpu3 pci={pci(3)} sn={serial(3)} xid=79 node")
    c.check("gpu-a", "--node", "--act")
    assert "report_only: would reboot" in (c.state("gpu-a") / "history.jsonl").read_text()
    assert reboot_requests(c, "gpu-a") == 0
    info = c.cluster.node_info("gpu-a")
    assert "REBOOT" not in info["State"] and info.get("Comment") in (None, "", "(null)"), info
    assert not (c.state("gpu-a") / "repair").exists()


def test_repair_reboot_that_times_out_is_left_alone_and_not_repeated(tmp_path, fakegpu):
    c = make_cluster(tmp_path, fakegpu, timeout_s=10)  # ResumeTimeout 10 s; the node never boots
    with c.cluster:
        c.hold_boot("gpu-a").touch()
        gpu3_falls_off_the_bus(c)
        assert c.check("gpu-a", "--node", "--act").returncode == 2
        c.cluster.wait_node("gpu-a", lambda i: "reboot timed out" in i.get("Reason", ""), 120)
        c.scenario("gpu-a").write_text(base_scenario(c, "gpu-a"))  # healthy or not: a person decides
        for _ in range(2):
            c.check("gpu-a", "--node", "--act")
        info = c.cluster.node_info("gpu-a")
        assert "DOWN" in info["State"] and "reboot timed out" in info["Reason"], info
        assert info.get("Comment", "").startswith("gpu-healthcheck: repair reboot_timed_out"), info
        assert reboot_requests(c, "gpu-a") == 1
        assert steps(c, "gpu-a").count("reboot_timed_out") == 1
        ledger = only_ledger(c, "gpu-a")
        assert ledger["attempts"][-1]["outcome"] == "reboot_timed_out"
        # the dead node's claim no longer holds the cluster's repair budget (max_concurrent 1)
        with c.scenario("gpu-b").open("a") as scenario:
            scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n")
        c.cluster.drain("gpu-b", f"gpu-healthcheck: gpu2 pci={pci(2)} ecc.volatile_uncorrected=1 node")
        c.check("gpu-b", "--repair")
        assert "# fakegpu nvidia-smi" in c.scenario("gpu-b").read_text()
