"""The monitoring mixin against the real thing: a real Slurm test cluster of four simulated
8-GPU nodes, the real gpu-healthcheck on each (`--node --act`, as HealthCheckProgram runs it)
and a real fabric sweep from a submit host, one real node_exporter per node (and one for the
submit host) reading the textfiles the tool wrote, and a real Prometheus (Debian's packages,
tests/lib/fetch-prometheus) scraping them with the mixin's alerts and recording rules loaded.

The scenario: the sweep finds gpu-d's path slow and drains it (fabric); gpu-a's GPU 2 has an
uncorrectable ECC error, is drained, reset by the repair loop and resumed (MTTR); gpu-b's
GPU 2 keeps failing after each reset and is marked rma; gpu-c is healthy, with a few memory
banks low on spare rows.  Then every recording rule, every dashboard panel query and the Node
dashboard's annotation is evaluated over the HTTP API and returns the series it should."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.lib.fakenode import ROOT
from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.prometheus import PromStack, poll, tool
from tests.lib.repair import enable_repair
from tests.lib.slurmcluster import free_ports
from tests.slurm.test_fabric_sweep_cluster import sweep as fabric_sweep

pytestmark = pytest.mark.slurm

MIXIN = ROOT / "deploy" / "mixin"
NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
CLUSTER = "test"
DBE = "gpu.2.ecc.volatile.uncorrected = 1\n"


class FleetStack(PromStack):
    """PromStack with one node_exporter per host, each target labelled with the cluster and
    its hostname as deploy/prometheus/README.md tells a site to."""

    def __init__(self, wd: Path, rules: Path, hosts: List[str]) -> None:
        super().__init__(wd, rules)
        self.hosts = hosts
        self.ports = dict(zip(hosts, free_ports(len(hosts))))

    def textfile(self, host: str) -> Path:
        return self.wd / "textfile" / host

    def __enter__(self) -> "FleetStack":
        try:
            for host, port in self.ports.items():
                self.start_exporter(f"node_exporter-{host}", port, self.textfile(host))
            self.start_prometheus([{"targets": [f"127.0.0.1:{port}"], "labels": {"cluster": CLUSTER, "hostname": host}}
                                   for host, port in self.ports.items()])
        except BaseException:
            self.stop()
            raise
        return self

    def by_host(self, expr: str) -> Dict[str, float]:
        return {r["metric"].get("hostname", ""): float(r["value"][1]) for r in self.query(expr)}

    def wait(self, what: str, expr: str, check, timeout: float = 60.0) -> List[Dict[str, Any]]:
        """Poll expr until check(result) holds (the rules evaluate every second)."""
        def probe() -> Any:
            result = self.query(expr)
            return result if check(result) else None
        return poll(f"{what}: {expr}", probe, timeout)


def setup_cluster(tmp_path: Path, fakegpu: Path, prom: FleetStack) -> GpuCluster:
    c = GpuCluster(tmp_path / "cluster", fakegpu, nodes=NODES, scripts=False, weights={})
    for node in NODES:
        if node in ("gpu-a", "gpu-b"):
            enable_repair(c, node)  # PCIe nodes, fake nvidia-smi, [repair] on, cooldown 0
        config = c.wd / "config" / f"{node}.toml"
        config.write_text(f'metrics_file = "{prom.textfile(node) / "gpu_healthcheck.prom"}"\n' + config.read_text())
    with c.scenario("gpu-c").open("a") as scenario:
        scenario.write("gpu.3.remap.histogram = 2550,5,3,2,0\n")
    # the submit host: the sweep's own state and textfile (report/sweep.py renders
    # gpu_healthcheck_fabric.prom beside metrics_file)
    (tmp_path / "fabric.scenario").write_text("node.gpu-d.busbw_gbps = 41.2\n")
    (tmp_path / "sweep.toml").write_text(
        f'state_dir = "{tmp_path / "sweep-state"}"\nscontrol = "{c.scontrol}"\njournal = false\n'
        f'metrics_file = "{prom.textfile("ctl") / "gpu_healthcheck.prom"}"\n[drain]\nmax_fraction = 0.5\n'
        f'[internode]\nbusbw_floor_gbps = 100.0\ntasks_per_node = 2\ntime_limit_s = 30\n'
        f'collective_args = ["-b", "256M", "-e", "1G", "-f", "2", "-g", "1"]\n')
    return c


def repair_events(c: GpuCluster, node: str) -> List[Dict[str, Any]]:
    lines = (c.state(node) / "history.jsonl").read_text().splitlines()
    return [e for line in lines for e in json.loads(line).get("events", []) if e["kind"] == "repair"]


def median(values: List[float]) -> float:
    """PromQL's quantile(0.5, ...): linear between the two middle values."""
    ordered = sorted(values)
    rank = 0.5 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def panel_queries() -> List[tuple]:
    """(dashboard, panel title, expr) of every panel target and annotation, the variables set
    as Grafana would for the whole cluster, and gpu-b on the Node dashboard."""
    out = []
    for path in sorted((MIXIN / "dashboards_out").glob("*.json")):
        doc = json.loads(path.read_text())
        host = "gpu-b" if "node" in path.name else ".*"
        sub = lambda e: (e.replace("$cluster", CLUSTER).replace("$hostname", host).replace("$gpu", ".*")  # noqa: E731
                         .replace("$hpc_job", ".*"))
        out += [(path.name, p["title"], sub(t["expr"])) for p in doc["panels"] for t in p["targets"]]
        out += [(path.name, a["name"], sub(a["expr"])) for a in doc["annotations"]["list"] if "expr" in a]
    return out


