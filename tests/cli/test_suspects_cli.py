"""`--suspects` and `--replay-failures` through the CLI's main() in-process: a saved sacct file,
this node's history file, the exit statuses, --act refused, the replay's table and JSON."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import List, Tuple

import pytest

from healthcheck.cli import main

HEADER = "JobIDRaw|User|State|ExitCode|Start|End|NNodes|NodeList|Partition"


def _run(capsys: pytest.CaptureFixture, *argv: str) -> Tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "config.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n{extra}')
    return str(path)


def _sacct_file(tmp_path: Path, black_hole: bool) -> str:
    lines = [HEADER]
    for i in range(40):  # ordinary work on gpu-[01-08]
        lines.append(f"{100 + i}|u{i % 5}|{'FAILED' if i % 5 == 0 else 'COMPLETED'}|0:0|2026-12-01T0{i % 8}:00:00|"
                     f"2026-12-01T0{i % 8}:50:00|2|gpu-[0{i % 4 * 2 + 1}-0{i % 4 * 2 + 2}]|gpu")
    if black_hole:
        for i, user in enumerate(["alice", "bob", "carol", "alice", "dave", "erin"]):
            lines.append(f"{200 + i}|{user}|FAILED|1:0|2026-12-01T10:{i * 3:02d}:00|2026-12-01T10:{i * 3:02d}:02|1|"
                         f"gpu-07|gpu")
    path = tmp_path / "sacct.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_suspects_names_a_black_hole_from_a_sacct_file(capsys, tmp_path: Path) -> None:
    sacct = _sacct_file(tmp_path, black_hole=True)
    rc, out, err = _run(capsys, "--suspects", "--sacct-file", sacct, "--since", "2026-11-30",
                        "--until", "2026-12-02", "--json", "--config", _config(tmp_path))
    assert rc == 1, err
    doc = json.loads(out)
    assert [(s["node"], s["kind"]) for s in doc["suspects"]] == [("gpu-07", "black_hole")]
    assert doc["suspects"][0]["evidence"]["jobs"][:2] == ["200", "201"]
    assert doc["accounting"]["unknown"] is None and doc["accounting"]["jobs"] == 46
    rc, out, _ = _run(capsys, "--suspects", "--sacct-file", sacct, "--since", "2026-11-30",
                      "--until", "2026-12-02", "--config", _config(tmp_path))
    assert rc == 1 and "gpu-07" in out and "black_hole" in out and "200,201" in out


def test_suspects_none_exits_0(capsys, tmp_path: Path) -> None:
    rc, out, _ = _run(capsys, "--suspects", "--sacct-file", _sacct_file(tmp_path, black_hole=False),
                      "--since", "2026-11-30", "--until", "2026-12-02", "--config", _config(tmp_path))
    assert rc == 0 and "no suspects" in out


def test_suspects_unreadable_accounting_is_unknown_and_names_nothing(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("sacct: error: Problem talking to the database: Connection refused\n")
    rc, out, err = _run(capsys, "--suspects", "--sacct-file", str(bad), "--json", "--config", _config(tmp_path))
    assert rc == 3
    doc = json.loads(out)
    assert doc["suspects"] == [] and "bad.txt" in doc["accounting"]["unknown"]
    assert "no node is named" in err


def test_suspects_sacct_that_fails_is_unknown(capsys, tmp_path: Path) -> None:
    sacct = tmp_path / "sacct"
    sacct.write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n")
    sacct.chmod(0o755)
    rc, out, err = _run(capsys, "--suspects", "--since", "2d", "--config",
                        _config(tmp_path, f'[suspects]\nsacct = "{sacct}"\n'))
    assert rc == 3 and "accounting storage is disabled" in out + err


def test_suspects_history_rules_read_this_node_s_history(capsys, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    lines = [json.dumps({"schema": 1, "epoch": 1796100000 + d * 3600, "node": "gpu-03", "findings": [
        {"check": "xid", "severity": "fail", "gpu": 0, "serial": "SN0", "value": 79}],
        "events": [{"kind": "repair", "priority": 5, "message": "repair gpu-03: reset GPU(s) 0 (ok)"}]})
        for d in range(5)]
    (state / "history.jsonl").write_text("\n".join(lines) + "\n")
    rc, out, _ = _run(capsys, "--suspects", "--sacct-file", _sacct_file(tmp_path, black_hole=False), "--since",
                      "2026-11-30", "--until", "2026-12-02", "--json", "--config", _config(tmp_path))
    kinds = {(s["node"], s["kind"], s.get("serial")) for s in json.loads(out)["suspects"]}
    assert rc == 1 and ("gpu-03", "remediations", None) in kinds and ("gpu-03", "serial_remediations", "SN0") in kinds


def test_suspects_act_never_acts_on_a_sacct_file(capsys, tmp_path: Path) -> None:
    rc, out, err = _run(capsys, "--suspects", "--act", "--sacct-file", _sacct_file(tmp_path, True),
                        "--config", _config(tmp_path, "[suspects]\nact = true\n"))
    assert rc == 3 and out == "" and "never on a --sacct-file" in err


def test_suspects_act_without_the_config_key_does_nothing_and_exits_3(capsys, tmp_path: Path) -> None:
    rc, out, err = _run(capsys, "--suspects", "--act", "--config", _config(tmp_path))
    assert rc == 3 and out == "" and "[suspects] act is false" in err


@pytest.mark.parametrize("argv", [["--suspects", "--since", "yesterday"], ["--suspects", "--gpus", "0"],
                                  ["--node", "--since", "2d"], ["--replay-failures", "x.csv", "--since", "2d"],
                                  ["--suspects", "--since", "1d", "--until", "2d"]])
def test_suspects_command_line_mistakes_exit_3(capsys, tmp_path: Path, argv: List[str]) -> None:
    rc, out, err = _run(capsys, *argv, "--config", _config(tmp_path))
    assert rc == 3 and out == "" and err.startswith("gpu-healthcheck: ")


def _history_csv(tmp_path: Path) -> str:
    rng = random.Random(2)
    rows = ["time,node,serial,kind"]
    for n in range(300):
        lemon = n < 6
        t0 = rng.uniform(0, 3e7)
        for k in range((12 if lemon else rng.choice([0, 0, 1, 2]))):
            t = t0 + (k * 86400 * rng.uniform(0.3, 1.2) if lemon else rng.uniform(0, 3e7))
            stamp = __import__("datetime").datetime.fromtimestamp(1.6e9 + t, __import__("datetime").timezone.utc)
            rows.append(f"{stamp.isoformat()},node{n},SN{n},{rng.choice(['dbe', 'otb', 'xid:79'])}")
    path = tmp_path / "failures.csv"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_replay_failures_json_has_every_rule_and_the_naive_one(capsys, tmp_path: Path) -> None:
    rc, out, _ = _run(capsys, "--replay-failures", _history_csv(tmp_path), "--json", "--config", _config(tmp_path))
    assert rc == 0
    doc = json.loads(out)
    names = [r["name"] for r in doc["rules"]]
    assert names == ["lemon", "serial_lemon", "xid_repeat", "node_repeat"] and doc["naive"]["name"] == "naive"
    for r in doc["rules"] + [doc["naive"]]:
        assert set(r) == {"name", "default", "flags", "hits", "precision", "recall", "suspect_node_days"}
    lemon = doc["rules"][0]
    assert lemon["default"] and lemon["flags"] >= 1
    assert lemon["precision"] >= doc["naive"]["precision"]
    assert lemon["suspect_node_days"] < doc["naive"]["suspect_node_days"]
    rc, out, _ = _run(capsys, "--replay-failures", _history_csv(tmp_path), "--config", _config(tmp_path))
    assert rc == 0 and "naive" in out and "PRECISION" in out


def test_replay_failures_bad_file_names_the_line(capsys, tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text("time,node,serial,kind\n2026-01-01T00:00:00Z,n1,SN1,melted\n")
    rc, out, err = _run(capsys, "--replay-failures", str(path), "--config", _config(tmp_path))
    assert rc == 3 and "f.csv:2" in err and "melted" in err


def test_suspects_leave_a_history_line_a_textfile_and_the_cluster_view(capsys, tmp_path: Path) -> None:
    """One --suspects run on a saved sacct file writes its history line, gpu_healthcheck_suspects.prom
    beside metrics_file (promtool's lint finds nothing), and <state_dir>/suspects.json, which
    --cluster on the same host shows with the node's state from (a stub) scontrol."""
    import subprocess

    from tests.lib.prometheus import tool
    from tests.lib.shownodes import fake_scontrol, node_line

    textdir = tmp_path / "textfile"
    textdir.mkdir()
    scontrol = tmp_path / "scontrol"
    fake_scontrol(scontrol, node_line("gpu-07", "IDLE") + "\n")
    config = _config(tmp_path, f'metrics_file = "{textdir / "gpu_healthcheck.prom"}"\n'
                               f'scontrol = "{scontrol}"\n')
    rc, _, err = _run(capsys, "--suspects", "--sacct-file", _sacct_file(tmp_path, black_hole=True),
                      "--since", "2026-11-30", "--until", "2026-12-02", "--config", config)
    assert rc == 1, err
    prom = (textdir / "gpu_healthcheck_suspects.prom").read_text()
    assert 'gpu_healthcheck_suspect{kind="black_hole",node="gpu-07"} 1' in prom
    assert "gpu_healthcheck_suspects_accounting_unknown 0" in prom and "200" not in prom
    done = subprocess.run([tool("promtool"), "check", "metrics"], input=prom, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
    [line] = (tmp_path / "state" / "history.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["mode"] == "suspects" and record["verdict"] == "warn"
    assert [(s["node"], s["kind"]) for s in record["suspects"]] == [("gpu-07", "black_hole")]
    assert "jobs 200,201" in record["suspects"][0]["evidence"]
    rc, out, err = _run(capsys, "--history", "--config", config)
    assert rc == 0 and "suspects" in out and "warn" in out, err

    rc, out, err = _run(capsys, "--cluster", "--config", config)
    assert rc == 0, err
    lines = out.splitlines()
    i = next(n for n, l in enumerate(lines) if l.startswith("suspects of the last --suspects run ("))
    row_words = lines[i + 2].split()
    assert row_words[:3] == ["gpu-07", "IDLE", "black_hole"] and row_words[4] == "-", lines
    rc, out, _ = _run(capsys, "--cluster", "--json", "--config", config)
    [row] = json.loads(out)
    assert (row["node"], row["state"], row["ours"]) == ("gpu-07", "IDLE", False)
    assert [s["kind"] for s in row["suspect"]] == ["black_hole"]
