"""The RMA evidence's own process (python -m healthcheck.act.evidence) where systemd-run is
absent: a detached process of its own runs nvidia-bug-report.sh (a fake) within its deadline and
records the result in the history when it ends."""

from __future__ import annotations

import json
import time

from healthcheck.act.evidence import start_bug_report
from healthcheck.config import load_config


def history_events(path):
    if not path.exists():
        return []
    return [e for line in path.read_text().splitlines() for e in json.loads(line).get("events", [])]


def wait_for(condition, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def test_without_systemd_run_a_detached_process_gathers_the_report_within_its_deadline(tmp_path):
    state = tmp_path / "state"
    report = tmp_path / "nvidia-bug-report.sh"
    report.write_text("#!/bin/sh\necho $$ > ../report.pid\nexec sleep 3600\n")  # hangs, as a stuck one does
    report.chmod(0o755)
    config_file = tmp_path / "config.toml"
    config_file.write_text(f'state_dir = "{state}"\njournal = false\n[repair]\nbug_report = "{report}"\n'
                           f'bug_report_timeout_s = 1\nsystemd_run = "{tmp_path / "no-systemd-run"}"\n')
    config = load_config(str(config_file), {})
    events = []
    how = start_bug_report(config, "gpu-a", events)
    assert how is not None and how.startswith("detached process ") and "no-systemd-run" in how, (how, events)
    history = state / "history.jsonl"
    [result] = wait_for(lambda: [e["message"] for e in history_events(history)
                                 if "RMA evidence" in e["message"]], "the evidence's result")
    assert "ran past repair.bug_report_timeout_s = 1 s: ended" in result, result
    pid = int((state / "report.pid").read_text())
    wait_for(lambda: not _alive(pid), "the hung report to be ended")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
