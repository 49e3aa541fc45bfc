"""report/gang.py: the gang check's node_exporter textfile, from the plan's own result
(pure); promtool's lint of the same text is in tests/cli/test_prometheus_rules.py."""

from __future__ import annotations

import re
from typing import Callable, Dict, Sequence, Set, Tuple

from healthcheck.report.gang import OUTCOMES, metrics_text
from healthcheck.report.sweep import metrics_text as sweep_metrics_text
from healthcheck.decide.gang import GangPlan
from healthcheck.decide.sweep import Job, JobResult, SweepOutcome, SweepReport, Thresholds

NOW = 1795978862.5


def gang(nodes: Sequence[str], bad: Set[str]) -> Tuple[object, Sequence[JobResult]]:
    plan = GangPlan(nodes, Thresholds(100.0))
    model: Callable[[Job], JobResult] = lambda job: JobResult(job, 41.2 if set(job.nodes) & bad else 380.0)
    jobs = plan.next_jobs()
    while jobs:
        plan.record([model(j) for j in jobs])
        jobs = plan.next_jobs()
    return plan.result(), plan.recorded


def samples(text: str) -> Dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)
            if not m.group(1).startswith("#")}


def test_gangrecord_a_failed_check_names_the_bad_node_and_its_pairs() -> None:
    result, runs = gang(["gpu-a", "gpu-b", "gpu-c", "gpu-d"], {"gpu-c"})
    got = samples(metrics_text(result, ["gpu-a", "gpu-b", "gpu-c", "gpu-d"], NOW, runs))
    assert got['gpu_healthcheck_gang_outcome{outcome="failed"}'] == 1
    assert [k for k, v in got.items() if k.startswith("gpu_healthcheck_gang_outcome") and v] == \
        ['gpu_healthcheck_gang_outcome{outcome="failed"}']
    assert got['gpu_healthcheck_gang_node_outcome{node="gpu-c",outcome="bad"}'] == 1
    assert got['gpu_healthcheck_gang_node_outcome{node="gpu-c",outcome="pass"}'] == 0
    assert got['gpu_healthcheck_gang_node_outcome{node="gpu-a",outcome="pass"}'] == 1
    assert got['gpu_healthcheck_gang_node_outcome{node="gpu-d",outcome="transient"}'] == 1
    assert got["gpu_healthcheck_gang_job_busbw_gbps"] == 41.2  # the collective over all four
    assert got["gpu_healthcheck_gang_job_nodes"] == 4
    assert got['gpu_healthcheck_gang_busbw_gbps{node="gpu-c",partner="gpu-d"}'] == 41.2
    assert got['gpu_healthcheck_gang_busbw_gbps{node="gpu-a",partner="gpu-b"}'] == 380.0
    assert got["gpu_healthcheck_gang_rounds"] == 4 and got["gpu_healthcheck_gang_collectives"] == 7  # whole, 2 pairs, 2 x 2 partners
    assert got["gpu_healthcheck_gang_last_run_timestamp_seconds"] == NOW  # to the half second


def test_gangrecord_a_passed_check_has_no_per_node_series() -> None:
    result, runs = gang(["gpu-a", "gpu-b", "gpu-c"], set())
    text = metrics_text(result, ["gpu-a", "gpu-b", "gpu-c"], NOW, runs)
    got = samples(text)
    assert got['gpu_healthcheck_gang_outcome{outcome="passed"}'] == 1
    assert got["gpu_healthcheck_gang_job_busbw_gbps"] == 380.0 and got["gpu_healthcheck_gang_collectives"] == 1
    assert "gpu_healthcheck_gang_node_outcome" not in text and "gpu_healthcheck_gang_busbw_gbps{" not in text


def test_gangrecord_could_not_run_is_an_outcome_of_its_own() -> None:
    got = samples(metrics_text(None, ["gpu-a", "gpu-b"], NOW))
    assert got['gpu_healthcheck_gang_outcome{outcome="could_not_run"}'] == 1
    assert sum(v for k, v in got.items() if k.startswith("gpu_healthcheck_gang_outcome")) == 1
    assert len([k for k in got if k.startswith("gpu_healthcheck_gang_outcome")]) == len(OUTCOMES)
    assert "gpu_healthcheck_gang_job_busbw_gbps" not in got and got["gpu_healthcheck_gang_rounds"] == 0


def test_gangrecord_and_the_sweeps_time_stamps_keep_every_digit() -> None:
    """`:g` printed 1.79598e+09, up to 5,000 s off: a staleness alert would misfire."""
    report = SweepReport("S1", SweepOutcome((), 1, 1, None, ()), {}, {})
    assert "gpu_healthcheck_fabric_sweep_last_run_timestamp_seconds 1795978862.5\n" in sweep_metrics_text(report, NOW)
    assert "gpu_healthcheck_gang_last_run_timestamp_seconds 1795978862.5\n" in metrics_text(None, [], NOW)
