"""The repair loop's metrics in the node_exporter textfile: repairs attempted and succeeded by
action, GPUs marked rma, the time from drain to resume, the node's repair state and each GPU's
repairs within the window (act.metricsrepair)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from healthcheck.act import ledger
from healthcheck.act.metrics import FAMILIES, empty_state, render, update_state, write_metrics
from healthcheck.config import Config, RepairConfig
from healthcheck.decide.repair import REPAIR_STATES, Attempt
from healthcheck.model import CRIT, NOTICE, LogEvent, Outcome
from tests.lib.metrics import parse_metrics, run_outcome, value_of

P = "gpu_healthcheck_"
ROOT = Path(__file__).resolve().parents[2]


def step(name: str, action: str = "", **fields: str) -> LogEvent:
    return LogEvent("repair", NOTICE, f"repair gpu-a: {name}",
                    {"GPU_HEALTHCHECK_REPAIR_STEP": name, "GPU_HEALTHCHECK_REPAIR_ACTION": action,
                     **fields})


def reset_that_worked(seconds: str) -> list:
    return [step("claimed", "reset"), step("reset", "reset"),
            LogEvent("resume", NOTICE, "resumed", {}, Outcome.APPLIED),
            step("resumed", "reset", GPU_HEALTHCHECK_DRAIN_TO_RESUME_S=seconds)]


def runs(*event_lists, mode: str = "node"):
    """The state after one run per event list, at t = 100, 200, ..."""
    state = empty_state()
    for i, events in enumerate(event_lists, 1):
        state = update_state(state, run_outcome(events=events), mode, now=100.0 * i)
    return state


def states(text: str) -> dict:
    _, samples = parse_metrics(text)
    return {l["state"]: v for n, l, v in samples if n == P + "repair_state"}


def test_repair_metrics_attempts_successes_rma_and_drain_to_resume_in_the_textfile():
    state = runs([LogEvent("drain", CRIT, "drained", {}, Outcome.APPLIED)],
                 reset_that_worked("600"), reset_that_worked("300"),
                 [step("claimed", "reboot"), step("reboot", "reboot")],
                 [step("still_failing", "reboot")],
                 [step("claimed", "reset"), step("reset_refused", "reset")],
                 [step("rma", "rma", GPU_HEALTHCHECK_EVIDENCE="/e/x")])
    types, samples = parse_metrics(render(state))
    assert value_of(samples, P + "repairs_attempted_reset_total") == 3
    assert value_of(samples, P + "repairs_succeeded_reset_total") == 2
    assert value_of(samples, P + "repairs_attempted_reboot_total") == 1
    assert value_of(samples, P + "repairs_succeeded_reboot_total") == 0
    assert value_of(samples, P + "gpus_marked_rma_total") == 1
    assert types[P + "repair_last_drain_to_resume_seconds"] == "gauge"
    assert value_of(samples, P + "repair_last_drain_to_resume_seconds", action="reset") == 300
    assert types[P + "repair_drain_to_resume_seconds"] == "counter"
    assert value_of(samples, P + "repair_drain_to_resume_seconds_total", action="reset") == 900
    assert value_of(samples, P + "repairs_failed_total", action="reset", outcome="refused") == 1
    assert value_of(samples, P + "repairs_failed_total", action="reboot", outcome="still_failing") == 1
    # no reboot has worked yet: no made-up 0
    assert not [s for s in samples if "drain_to_resume" in s[0] and s[1]["action"] == "reboot"]


def test_repair_metrics_state_follows_each_step_and_its_since_time_only_changes_with_it():
    waiting = step("skipped", GPU_HEALTHCHECK_REPAIR_STATE="waiting_for_idle")
    state = runs([LogEvent("drain", CRIT, "drained", {}, Outcome.APPLIED)], [waiting], [waiting], [])
    text = render(state)
    assert states(text) == {s: (1 if s == "waiting_for_idle" else 0) for s in REPAIR_STATES}
    _, samples = parse_metrics(text)
    assert value_of(samples, P + "repair_state_since_timestamp_seconds") == 200.0  # entered at run 2
    for events, expected in ((reset_that_worked("5"), "in_service"),
                             ([step("claimed", "reboot"), step("reboot", "reboot")], "rebooting"),
                             ([step("claimed", "reset")], "resetting"),  # a run that died mid-reset
                             ([step("claimed", "reset"), step("reset", "reset")], "validating"),
                             ([step("claimed", "reset"), step("reset_refused", "reset")], "drained"),
                             ([step("budget", "reset")], "waiting_for_budget"),
                             ([step("rma", "rma")], "rma"),
                             ([step("skipped", GPU_HEALTHCHECK_REPAIR_STATE="cooldown")], "cooldown")):
        got = states(render(runs([waiting], events)))
        assert got[expected] == 1 and sum(got.values()) == 1, (events, got)
    # a step that says nothing of the state (slurmctld did not answer) keeps it
    assert states(render(runs([waiting], [step("skipped")])))["waiting_for_idle"] == 1


def test_repair_metrics_absent_until_the_node_has_a_state_and_old_state_files_still_load(tmp_path):
    assert not [l for l in render(runs([])).splitlines() if "repair_state" in l]
    # a metrics-state.json written before these metrics existed: its counters carry on
    old = empty_state()
    old["counters"]["repairs_attempted_reset"] = 4
    state_dir = tmp_path / "s"
    state_dir.mkdir()
    (state_dir / "metrics-state.json").write_text(json.dumps(old))
    config = Config(state_dir=str(state_dir), metrics_file=str(tmp_path / "m.prom"))
    assert write_metrics(config, run_outcome(events=reset_that_worked("60")), "epilog", now=5.0) == []
    _, samples = parse_metrics((tmp_path / "m.prom").read_text())
    assert value_of(samples, P + "repairs_attempted_reset_total") == 5
    assert value_of(samples, P + "repair_last_drain_to_resume_seconds", action="reset") == 60


def test_repair_metrics_gpu_repairs_within_the_window_from_the_ledger_on_node_runs(tmp_path):
    state_dir = tmp_path / "s"
    state_dir.mkdir()
    now = 1_800_000_000.0
    for at in (now - 8 * 86400, now - 3600, now - 60):  # the first is outside the 7-day window
        ledger.append_attempt(str(state_dir), "1650522003802", Attempt(
            at=at, action="reset", trigger="ecc.volatile_uncorrected=1", outcome="resumed",
            node="gpu-a", gpu=2, pci="00000000:38:00.0", serial="1650522003802"))
    config = Config(state_dir=str(state_dir), metrics_file=str(tmp_path / "m.prom"),
                    repair=RepairConfig(window_s=7 * 86400))
    write_metrics(config, run_outcome(), "node", now=now)
    _, samples = parse_metrics((tmp_path / "m.prom").read_text())
    ident = {"gpu": "2", "serial": "1650522003802", "pci_bus_id": "00000000:38:00.0", "uuid": "GPU-2"}
    assert value_of(samples, P + "gpu_repairs", **ident) == 2
    assert value_of(samples, P + "gpu_repairs", gpu="0") == 0
    # the prolog does not read the ledgers (its path stays short): the node run's figure stays
    ledger.append_attempt(str(state_dir), "1650522003802", Attempt(
        at=now, action="reset", trigger="x=1", outcome="resumed", node="gpu-a", gpu=2))
    write_metrics(config, run_outcome(), "prolog", now=now + 1)
    _, samples = parse_metrics((tmp_path / "m.prom").read_text())
    assert value_of(samples, P + "gpu_repairs", **ident) == 2
    # a damaged ledger is a note naming it, and the other GPUs' figures still come
    (state_dir / "repair" / "SN0.json").write_text("{not json")
    notes = write_metrics(config, run_outcome(), "node", now=now + 2)
    assert any("SN0.json" in n and "GPU 0" in n for n in notes), notes
    _, samples = parse_metrics((tmp_path / "m.prom").read_text())
    assert value_of(samples, P + "gpu_repairs", **ident) == 3


def test_repair_metrics_every_family_is_documented_in_the_metrics_table():
    """docs/observability.md's metrics table (the README points there) names every family."""
    table = (ROOT / "docs" / "observability.md").read_text()
    documented = set(re.findall(r"`(gpu_healthcheck_[a-z_]+)`", table))
    missing = [f.name for f in FAMILIES if f.name not in documented]
    assert not missing, missing
