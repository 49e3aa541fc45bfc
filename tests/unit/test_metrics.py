"""node_exporter textfile metrics: names, labels, values, persistence across runs and modes."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from healthcheck.act.metrics import FAMILIES, empty_state, render, update_state, write_metrics
from healthcheck.config import Config
from healthcheck.model import CRIT, GpuSnapshot, INFO, LogEvent, NOTICE, Outcome, WARNING
from tests.lib.metrics import parse_metrics, run_outcome, value_of


def test_rendered_families_names_labels_and_values():
    def ev(kind, priority, message, outcome):
        return LogEvent(kind, priority, message, {}, Outcome(outcome) if outcome else None)

    events = [ev("drain", CRIT, "drained gpu-a", "applied"),
              ev("drain", NOTICE, "already drained by gpu-healthcheck", "kept"),
              ev("drain", WARNING, "drained by someone else", "kept"),
              ev("refused", CRIT, "refused", "refused"), ev("pending", CRIT, "pending", "pending"),
              ev("resume", NOTICE, "resumed", "applied"), ev("resume", INFO, "stays drained", "kept")]
    state = update_state(empty_state(), run_outcome(events=events), "epilog", now=1795978862.5)
    types, samples = parse_metrics(render(state))
    p = "gpu_healthcheck_"
    assert value_of(samples, p + "last_run_timestamp_seconds", mode="epilog") == 1795978862.5
    assert value_of(samples, p + "last_run_duration_seconds", mode="epilog") == 0.25
    assert {l["verdict"]: v for n, l, v in samples if n == p + "verdict"} == {
        "pass": 0, "warn": 0, "fail": 1, "unknown": 0}
    assert value_of(samples, p + "findings", mode="epilog", check="ecc.volatile_uncorrected", severity="fail") == 1
    assert value_of(samples, p + "findings", mode="epilog", check="remap.pending", severity="warn") == 1
    for name in ("drains", "drain_refusals", "pending_drains", "resumes"):
        assert types[p + name] == "counter" and value_of(samples, p + name + "_total") == 1
    ident = {"gpu": "2", "uuid": "GPU-2", "serial": "1650522003802", "pci_bus_id": "00000000:38:00.0"}
    assert types[p + "gpu_ecc_errors"] == "counter"
    assert value_of(samples, p + "gpu_ecc_errors_total", counter="volatile", type="uncorrected", **ident) == 3
    assert value_of(samples, p + "gpu_ecc_errors_total", counter="volatile", type="corrected", **ident) == 7
    assert value_of(samples, p + "gpu_ecc_errors_total", counter="aggregate", type="uncorrected", **ident) == 3
    assert value_of(samples, p + "gpu_ecc_errors_total", counter="aggregate", type="corrected", gpu="0") == 5
    assert value_of(samples, p + "gpu_remapped_rows_total", type="uncorrectable", **ident) == 2
    assert value_of(samples, p + "gpu_remapped_rows_total", type="correctable", gpu="0") == 1
    assert value_of(samples, p + "gpu_remap_pending", **ident) == 1
    assert value_of(samples, p + "gpu_remap_failure", **ident) == 0
    assert value_of(samples, p + "gpu_retired_pages_total", cause="dbe", gpu="0") == 0
    assert not [s for s in samples if s[0] == p + "gpu_retired_pages_total" and s[1]["gpu"] == "2"]
    assert value_of(samples, p + "gpu_lost", gpu="5") == 1 and value_of(samples, p + "gpu_lost", gpu="2") == 0
    # a lost GPU has no counters: no made-up zeros
    assert [s for s in samples if s[1].get("gpu") == "5"] == [(p + "gpu_lost", {
        "gpu": "5", "uuid": "GPU-5", "serial": "", "pci_bus_id": ""}, 1.0)]
    assert value_of(samples, p + "gpus_read_timestamp_seconds") == 1795978862.5
    every_gpu_series = [l for n, l, v in samples if n.startswith(p + "gpu_")]
    assert all({"gpu", "uuid", "serial", "pci_bus_id"} <= set(l) for l in every_gpu_series)


def test_naming_rules_promtool_checks():
    """The rules `promtool check metrics` lints, checked on the rendered text itself."""
    state = update_state(empty_state(), run_outcome(), "node", now=1.0)
    text = render(state)
    helps = re.findall(r"^# HELP (\S+) (.+)$", text, re.M)
    kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    names = {m for m in re.findall(r"^([a-z_:][a-z0-9_:]*)[{ ]", text, re.M)}
    assert names and {h[0] for h in helps} == set(kinds) == names
    for name, kind in kinds.items():
        assert name.startswith("gpu_healthcheck_")
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", name)
        assert name.endswith("_total") == (kind == "counter"), name
        for unit_word in ("timestamp", "duration"):
            if unit_word in name:
                assert name.endswith("_seconds"), name
        assert not re.search(r"_(ms|milliseconds|mib|kib|celsius_total|minutes)(_|$)", name)
    for label in re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", text):
        assert not label.startswith("__") and re.fullmatch(r"[a-z_]+", label)
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)


def test_a_run_without_gpus_keeps_the_last_read_and_other_modes_series():
    state = update_state(empty_state(), run_outcome(verdict="pass", findings=[]), "node", now=10.0)
    state = update_state(state, run_outcome(verdict="fail", gpus=(), findings=[
        {"check": "nvml.init", "severity": "fail", "gpu": None}]), "prolog", now=20.0)
    types, samples = parse_metrics(render(state))
    assert value_of(samples, "gpu_healthcheck_verdict", mode="node", verdict="pass") == 1
    assert value_of(samples, "gpu_healthcheck_verdict", mode="prolog", verdict="fail") == 1
    assert value_of(samples, "gpu_healthcheck_findings", mode="prolog", check="nvml.init", severity="fail") == 1
    assert value_of(samples, "gpu_healthcheck_gpus_read_timestamp_seconds") == 10.0
    assert value_of(samples, "gpu_healthcheck_gpu_ecc_errors_total", gpu="2", counter="volatile",
                    type="uncorrected") == 3
    assert not [s for s in samples if s[0] == "gpu_healthcheck_findings" and s[1]["mode"] == "node"]


def test_label_values_are_escaped():
    gpus = (GpuSnapshot(index=0, uuid='GPU-"q"', serial="a\\b\nc", pci_bus_id="x",
                        ecc_volatile_uncorrected=1),)
    _, samples = parse_metrics(render(update_state(empty_state(), run_outcome(gpus=gpus), "node", 1.0)))
    assert value_of(samples, "gpu_healthcheck_gpu_ecc_errors_total", uuid='GPU-"q"', serial="a\\b\nc") == 1


def test_corrupt_state_restarts_counters_with_a_note(tmp_path):
    config = Config(state_dir=str(tmp_path / "s"), metrics_file=str(tmp_path / "m.prom"))
    os.makedirs(config.state_dir, mode=0o700)
    Path(config.state_dir, "metrics-state.json").write_text("{not json")
    notes = write_metrics(config, run_outcome(events=[LogEvent("refused", CRIT, "r")]), "node")
    assert notes and "corrupt" in notes[0] and "metrics-state.json" in notes[0]
    _, samples = parse_metrics(Path(config.metrics_file).read_text())
    assert value_of(samples, "gpu_healthcheck_drain_refusals_total") == 1


def test_textfile_is_0644_and_the_directory_mode_is_left_alone(tmp_path):
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    os.chmod(textdir, 0o755)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (textdir / "gpu.prom").symlink_to(victim)  # replaced by the rename, never written through
    old = os.umask(0o077)
    try:
        write_metrics(Config(state_dir=str(tmp_path / "s"), metrics_file=str(textdir / "gpu.prom")),
                      run_outcome(), "node")
    finally:
        os.umask(old)
    assert stat.S_IMODE(textdir.stat().st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(textdir / "gpu.prom").st_mode) == 0o644
    assert not os.path.islink(textdir / "gpu.prom") and victim.read_text() == "keep"


def test_a_dropped_stale_pending_drain_is_not_counted_as_pending():
    from healthcheck.act.metrics import count_actions
    from healthcheck.model import LogEvent, Outcome
    events = [LogEvent("pending", 4, "pending drain of gpu-a dropped", {}, Outcome.DROPPED),
              LogEvent("pending", 2, "cannot drain gpu-a now", {}, Outcome.PENDING)]
    assert count_actions(events)["pending_drains"] == 1