# Panels with nothing to show in this scenario, and why: no gang check ran, no reset was
# blocked, no --suspects ran (tests/cli/test_mixin.py's promtool cases cover its rules).
# Every other panel must return at least one series.
EMPTY_HERE = {"Gang checks": "no --gang ran", "Repairs blocked": "no reset was blocked",
              "Suspects and lemons": "no --suspects ran", "Suspects": "no --suspects ran",
              "Jobs on unhealthy GPUs": "no dcgm-exporter runs here (tests/cli/test_mixin.py joins its series)"}


def test_every_rule_and_panel_returns_what_the_real_tool_wrote(tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    for name in ("prometheus", "node_exporter"):
        tool(name)
    prom = FleetStack(tmp_path / "prom", MIXIN / "prometheus_*.yaml", NODES + ["ctl"])
    c = setup_cluster(tmp_path, fakegpu, prom)
    with prom, c.cluster:
        try:
            _scenario(c, prom, tmp_path)
        except BaseException:
            print(prom.log_tails())
            raise


def _scenario(c: GpuCluster, prom: FleetStack, tmp_path: Path) -> None:
    # every node healthy, and Prometheus has seen each one's counters at 0 (so that the
    # increases below start from a scraped zero)
    for node in NODES:
        done = c.check(node, "--node", "--act")
        assert done.returncode == 0, (node, done.stdout, done.stderr)
    prom.wait("four nodes at 0 drains", "gpu_healthcheck_drains_total",
              lambda r: len(r) == 4 and all(float(x["value"][1]) == 0 for x in r))

    # the fabric sweep drains gpu-d (its path is slow with every partner)
    done = fabric_sweep(c, tmp_path, "--act", "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    bad = [n["node"] for n in json.loads(done.stdout)["nodes"] if n["outcome"] == "bad"]
    assert bad == ["gpu-d"] and c.drained("gpu-d"), done.stdout

    # gpu-a: a DBE; one --node --act drains it, and the repair loop (the node has no job)
    # resets GPU 2, validates and resumes it in the same run
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write(DBE)
    before_drain = time.time()
    done = c.check("gpu-a", "--node", "--act")
    after_resume = time.time()
    assert done.returncode == 0 and not c.drained("gpu-a"), done.stdout + done.stderr
    assert any("resumed" in e["message"] for e in repair_events(c, "gpu-a"))
    prom.wait("gpu-a drained once", 'gpu_healthcheck_drains_total{hostname="gpu-a"} == 1', bool)
    measured = float(prom.wait("gpu-a's last drain to resume", 'gpu_healthcheck_repair_last_drain_to_resume_seconds'
                               '{hostname="gpu-a",action="reset"}', bool)[0]["value"][1])
    assert 0 <= measured <= after_resume - before_drain + 1, measured

    # gpu-b: the fault comes back after each reset: rma once repair.max_attempts (2) are used
    with c.scenario("gpu-b").open("a") as scenario:
        scenario.write(DBE + "gpu.2.fault.recurs = 1\n")
    for _attempt in range(3):
        assert c.check("gpu-b", "--node", "--act").returncode == 2
        if " rma " in c.reason("gpu-b") + " ":
            break
    assert " rma " in c.reason("gpu-b") + " ", c.reason("gpu-b")
    assert c.check("gpu-c", "--node").returncode == 0  # its remap histogram read again

    # --- the recording rules ------------------------------------------------------------
    sel = f'{{cluster="{CLUSTER}"}}'
    prom.wait("gpu-b rma", 'gpu_healthcheck_repair_state{hostname="gpu-b",state="rma"} == 1', bool)
    # the rules see the last scrape within an evaluation or two: wait for those that read
    # the last state (each group evaluates in order, the groups on their own)
    for expr in ('cluster:gpu_healthcheck_nodes_out:sum{reason="rma"} == 1',
                 'cluster:gpu_healthcheck_repair_funnel:sum{step="rma"} == 1',
                 'cluster:gpu_healthcheck_repair_funnel:sum{step="reset_attempted"} == 3',
                 'instance:gpu_healthcheck_interruptions:increase30d{hostname="gpu-b"} > 0'):
        prom.wait("the rules caught up", expr, bool)
    healthy = prom.wait("node health", "instance:gpu_healthcheck_node_healthy:bool",
                        lambda r: {x["metric"]["hostname"]: float(x["value"][1]) for x in r}.get("gpu-b") == 0)
    by_host = {x["metric"]["hostname"]: float(x["value"][1]) for x in healthy}
    # gpu-d: its own textfile knows no drain of its own (the sweep drained it from the submit
    # host); the sweep's per-node outcome (node="gpu-d", outcome="bad") counts it out
    assert by_host == {"gpu-a": 1, "gpu-b": 0, "gpu-c": 1, "gpu-d": 0}, by_host
    assert prom.by_host(f"cluster:gpu_healthcheck_node_healthy:ratio{sel}") == {"": 0.5}
    gpus = prom.query("instance_gpu:gpu_healthcheck_gpu_healthy:bool")
    out_gpus = [(x["metric"]["hostname"], x["metric"]["gpu"]) for x in gpus if x["value"][1] == "0"]
    assert len(gpus) == 32 and sorted(out_gpus) == sorted((h, str(i)) for h in ("gpu-b", "gpu-d") for i in range(8))
    assert {x["metric"]["hostname"] for x in gpus} == set(NODES)
    assert float(prom.query(f"cluster:gpu_healthcheck_gpu_healthy:ratio{sel}")[0]["value"][1]) == pytest.approx(0.5)
    assert float(prom.query(f"cluster:gpu_healthcheck_gpus:count{sel}")[0]["value"][1]) == 32
    [out] = prom.query("instance:gpu_healthcheck_node_out:reason")
    assert (out["metric"]["hostname"], out["metric"]["reason"], out["metric"]["state"]) == ("gpu-b", "rma", "rma")
    reasons = {x["metric"]["reason"]: float(x["value"][1]) for x in prom.query(f"cluster:gpu_healthcheck_nodes_out:sum{sel}")}
    assert reasons == {"rma": 1, "fabric": 1}, reasons
    [mttr] = prom.query(f"cluster:gpu_healthcheck_repair_drain_to_resume_seconds:mean{sel}")
    assert mttr["metric"]["action"] == "reset" and float(mttr["value"][1]) == measured, (mttr, measured)
    drains = prom.by_host("instance:gpu_healthcheck_interruptions:increase30d")
    assert set(drains) == set(NODES) and drains["gpu-c"] == 0 and drains["gpu-d"] == 0, drains
    assert 0.9 <= drains["gpu-a"] <= 1.5 and 0.9 <= drains["gpu-b"] <= 1.5, drains
    mtbi = prom.by_host("instance:gpu_healthcheck_mtbi_seconds:30d")
    assert set(mtbi) == {"gpu-a", "gpu-b"} and abs(mtbi["gpu-a"] - 30 * 86400 / drains["gpu-a"]) < 1e-6 * mtbi["gpu-a"]
    funnel = {x["metric"]["step"]: float(x["value"][1]) for x in prom.query(f"cluster:gpu_healthcheck_repair_funnel:sum{sel}")}
    assert funnel == {"reset_attempted": 3, "reset_succeeded": 1, "reboot_attempted": 0,
                      "reboot_succeeded": 0, "rma": 1}, funnel
    day = {x["metric"]["step"]: float(x["value"][1]) for x in prom.query(f"cluster:gpu_healthcheck_repair_funnel:increase1d{sel}")}
    assert 2.5 <= day["reset_attempted"] <= 4.5 and day["reboot_attempted"] == 0, day
    pairs = [float(x["value"][1]) for x in prom.query("gpu_healthcheck_fabric_busbw_gbps")]
    assert 41.2 in pairs and 380.0 in pairs, pairs
    [per_model] = prom.query(f"cluster:gpu_healthcheck_fabric_busbw_gbps:median{sel}")
    assert per_model["metric"]["modelName"] == "NVIDIA H100 80GB HBM3"
    assert abs(float(per_model["value"][1]) - median(pairs)) < 1e-9, (per_model, pairs)
    low = prom.query('instance_gpu:gpu_healthcheck_gpu_remap_banks_low:sum{hostname="gpu-c",gpu="3"}')
    assert [float(x["value"][1]) for x in low] == [2.0]

    # --- every panel and annotation ------------------------------------------------------
    results = {}
    for dashboard, title, expr in panel_queries():
        result = prom.query(expr)
        results[(dashboard, title, expr)] = result
        print(f"{dashboard}: {title}: {expr!r} -> "
              f"{[(r['metric'], r['value'][1]) for r in result][:6]}")
    panels: Dict[tuple, bool] = {}
    for (dashboard, title, _), result in results.items():
        panels[(dashboard, title)] = panels.get((dashboard, title), False) or bool(result)
    empty = sorted(title for (_, title), shown in panels.items() if not shown)
    assert empty == sorted(EMPTY_HERE), empty
    # what the banner and the tables say about this scenario
    value = lambda title: [float(r["value"][1]) for (_, t, _), rs in results.items() if t == title for r in rs]  # noqa: E731
    assert value("Healthy nodes") == [pytest.approx(0.5)] and value("Nodes out") == [2] and value("Nodes not reporting") == [0]
    node_annotation = [rs for (d, t, _), rs in results.items() if t == "Repair history"][0]
    assert {r["metric"]["state"] for r in node_annotation} == {"rma"}
    repeat = [r["metric"]["hostname"] for (_, t, _), rs in results.items() if t.startswith("Top ") for r in rs]
    assert sorted(repeat) == ["gpu-a", "gpu-b"]
    assert re.search(r"GPU", json.dumps([t for _, t, _ in results]))
