"""node_exporter textfile metrics through the real CLI across modes and runs, and the rendered
text under `promtool check metrics`."""

from __future__ import annotations

import multiprocessing
import os
import stat
import subprocess
from pathlib import Path

import pytest

from healthcheck.act.metrics import empty_state, render, update_state, write_metrics
from healthcheck.config import Config
from healthcheck.model import CRIT, LogEvent
from tests.lib.metrics import parse_metrics, run_outcome, value_of
from tests.lib.prometheus import tool

DBE = ("gpus = 4\ngpu.2.ecc.volatile.uncorrected = 3\ngpu.2.serial = 1650522003802\n"
       "gpu.2.pci_bus_id = 00000000:38:00.0\n")
JOB_ENV = {"SLURM_JOB_ID": "1234", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "2"}


def test_promtool_check_metrics_is_clean():
    text = render(update_state(empty_state(), run_outcome(), "node", now=1.0))
    done = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_promtool_check_metrics_is_clean_with_a_blocked_repair():
    from healthcheck.model import LogEvent

    blocked = LogEvent("repair", 3, "repair gpu-a: repair blocked: ...", {
        "GPU_HEALTHCHECK_REPAIR_STEP": "reset_blocked", "GPU_HEALTHCHECK_REPAIR_ACTION": "reset",
        "GPU_HEALTHCHECK_REPAIR_STATE": "blocked", "GPU_HEALTHCHECK_REPAIR_BLOCKED": "in_use",
        "GPU_HEALTHCHECK_REPAIR_HELD_BY": "nv-hostengine pid 4242"})
    text = render(update_state(empty_state(), run_outcome(events=[blocked]), "node", now=1.0))
    assert 'gpu_healthcheck_repairs_blocked_total{action="reset",cause="in_use"} 1' in text, text
    assert 'gpu_healthcheck_repair_state{state="blocked"} 1' in text
    done = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


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
    types, samples = parse_metrics(prom.read_text())
    assert value_of(samples, "gpu_healthcheck_verdict", mode="node", verdict="pass") == 1
    assert value_of(samples, "gpu_healthcheck_verdict", mode="epilog", verdict="fail") == 1
    assert value_of(samples, "gpu_healthcheck_findings", mode="epilog", check="ecc.volatile_uncorrected",
                    severity="fail") == 1
    assert value_of(samples, "gpu_healthcheck_pending_drains_total") == 1
    assert value_of(samples, "gpu_healthcheck_drains_total") == 0
    assert value_of(samples, "gpu_healthcheck_gpu_ecc_errors_total", gpu="2", serial="1650522003802",
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
    _, samples = parse_metrics(prom.read_text())
    assert value_of(samples, "gpu_healthcheck_drains_total") == 1
    assert value_of(samples, "gpu_healthcheck_drain_refusals_total") == 1
    assert value_of(samples, "gpu_healthcheck_pending_drains_total") == 1
    assert value_of(samples, "gpu_healthcheck_verdict", mode="node", verdict="pass") == 1


def test_a_failing_metrics_sink_is_one_line_and_keeps_the_exit_code(node, tmp_path):
    prom = tmp_path / "no-such-dir" / "gpu.prom"
    node.write_config(f'metrics_file = "{prom}"')
    result = node.run("--epilog", scenario=DBE, env=JOB_ENV)
    assert result.rc == 1
    [line] = [l for l in result.stderr.splitlines() if "metrics sink" in l]
    assert str(prom) in line and "failed" in line
    assert (node.state_dir / "history.jsonl").exists()  # the other sinks still ran


def _pending_writer(state_dir: str, metrics_file: str) -> None:
    config = Config(state_dir=state_dir, metrics_file=metrics_file)
    write_metrics(config, run_outcome(events=[LogEvent("pending", CRIT, "pending")]), "epilog")


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
    _, samples = parse_metrics(Path(prom).read_text())
    assert value_of(samples, "gpu_healthcheck_pending_drains_total") == 16
    assert not [f for f in os.listdir(os.path.dirname(prom)) if f != "gpu.prom"]  # no temp left
