"""Issue 23's "the journal, the history and the metrics record each step", end to end on the real
test Slurm: our epilog drains gpu-a for a DBE on GPU 2, and the `--node --act` that resets,
proves and resumes it runs with libsystemd sending to a journald socket of our own (in a
private mount namespace: never the host's journald) and a metrics file; every repair step is an
entry there, a history event and a metric."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from healthcheck.act.journal import MESSAGE_IDS
from tests.lib.fakenode import ROOT
from tests.lib.journalsock import FakeJournal, private_run_argv
from tests.lib.repair import drain_by_epilog, repair_events

pytestmark = pytest.mark.slurm


def test_repair_each_step_is_a_journal_entry_a_history_event_and_a_metric(repair_cluster, tmp_path):
    c = repair_cluster
    metrics = tmp_path / "gpu_healthcheck.prom"
    config = c.wd / "config" / "gpu-a.toml"
    config.write_text(f'metrics_file = "{metrics}"\n' + config.read_text())
    drain_by_epilog(c, tmp_path)
    fake = FakeJournal(tmp_path / "journal")
    try:
        proc = subprocess.Popen(private_run_argv(fake.directory, [sys.executable, "-m", "healthcheck.cli",
                                                                  "--node", "--act"]),
                                env=c.check_env("gpu-a"), cwd=str(ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        fake.drain_while(proc)
        _, stderr = proc.communicate(timeout=120)
    finally:
        fake.close()
    assert proc.returncode == 0, stderr
    assert not c.drained("gpu-a"), c.reason("gpu-a")
    # the journal: one entry per step, in order, each with the repair's MESSAGE_ID and fields
    repair = [e for e in fake.entries if e.get("GPU_HEALTHCHECK_EVENT") == "repair"]
    steps = [e["GPU_HEALTHCHECK_REPAIR_STEP"] for e in repair]
    assert steps == ["claimed", "persistence_off", "reset", "persistence_on", "resumed"], steps
    assert all(e["MESSAGE_ID"] == MESSAGE_IDS["repair"] for e in repair)
    assert all(e["GPU_HEALTHCHECK_REPAIR_ACTION"] == "reset" for e in repair)
    assert all(e["SLURMD_NODENAME"] == "gpu-a" for e in repair), repair
    [resumed] = [e for e in repair if e["GPU_HEALTHCHECK_REPAIR_STEP"] == "resumed"]
    assert float(resumed["GPU_HEALTHCHECK_DRAIN_TO_RESUME_S"]) >= 0
    # the history: the same steps, as events of the run's line
    history = [e["message"] for e in repair_events(c, "gpu-a")]
    assert [e["MESSAGE"] for e in repair] == history[-len(repair):], (history, repair)
    # the metrics: attempted and succeeded, the drain-to-resume time, the state back in service
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(metrics.read_text()) for s in family.samples}
    assert samples[("gpu_healthcheck_repairs_attempted_reset_total", ())] == 1
    assert samples[("gpu_healthcheck_repairs_succeeded_reset_total", ())] == 1
    assert samples[("gpu_healthcheck_repair_last_drain_to_resume_seconds", (("action", "reset"),))] >= 0
    assert samples[("gpu_healthcheck_repair_state", (("state", "in_service"),))] == 1
    assert samples[("gpu_healthcheck_repair_state", (("state", "validating"),))] == 0
