"""A real Prometheus finds the repair loop's metrics: on the real test Slurm our epilog drains
gpu-a, two repairs of a fault that comes back mark GPU 2 rma, and a real node_exporter
(textfile collector on the node's metrics_file folder) scraped by a real Prometheus (Debian's
packages, unpacked by tests/lib/fetch-prometheus; loopback, tmp storage) answers
/api/v1/query with the counts, and our alert rules fire in its /api/v1/alerts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lib.gpucluster import GpuCluster, require_slurm, serial
from tests.lib.prometheus import PromStack, tool
from tests.lib.repair import drain_by_epilog, enable_repair

pytestmark = pytest.mark.slurm
RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "mixin"


def test_prometheus_scrapes_the_repair_metrics_of_a_real_repair_and_the_rma_alert_fires(tmp_path, fakegpu):
    require_slurm()
    for name in ("prometheus", "node_exporter"):
        tool(name)
    c = GpuCluster(tmp_path / "cluster", fakegpu)
    for node in c.nodes:
        enable_repair(c, node)
    with PromStack(tmp_path / "prom", RULES_DIR / "prometheus_alerts.yaml") as prom, c.cluster:
        config = c.wd / "config" / "gpu-a.toml"
        config.write_text(f'metrics_file = "{prom.textfile_dir / "gpu_healthcheck.prom"}"\n'
                          + config.read_text())
        try:
            drain_by_epilog(c, tmp_path, faults="gpu.2.fault.recurs = 1\n")
            assert c.check("gpu-a", "--node", "--act").returncode == 2  # attempt 1: still failing
            prom.wait_value("gpu_healthcheck_repairs_attempted_reset_total", 1)
            prom.wait_value("gpu_healthcheck_gpus_marked_rma_total", 0)
            prom.wait_value('gpu_healthcheck_repair_state{state="drained"}', 1)
            assert c.check("gpu-a", "--node", "--act").returncode == 2  # attempt 2: rma
            prom.wait_value("gpu_healthcheck_gpus_marked_rma_total", 1)
            prom.wait_value("gpu_healthcheck_repairs_attempted_reset_total", 2)
            prom.wait_value('gpu_healthcheck_repairs_failed_total{action="reset",outcome="still_failing"}', 2)
            prom.wait_value("gpu_healthcheck_repairs_succeeded_reset_total", 0)
            prom.wait_value('gpu_healthcheck_repair_state{state="rma"}', 1)
            [gpu2] = prom.wait_value(f'gpu_healthcheck_gpu_repairs{{serial="{serial(2)}"}}', 2)
            assert gpu2["metric"]["gpu"] == "2" and gpu2["metric"]["job"] == "node"
            rma = prom.wait_alert("GpuHealthcheckGpuMarkedRma", "firing")
            assert rma["labels"]["severity"] == "critical"
            prom.wait_alert("GpuHealthcheckRepairFailed", "firing")
            repeated = prom.wait_alert("GpuHealthcheckGpuRepeatedRepairs", "firing")
            assert repeated["labels"]["serial"] == serial(2)
        except BaseException:
            print(prom.log_tails())
            raise
