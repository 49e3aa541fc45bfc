"""deploy/prometheus/'s alert rules under Debian's promtool (tests/lib/fetch-prometheus):
`promtool check rules`, the rules' own unit tests (`promtool test rules`), and the repair
metrics' text under `promtool check metrics`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from healthcheck.act.metrics import empty_state, render, update_state
from healthcheck.model import NOTICE, LogEvent
from tests.lib.metrics import run_outcome
from tests.lib.prometheus import tool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "gpu-healthcheck.rules.yml"
RULE_TESTS = DEPLOY / "gpu-healthcheck.rules.test.yml"


def promtool(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=120,
                          cwd=DEPLOY, **kw)


def test_prometheus_rules_pass_promtool_check_rules():
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = re.findall(r"^\s+- alert: (\S+)", RULES.read_text(), re.M)
    assert f"SUCCESS: {len(alerts)} rules found" in done.stdout, done.stdout
    assert len(alerts) == 10


def test_prometheus_rules_unit_tests_pass_and_test_every_alert_firing_and_not():
    done = promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    text = RULE_TESTS.read_text()
    alerts = set(re.findall(r"^\s+- alert: (\S+)", RULES.read_text(), re.M))
    tested = re.findall(r"alertname: (\S+)\n\s+exp_alerts:(.*?)(?=\n\s+- eval_time|\n\s+- interval|\Z)",
                        text, re.S)
    fires = {name for name, body in tested if "exp_labels" in body}
    silent = {name for name, body in tested if body.strip().startswith("[]")}
    assert fires == alerts and silent == alerts, (alerts - fires, alerts - silent)


def test_prometheus_rules_tests_fail_when_a_rule_is_wrong(tmp_path):
    """The unit tests can fail: a rule with a wrong threshold is caught."""
    broken = RULES.read_text().replace("gpu_healthcheck_gpu_repairs >= 2", "gpu_healthcheck_gpu_repairs >= 1")
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    done = subprocess.run([tool("promtool"), "test", "rules", RULE_TESTS.name], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and "GpuHealthcheckGpuRepeatedRepairs" in done.stdout + done.stderr


def test_prometheus_repair_metrics_pass_promtool_check_metrics():
    def step(name, action, **fields):
        return LogEvent("repair", NOTICE, name, {"GPU_HEALTHCHECK_REPAIR_STEP": name,
                                                 "GPU_HEALTHCHECK_REPAIR_ACTION": action, **fields})
    events = [step("claimed", "reset"), step("reset", "reset"), step("still_failing", "reset"),
              step("resumed", "reset", GPU_HEALTHCHECK_DRAIN_TO_RESUME_S="60")]
    text = render(update_state(empty_state(), run_outcome(events=events), "node", now=1.0,
                               gpu_repairs=[{"gpu": "2", "uuid": "GPU-2", "serial": "S", "pci_bus_id": "P",
                                             "repairs": 1}]))
    assert "gpu_healthcheck_repair_state{" in text and "gpu_healthcheck_gpu_repairs{" in text
    done = promtool("check", "metrics", input=text)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_prometheus_fabric_and_gang_metrics_pass_promtool_check_metrics():
    """The fabric sweep's and the gang check's textfiles (report/sweep.py, report/gang.py)
    as node_exporter would serve them: promtool's lint finds nothing, and each family is there."""
    from healthcheck.report.gang import metrics_text as gang_text
    from healthcheck.report.sweep import metrics_text as sweep_text
    from healthcheck.decide.gang import GangPlan
    from healthcheck.decide.sweep import (Job, JobResult, NodeOutcome, SweepOutcome, SweepReport,
                                          Thresholds)

    plan = GangPlan(["gpu-a", "gpu-b", "gpu-c"], Thresholds(100.0))
    jobs = plan.next_jobs()
    while jobs:
        plan.record([JobResult(j, 41.2 if "gpu-a" in j.nodes else 380.0) for j in jobs])
        jobs = plan.next_jobs()
    gang = gang_text(plan.result(), ["gpu-a", "gpu-b", "gpu-c"], 1795978862.5, plan.recorded)
    assert 'gpu_healthcheck_gang_node_outcome{node="gpu-a",outcome="bad"} 1' in gang
    results = (JobResult(Job(("gpu-c", "gpu-d"), "pair", 1), 41.2),)
    report = SweepReport("S1", SweepOutcome((NodeOutcome("gpu-c", "bad", 41.2, ("gpu-a",), "x"),), 3, 8,
                                            380.0, results), {}, {})
    for text, families in ((gang, 8), (sweep_text(report, 1795978862.5), 5)):
        assert len(re.findall(r"^# TYPE ", text, re.M)) == families, text
        done = promtool("check", "metrics", input=text)
        assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
