"""The RMA evidence on the real test Slurm: the run that marks a node rma (HealthCheckProgram,
which slurmd kills at 60 s) records its decision in the history first and ends; the bug report
(a fake nvidia-bug-report.sh that takes as long as the test says) runs outside it, in a transient
systemd unit (a fake systemd-run: no host service is touched), and records its result when it
ends."""

from __future__ import annotations

import pytest

from tests.lib.repair import drain_with_dbe, enable_repair, repair_events, wait_for

pytestmark = pytest.mark.slurm

# nvidia-bug-report.sh --output-file FILE: notes that it started (with the history as it was
# then), waits for the test's word, writes the report
FAKE_BUG_REPORT = """#!/bin/sh
out="$2"
cp ../history.jsonl "{seen}" 2>/dev/null; touch "{started}"
n=0; while [ ! -e "{go}" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done
echo "nvidia-bug-report.sh (fake)" > "$out.gz"
"""
# systemd-run [OPTIONS] -- COMMAND...: the unit's command, started on its own (as systemd does),
# the options noted
FAKE_SYSTEMD_RUN = """#!/bin/sh
printf '%s\\n' "$*" > "{calls}"
while [ "$1" != "--" ]; do shift; done; shift
setsid "$@" </dev/null >/dev/null 2>&1 &
"""


def test_rma_is_recorded_first_and_the_bug_report_runs_outside_the_run_in_its_own_unit(repair_cluster, tmp_path):
    c = repair_cluster
    seen, started, go, calls = (tmp_path / n for n in ("seen.jsonl", "started", "go", "systemd-run.calls"))
    report, systemd_run = tmp_path / "nvidia-bug-report.sh", tmp_path / "systemd-run"
    report.write_text(FAKE_BUG_REPORT.format(seen=seen, started=started, go=go))
    systemd_run.write_text(FAKE_SYSTEMD_RUN.format(calls=calls))
    for script in (report, systemd_run):
        script.chmod(0o755)
    enable_repair(c, "gpu-a", extra=f'max_attempts = 1\nbug_report = "{report}"\nsystemd_run = "{systemd_run}"\n')
    drain_with_dbe(c, "gpu-a")
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write("gpu.2.fault.recurs = 1\n")  # the reset does not fix it: rma at once
    # the run ends while the report is still being gathered (it waits for `go`)
    done = c.check("gpu-a", "--node", "--act", timeout=60)
    assert " rma " in c.reason("gpu-a") + " ", (c.reason("gpu-a"), done.stderr)
    wait_for(started.exists, "the bug report to start")
    assert not go.exists() and not list((c.state("gpu-a") / "evidence").glob("*nvidia-bug-report*"))
    # the decision was in the history before the report began
    assert "marked rma" in seen.read_text()
    messages = [e["message"] for e in repair_events(c, "gpu-a")]
    outside = [m for m in messages if "gathers the RMA evidence outside this run" in m]
    assert outside and "systemd unit gpu-healthcheck-evidence-gpu-a-" in outside[0], messages
    options = calls.read_text()
    assert "--property=RuntimeMaxSec=360" in options and "-m healthcheck.act.evidence" in options, options
    # its result is recorded when it ends
    go.touch()
    result = wait_for(lambda: [m for m in (e["message"] for e in repair_events(c, "gpu-a"))
                               if "RMA evidence: nvidia-bug-report.sh wrote" in m], "the report's result")
    assert "-nvidia-bug-report.log.gz" in result[0], result
    assert sum("marked rma" in e["message"] for e in repair_events(c, "gpu-a")) == 1  # not repeated
