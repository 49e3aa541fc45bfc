"""The history file through the real CLI: every run appends its line, `--history` shows it, and a
failing history sink does not change the exit code; and the appends of concurrent runs, each in
a process of its own, lose and tear nothing."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat

from healthcheck.act.history import append_line, encode
from healthcheck.report.history import read_history

DBE = ("gpus = 4\ngpu.2.ecc.volatile.uncorrected = 3\ngpu.2.serial = 1650522003802\n"
       "gpu.2.pci_bus_id = 00000000:38:00.0\n")
JOB_ENV = {"SLURM_JOB_ID": "1234", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "2"}


def test_every_cli_run_appends_a_line_and_history_shows_it(node):
    assert node.run("--node", "--json").rc == 0
    result = node.run("--epilog", "--json", scenario=DBE, env=JOB_ENV)
    assert result.rc == 1
    path = node.state_dir / "history.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first, second = [json.loads(l) for l in path.read_text().splitlines()]
    assert (first["mode"], first["verdict"], first["findings"]) == ("node", "pass", [])
    assert (second["mode"], second["job_id"], second["node"], second["verdict"]) == ("epilog", "1234", "gpu-a", "fail")
    [finding] = second["findings"]  # the info "no baseline" finding is left out
    assert finding["check"] == "ecc.volatile_uncorrected" and finding["serial"] == "1650522003802"
    assert finding["pci_bus_id"] == "00000000:38:00.0" and finding["uuid"].startswith("GPU-")
    assert second["action"]["pending"] is True and second["action"]["taken"] == "drain"
    assert any(e["kind"] == "pending" and "cannot drain gpu-a" in e["message"] for e in second["events"])
    assert isinstance(second["epoch"], float) and second["time"].endswith("+00:00")

    shown = node.run("--history", "5")
    assert shown.rc == 0, shown.stderr
    last = shown.stdout.splitlines()[-1]
    assert "epilog" in last and "1234" in last and "fail" in last and "ecc.volatile_uncorrected=3" in last
    doc = json.loads(node.run("--history", "1", "--json").stdout)
    assert len(doc) == 1 and doc[0]["job_id"] == "1234"


def test_history_file_key_and_a_failing_history_sink_do_not_change_the_exit_code(node, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    elsewhere = tmp_path / "logs"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "h.jsonl").symlink_to(victim)
    node.write_config(f'history_file = "{elsewhere / "h.jsonl"}"')
    result = node.run("--epilog", scenario=DBE, env=JOB_ENV)
    assert result.rc == 1  # as without the history sink: it drained (pending)
    assert victim.read_text() == "keep"
    [line] = [l for l in result.stderr.splitlines() if "history sink" in l]
    assert str(elsewhere / "h.jsonl") in line and "symlink" in line


def _writer(path: str, who: int, count: int) -> None:
    for n in range(count):
        # big lines, so that a torn or interleaved write would show up as a corrupt line
        append_line(path, encode({"who": who, "n": n, "pad": "y" * 3000}), 1 << 30)


def _all_at_once(jobs) -> None:
    """Run every (function, args) in its own forked process at once; each must exit 0."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=fn, args=args) for fn, args in jobs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


def test_sixteen_concurrent_writers_lose_and_interleave_nothing(tmp_path):
    path = str(tmp_path / "history.jsonl")
    _all_at_once([(_writer, (path, who, 40)) for who in range(16)])
    records, notes = read_history(path)
    assert notes == []
    assert sorted((r["who"], r["n"]) for r in records) == [(w, n) for w in range(16) for n in range(40)]


def test_concurrent_writers_with_rotation_keep_whole_lines_and_the_bound(tmp_path):
    path = str(tmp_path / "history.jsonl")
    max_bytes = 40_000

    def rotating_writer(who: int) -> None:
        for n in range(60):
            append_line(path, encode({"who": who, "n": n, "pad": "z" * 1000}), max_bytes)

    _all_at_once([(rotating_writer, (who,)) for who in range(16)])
    records, notes = read_history(path)
    assert notes == [] and records
    assert os.path.getsize(path) <= max_bytes and os.path.getsize(path + ".1") <= max_bytes
    # each writer's surviving lines are its newest ones, in order
    for who in range(16):
        mine = [r["n"] for r in records if r["who"] == who]
        assert mine == sorted(mine) and (not mine or mine[-1] == 59)
