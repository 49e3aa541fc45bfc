"""node_exporter textfile metrics: names, labels, values, persistence across runs and modes."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from healthcheck.config import Config
from healthcheck.act.metrics import FAMILIES, render, update_state, empty_state, write_metrics
from healthcheck.model import GpuSnapshot, NodeSnapshot
from healthcheck.model import CRIT, INFO, NOTICE, WARNING, LogEvent, Outcome, RunOutcome

parser = pytest.importorskip("prometheus_client.parser")

DBE = ("gpus = 4\ngpu.2.ecc.volatile.uncorrected = 3\ngpu.2.serial = 1650522003802\n"
       "gpu.2.pci_bus_id = 00000000:38:00.0\n")
JOB_ENV = {"SLURM_JOB_ID": "1234", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "2"}
Sample = Tuple[str, Dict[str, str], float]


def _parse(text: str) -> Tuple[Dict[str, str], List[Sample]]:
    """(family name -> type, samples) through prometheus_client's own parser."""
    types, samples = {}, []
    for family in parser.text_string_to_metric_families(text):
        types[family.name] = family.type
        samples += [(s.name, dict(s.labels), s.value) for s in family.samples]
    return types, samples


def _value(samples: List[Sample], name: str, **labels: str) -> float:
    found = [v for n, l, v in samples if n == name and all(l.get(k) == v2 for k, v2 in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def _outcome(verdict: str = "fail", events=(), gpus=None, findings=None) -> RunOutcome:
    gpus = gpus if gpus is not None else (
        GpuSnapshot(index=0, uuid="GPU-0", serial="SN0", pci_bus_id="00000000:18:00.0",
                    ecc_volatile_corrected=0, ecc_volatile_uncorrected=0,
                    ecc_aggregate_corrected=5, ecc_aggregate_uncorrected=0,
                    remap_correctable=1, remap_uncorrectable=0, remap_pending=False,
                    remap_failure=False, retired_sbe=0, retired_dbe=0, retired_pending=False),
        GpuSnapshot(index=2, uuid="GPU-2", serial="1650522003802", pci_bus_id="00000000:38:00.0",
                    ecc_volatile_corrected=7, ecc_volatile_uncorrected=3,
                    ecc_aggregate_corrected=9, ecc_aggregate_uncorrected=3,
                    remap_correctable=0, remap_uncorrectable=2, remap_pending=True,
                    remap_failure=False),  # retired pages unsupported: no series
        GpuSnapshot(index=5, uuid="GPU-5", lost="GPU_IS_LOST"))
    report = {"verdict": verdict, "duration_s": 0.25,
              "findings": findings if findings is not None else [
                  {"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 2},
                  {"check": "gpu.lost", "severity": "fail", "gpu": 5},
                  {"check": "remap.pending", "severity": "warn", "gpu": 2}]}
    return RunOutcome(1, report, list(events), NodeSnapshot(host="gpu-a", gpus=gpus))


def test_rendered_families_names_labels_and_values():
    def ev(kind, priority, message, outcome):
        return LogEvent(kind, priority, message, {}, Outcome(outcome) if outcome else None)

    events = [ev("drain", CRIT, "drained gpu-a", "applied"),
              ev("drain", NOTICE, "already drained by gpu-healthcheck", "kept"),
              ev("drain", WARNING, "drained by someone else", "kept"),
              ev("refused", CRIT, "refused", "refused"), ev("pending", CRIT, "pending", "pending"),
              ev("resume", NOTICE, "resumed", "applied"), ev("resume", INFO, "stays drained", "kept")]
    state = update_state(empty_state(), _outcome(events=events), "epilog", now=1795978862.5)
    types, samples = _parse(render(state))
    p = "gpu_healthcheck_"
    assert _value(samples, p + "last_run_timestamp_seconds", mode="epilog") == 1795978862.5
    assert _value(samples, p + "last_run_duration_seconds", mode="epilog") == 0.25
    assert {l["verdict"]: v for n, l, v in samples if n == p + "verdict"} == {
        "pass": 0, "warn": 0, "fail": 1, "unknown": 0}
    assert _value(samples, p + "findings", mode="epilog", check="ecc.volatile_uncorrected", severity="fail") == 1
    assert _value(samples, p + "findings", mode="epilog", check="remap.pending", severity="warn") == 1
    for name in ("drains", "drain_refusals", "pending_drains", "resumes"):
        assert types[p + name] == "counter" and _value(samples, p + name + "_total") == 1
    ident = {"gpu": "2", "uuid": "GPU-2", "serial": "1650522003802", "pci_bus_id": "00000000:38:00.0"}
    assert types[p + "gpu_ecc_errors"] == "counter"
    assert _value(samples, p + "gpu_ecc_errors_total", counter="volatile", type="uncorrected", **ident) == 3
    assert _value(samples, p + "gpu_ecc_errors_total", counter="volatile", type="corrected", **ident) == 7
    assert _value(samples, p + "gpu_ecc_errors_total", counter="aggregate", type="uncorrected", **ident) == 3
    assert _value(samples, p + "gpu_ecc_errors_total", counter="aggregate", type="corrected", gpu="0") == 5
    assert _value(samples, p + "gpu_remapped_rows_total", type="uncorrectable", **ident) == 2
    assert _value(samples, p + "gpu_remapped_rows_total", type="correctable", gpu="0") == 1
    assert _value(samples, p + "gpu_remap_pending", **ident) == 1
    assert _value(samples, p + "gpu_remap_failure", **ident) == 0
    assert _value(samples, p + "gpu_retired_pages_total", cause="dbe", gpu="0") == 0
    assert not [s for s in samples if s[0] == p + "gpu_retired_pages_total" and s[1]["gpu"] == "2"]
    assert _value(samples, p + "gpu_lost", gpu="5") == 1 and _value(samples, p + "gpu_lost", gpu="2") == 0
    # a lost GPU has no counters: no made-up zeros
    assert [s for s in samples if s[1].get("gpu") == "5"] == [(p + "gpu_lost", {
        "gpu": "5", "uuid": "GPU-5", "serial": "", "pci_bus_id": ""}, 1.0)]
    assert _value(samples, p + "gpus_read_timestamp_seconds") == 1795978862.5
    every_gpu_series = [l for n, l, v in samples if n.startswith(p + "gpu_")]
    assert all({"gpu", "uuid", "serial", "pci_bus_id"} <= set(l) for l in every_gpu_series)


def test_naming_rules_promtool_checks():
    """The rules `promtool check metrics` lints, checked on the rendered text itself."""
    state = update_state(empty_state(), _outcome(), "node", now=1.0)
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


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_check_metrics_is_clean():
    text = render(update_state(empty_state(), _outcome(), "node", now=1.0))
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_a_run_without_gpus_keeps_the_last_read_and_other_modes_series():
    state = update_state(empty_state(), _outcome(verdict="pass", findings=[]), "node", now=10.0)
    state = update_state(state, _outcome(verdict="fail", gpus=(), findings=[
        {"check": "nvml.init", "severity": "fail", "gpu": None}]), "prolog", now=20.0)
    types, samples = _parse(render(state))
    assert _value(samples, "gpu_healthcheck_verdict", mode="node", verdict="pass") == 1
    assert _value(samples, "gpu_healthcheck_verdict", mode="prolog", verdict="fail") == 1
    assert _value(samples, "gpu_healthcheck_findings", mode="prolog", check="nvml.init", severity="fail") == 1
    assert _value(samples, "gpu_healthcheck_gpus_read_timestamp_seconds") == 10.0
    assert _value(samples, "gpu_healthcheck_gpu_ecc_errors_total", gpu="2", counter="volatile",
                  type="uncorrected") == 3
    assert not [s for s in samples if s[0] == "gpu_healthcheck_findings" and s[1]["mode"] == "node"]


def test_label_values_are_escaped():
    gpus = (GpuSnapshot(index=0, uuid='GPU-"q"', serial="a\\b\nc", pci_bus_id="x",
                        ecc_volatile_uncorrected=1),)
    _, samples = _parse(render(update_state(empty_state(), _outcome(gpus=gpus), "node", 1.0)))
    assert _value(samples, "gpu_healthcheck_gpu_ecc_errors_total", uuid='GPU-"q"', serial="a\\b\nc") == 1


def _pending_writer(state_dir: str, metrics_file: str) -> None:
    config = Config(state_dir=state_dir, metrics_file=metrics_file)
    write_metrics(config, _outcome(events=[LogEvent("pending", CRIT, "pending")]), "epilog")


def test_counters_persist_and_concurrent_runs_lose_no_increment(tmp_path):
    state_dir, prom = str(tmp_path / "state"), str(tmp_path / "textfile" / "gpu.prom")
    os.makedirs(os.path.dirname(prom))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_pending_writer, args=(state_dir, prom)) for _ in range(16)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    _, samples = _parse(Path(prom).read_text())
    assert _value(samples, "gpu_healthcheck_pending_drains_total") == 16
    assert not [f for f in os.listdir(os.path.dirname(prom)) if f != "gpu.prom"]  # no temp left


def test_corrupt_state_restarts_counters_with_a_note(tmp_path):
    config = Config(state_dir=str(tmp_path / "s"), metrics_file=str(tmp_path / "m.prom"))
    os.makedirs(config.state_dir, mode=0o700)
    Path(config.state_dir, "metrics-state.json").write_text("{not json")
    notes = write_metrics(config, _outcome(events=[LogEvent("refused", CRIT, "r")]), "node")
    assert notes and "corrupt" in notes[0] and "metrics-state.json" in notes[0]
    _, samples = _parse(Path(config.metrics_file).read_text())
    assert _value(samples, "gpu_healthcheck_drain_refusals_total") == 1


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
                      _outcome(), "node")
    finally:
        os.umask(old)
    assert stat.S_IMODE(textdir.stat().st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(textdir / "gpu.prom").st_mode) == 0o644
    assert not os.path.islink(textdir / "gpu.prom") and victim.read_text() == "keep"


def _fake_scontrol(path: Path, show_nodes: str) -> None:
    out = path.parent / "show-nodes.txt"
    out.write_text(show_nodes)
    path.write_text(f'#!/bin/sh\necho "$@" >> "{path.parent / "scontrol.calls"}"\n'
                    f'case "$1" in -o) cat "{out}";; esac\nexit 0\n')
    path.chmod(0o755)


def _node_line(name: str, state: str, reason: str = "") -> str:
    return (f"NodeName={name} Arch=x86_64 Gres=gpu:8 State={state} Partitions=gpu "
            f"CfgTRES=cpu=16 AllocTRES= CurrentWatts=0" + (f" Reason={reason} [root@2026-11-29T19:00:00]"
                                                           if reason else ""))


def test_metrics_through_the_cli_across_modes_and_runs(node, tmp_path):
    textdir = tmp_path / "textfile"
    textdir.mkdir(mode=0o755)
    prom = textdir / "gpu_healthcheck.prom"
    node.write_config(f'metrics_file = "{prom}"')
    assert node.run("--node", "--json").rc == 0
    assert node.run("--epilog", scenario=DBE, env=JOB_ENV).rc == 1  # scontrol missing: pending
    types, samples = _parse(prom.read_text())
    assert _value(samples, "gpu_healthcheck_verdict", mode="node", verdict="pass") == 1
    assert _value(samples, "gpu_healthcheck_verdict", mode="epilog", verdict="fail") == 1
    assert _value(samples, "gpu_healthcheck_findings", mode="epilog", check="ecc.volatile_uncorrected",
                  severity="fail") == 1
    assert _value(samples, "gpu_healthcheck_pending_drains_total") == 1
    assert _value(samples, "gpu_healthcheck_drains_total") == 0
    assert _value(samples, "gpu_healthcheck_gpu_ecc_errors_total", gpu="2", serial="1650522003802",
                  pci_bus_id="00000000:38:00.0", counter="volatile", type="uncorrected") == 3
    assert len({l["gpu"] for n, l, v in samples if n == "gpu_healthcheck_gpu_lost"}) == 4
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644

    # a real drain through (fake) scontrol, then a refusal once the budget is spent
    _fake_scontrol(node.tmp / "no-scontrol", _node_line("gpu-a", "IDLE") + "\n"
                   + "\n".join(_node_line(f"gpu-{c}", "IDLE") for c in "bcdefghij") + "\n")
    (node.state_dir / "pending-drain.json").unlink()
    assert node.run("--epilog", scenario=DBE, env=JOB_ENV).rc == 1
    _fake_scontrol(node.tmp / "no-scontrol", _node_line("gpu-a", "IDLE") + "\n"
                   + _node_line("gpu-b", "IDLE+DRAIN", "gpu-healthcheck: gpu1 xid=79 epilog") + "\n")
    node.write_config(f'metrics_file = "{prom}"\n[drain]\nmax_fraction = 0.1')
    node.run("--epilog", scenario=DBE, env=JOB_ENV)
    _, samples = _parse(prom.read_text())
    assert _value(samples, "gpu_healthcheck_drains_total") == 1
    assert _value(samples, "gpu_healthcheck_drain_refusals_total") == 1
    assert _value(samples, "gpu_healthcheck_pending_drains_total") == 1
    assert _value(samples, "gpu_healthcheck_verdict", mode="node", verdict="pass") == 1


def test_a_failing_metrics_sink_is_one_line_and_keeps_the_exit_code(node, tmp_path):
    prom = tmp_path / "no-such-dir" / "gpu.prom"
    node.write_config(f'metrics_file = "{prom}"')
    result = node.run("--epilog", scenario=DBE, env=JOB_ENV)
    assert result.rc == 1
    [line] = [l for l in result.stderr.splitlines() if "metrics sink" in l]
    assert str(prom) in line and "failed" in line
    assert (node.state_dir / "history.jsonl").exists()  # the other sinks still ran


def test_a_dropped_stale_pending_drain_is_not_counted_as_pending():
    from healthcheck.act.metrics import count_actions
    from healthcheck.model import LogEvent, Outcome
    events = [LogEvent("pending", 4, "pending drain of gpu-a dropped", {}, Outcome.DROPPED),
              LogEvent("pending", 2, "cannot drain gpu-a now", {}, Outcome.PENDING)]
    assert count_actions(events)["pending_drains"] == 1
