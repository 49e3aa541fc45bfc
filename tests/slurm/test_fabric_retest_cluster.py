"""A fabric drain's repair on the real Slurm test cluster (8 slurmd): the fabric sweep drains two
slow nodes, the repair loop (`--node --act` on each) reboots them through slurmctld
(RebootProgram is tests/lib/fake-reboot), the check after the boot passes but leaves them
drained for the sweep's re-test, and the next sweep re-tests them with known-good partners in
a reservation of their own: the node whose link was mended meanwhile is resumed, the one still
slow is marked rma with evidence.  One cluster for both cases: each Slurm test runs on three
Slurm versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healthcheck.decide.fabricretest import FABRIC_RETEST, parse_retest_mark
from healthcheck.decide.verdict import is_fabric_reason, is_rma
from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.repair import comment, enable_repair, repair_events
from tests.slurm.test_fabric_sweep_cluster import NODES, outcomes, sweep

pytestmark = pytest.mark.slurm

SLOW = {"gpu-c": 41.2, "gpu-f": 30.0}


def reboot_requests(c: GpuCluster, node: str) -> int:
    log = (c.cluster.log_dir / "slurmctld.log").read_text()
    return sum(1 for line in log.splitlines() if line.endswith(f"reboot request queued for nodes {node}"))


def fabric(tmp_path: Path, slow: dict) -> None:
    (tmp_path / "fabric.scenario").write_text("".join(f"node.{n}.busbw_gbps = {v}\n" for n, v in slow.items()))


def test_fabric_drain_rebooted_by_the_repair_loop_then_the_sweeps_retest_resumes_the_mended_node_and_marks_the_slow_one_rma(
        tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    c = GpuCluster(tmp_path, fakegpu, nodes=NODES, scripts=False, weights={}, reboot_timeout_s=300)
    fabric(tmp_path, SLOW)
    (tmp_path / "sweep.toml").write_text(
        f'state_dir = "{tmp_path / "sweep-state"}"\nscontrol = "{c.scontrol}"\njournal = false\n'
        f'[drain]\nmax_fraction = 0.5\n'
        f'[internode]\nbusbw_floor_gbps = 100.0\ntasks_per_node = 2\ntime_limit_s = 30\n'
        f'collective_args = ["-b", "256M", "-e", "1G", "-f", "2", "-g", "1"]\n')
    for node in SLOW:  # one repair only: a failed re-test after it is rma
        enable_repair(c, node, extra="max_attempts = 1\nmax_concurrent = 2\n")
    with c.cluster:
        first = sweep(c, tmp_path, "--act", "--json")
        assert first.returncode == 2, first.stdout + first.stderr
        assert sorted(n for n, v in outcomes(first).items() if v["outcome"] == "bad") == sorted(SLOW)
        reasons = {n: c.reason(n) for n in SLOW}
        assert all(is_fabric_reason(r) for r in reasons.values()), reasons
        boot_before = {n: c.cluster.node_info(n)["BootTime"] for n in SLOW}

        # the repair loop reboots each (its node's own check passes: only the fabric drains it)
        for node in SLOW:
            c.check(node, "--node", "--act")
            assert reboot_requests(c, node) == 1, repair_events(c, node)
            assert comment(c, node).startswith("gpu-healthcheck: repair rebooting gpus=0,1,2,3,4,5,6,7 at=")
        fabric(tmp_path, {"gpu-f": SLOW["gpu-f"]})  # gpu-c's link is mended meanwhile
        for node in SLOW:
            c.cluster.wait_node(node, lambda i, n=node: "REBOOT" not in i.get("State", "")
                                and i.get("BootTime", "") > boot_before[n], 120)
            after = c.check(node, "--node", "--act", "--json")  # the check after the boot
            assert json.loads(after.stdout)["verdict"] == "pass", after.stdout + after.stderr
            assert c.drained(node) and c.reason(node) == reasons[node], c.reason(node)
            mark = parse_retest_mark(comment(c, node))
            assert mark is not None and (mark.state, mark.attempts, mark.max_attempts) == (FABRIC_RETEST, 1, 1)
            # counted in the node's own ledger, never a GPU's
            [ledger] = (c.state(node) / "repair").iterdir()
            assert ledger.name == f"~node-{node}.json"
            assert [a["outcome"] for a in json.loads(ledger.read_text())["attempts"]] == [FABRIC_RETEST]
            c.cluster.wait_node(node, lambda i: i.get("State") == "IDLE+DRAIN", 60)
        rows = {r["node"]: r for r in json.loads(c.check("gpu-a", "--cluster", "--json").stdout)}
        assert {n: rows[n]["repair"] for n in SLOW} == {n: FABRIC_RETEST for n in SLOW}

        second = sweep(c, tmp_path, "--act", "--json")
        assert second.returncode == 2, second.stdout + second.stderr
        nodes = outcomes(second)
        assert (nodes["gpu-c"]["outcome"], nodes["gpu-c"]["action"], nodes["gpu-c"]["retest"]) == ("pass", "resumed", True)
        assert (nodes["gpu-f"]["outcome"], nodes["gpu-f"]["action"]) == ("bad", "rma"), nodes["gpu-f"]
        partner_jobs = [j for j in json.loads(second.stdout)["jobs_run"] if j["kind"] == "partner"]
        assert {j["nodes"][0] for j in partner_jobs} == set(SLOW)
        assert all(not set(j["nodes"][1:]) & set(SLOW) for j in partner_jobs)  # known-good partners
        # (a) mended: in service, our mark and its reservation gone
        assert not c.drained("gpu-c") and comment(c, "gpu-c") == ""
        assert "gpu-healthcheck-retest" not in c.cluster.run(["scontrol", "show", "reservation"]).stdout
        # (b) still slow: rma (CONTRACTS §4: the token after the figure), evidence naming it
        reason = c.reason("gpu-f")
        assert c.drained("gpu-f") and is_rma(reason), reason
        assert reason.startswith("gpu-healthcheck: fabric busbw=30.0<100 rma partners=gpu-"), reason
        [evidence] = (tmp_path / "sweep-state" / "evidence").iterdir()
        bundle = json.loads(evidence.read_text())
        assert (bundle["node"], bundle["sweep_id"]) == ("gpu-f", json.loads(second.stdout)["sweep_id"])
        assert bundle["partners"] == nodes["gpu-f"]["partners"] and len(bundle["job_ids"]) == 2
        # rma: the repair loop never reboots it again
        c.check("gpu-f", "--node", "--act")
        assert reboot_requests(c, "gpu-f") == 1 and c.reason("gpu-f") == reason
