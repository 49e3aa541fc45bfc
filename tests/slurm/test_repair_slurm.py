"""The repair loop on the real test Slurm (munge, slurmctld, three slurmd): a node our epilog
drained is reset through the fake nvidia-smi, proved healthy, resumed and runs the next job; a
fault that keeps coming back marks the node rma; the "never" cases change nothing."""

from __future__ import annotations

import json

import pytest

from tests.lib.gpucluster import pci, serial
from tests.lib.repair import WAIT_FOR_GO, drain_by_epilog, enable_repair, repair_events

pytestmark = pytest.mark.slurm

def test_repair_resets_gpu2_proves_it_healthy_resumes_and_the_next_job_runs_on_gpu_a(repair_cluster, tmp_path):
    c = repair_cluster
    drain_by_epilog(c, tmp_path)
    done = c.check("gpu-a", "--node", "--act", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["action"]["taken"] == "resume", report["action"]
    assert not c.drained("gpu-a"), c.reason("gpu-a")
    # the fake driver's state changed persistently, and its lines are in the kernel log
    assert "gpu.2.ecc.volatile.uncorrected = 0" in c.scenario("gpu-a").read_text()
    assert f"PCI:{pci(2)} reset by nvidia-smi" in (c.wd / "kern" / "gpu-a.log").read_text()
    steps = [e["message"] for e in repair_events(c, "gpu-a")]
    assert any("claimed" in m or "reset of GPU(s) 2" in m for m in steps), steps
    assert any("reset GPU(s) 2" in m for m in steps) and any("resumed" in m for m in steps), steps
    ledger = json.loads((c.state("gpu-a") / "repair" / f"{serial(2)}@0000-38-00.0.json").read_text())
    [attempt] = ledger["attempts"]
    assert (attempt["action"], attempt["outcome"], attempt["gpu"]) == ("reset", "resumed", 2)
    # 22.05 marks a resumed node NOT_RESPONDING until its next ping answers (seen): a job
    # submitted in between goes elsewhere, so the next one is submitted once gpu-a answers
    c.cluster.wait_node("gpu-a", lambda info: "NOT_RESPONDING" not in info.get("State", ""), 30)
    job = c.cluster.sbatch(["--gres=gpu:8", "-J", "train"], "echo next\n")
    assert c.cluster.wait_job(job, timeout=60)["NodeList"] == "gpu-a"


def test_repair_of_a_fault_that_recurs_marks_gpu_a_rma_with_evidence_and_nothing_touches_it_again(repair_cluster, tmp_path):
    c = repair_cluster
    drain_by_epilog(c, tmp_path, faults="gpu.2.fault.recurs = 1\n")
    assert c.check("gpu-a", "--node", "--act").returncode == 2  # attempt 1: still failing
    assert c.drained("gpu-a") and "rma" not in c.reason("gpu-a").split()
    assert c.check("gpu-a", "--repair").returncode == 2  # attempt 2: the window's last
    reason = c.reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: gpu2 pci={pci(2)} sn={serial(2)} repair.attempts=2 rma"), reason
    evidence = list((c.state("gpu-a") / "evidence").iterdir())
    assert [p.name for p in evidence if p.name.endswith("-ledger.json")], evidence
    scenario_before = c.scenario("gpu-a").read_text()
    c.scenario("gpu-a").write_text(scenario_before.replace("gpu.2.fault.recurs = 1", ""))
    assert c.check("gpu-a", "--repair").returncode == 2  # healed or not: rma stays
    assert c.reason("gpu-a") == reason and c.drained("gpu-a")
    assert "reset" not in [e["message"] for e in repair_events(c, "gpu-a")][-1]


def test_repair_never_while_a_job_runs_on_the_node(repair_cluster, tmp_path):
    c = repair_cluster
    go = tmp_path / "go-2"
    job = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-a"], WAIT_FOR_GO.format(go=go))
    c.wait_running(job)
    with c.scenario("gpu-a").open("a") as scenario:  # GPU 2 fails while the job runs on GPU 0
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n")
    c.cluster.drain("gpu-a", f"gpu-healthcheck: gpu2 pci={pci(2)} ecc.volatile_uncorrected=1 node")
    c.check("gpu-a", "--repair")
    assert "# fakegpu nvidia-smi" not in c.scenario("gpu-a").read_text()
    assert any("a job runs on it" in e["message"] for e in repair_events(c, "gpu-a"))
    go.touch()
    c.cluster.wait_job(job, timeout=60)


def test_repair_never_on_an_admin_drained_node(repair_cluster):
    c = repair_cluster
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n")
    c.cluster.drain("gpu-a", "memtest by admin")
    c.check("gpu-a", "--repair")
    assert c.reason("gpu-a") == "memtest by admin"
    assert "# fakegpu nvidia-smi" not in c.scenario("gpu-a").read_text()


def test_repair_report_only_says_would_reset_and_does_nothing(repair_cluster, tmp_path):
    c = repair_cluster
    drain_by_epilog(c, tmp_path)
    enable_repair(c, "gpu-a", report_only=True)
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n")
    done = c.check("gpu-a", "--node", "--act")
    assert "report_only: would reset GPU(s) 2" in done.stderr + (c.state("gpu-a") / "history.jsonl").read_text()
    assert "# fakegpu nvidia-smi" not in c.scenario("gpu-a").read_text()
    assert c.drained("gpu-a")


def test_repair_budget_one_lets_one_of_two_nodes_reset(repair_cluster, tmp_path):
    c = repair_cluster
    for node in ("gpu-a", "gpu-b"):
        with c.scenario(node).open("a") as scenario:
            scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n")
        c.cluster.drain(node, f"gpu-healthcheck: gpu2 pci={pci(2)} ecc.volatile_uncorrected=1 node")
    # gpu-b holds a claim already (a reset in progress)
    c.cluster.run(["scontrol", "update", "NodeName=gpu-b",
                   "Comment=gpu-healthcheck: repair resetting gpus=2 at=2026-01-01T00:00:00Z"], check=True)
    c.check("gpu-a", "--repair")
    assert "# fakegpu nvidia-smi" not in c.scenario("gpu-a").read_text()
    assert c.drained("gpu-a")
    assert any("repair budget spent: gpu-b" in e["message"] for e in repair_events(c, "gpu-a"))
    # both at once: exactly one resets
    c.cluster.run(["scontrol", "update", "NodeName=gpu-b", "Comment="], check=True)
    runs = [c.start_check(node, "--repair") for node in ("gpu-a", "gpu-b")]
    for run in runs:
        run.communicate(timeout=120)
    reset = [n for n in ("gpu-a", "gpu-b") if "# fakegpu nvidia-smi" in c.scenario(n).read_text()]
    assert len(reset) == 1, (reset, {n: [e["message"] for e in repair_events(c, n)] for n in ("gpu-a", "gpu-b")})
