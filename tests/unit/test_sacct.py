"""read/sacct.py: the parser on any header order (property-tested), and the door's unknowns
(sacct missing, its error exit, a piece past the output cap) with a stand-in sacct program."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path
from typing import List

from hypothesis import given, settings
from hypothesis import strategies as st

from healthcheck.configsections import SuspectsConfig
from healthcheck.read.sacct import COLUMNS, SacctFormatError, parse_sacct, read_accounting, read_sacct_file

HEADER = "|".join(COLUMNS)


def _t(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def test_sacct_parse_reads_columns_in_any_order_and_ignores_others() -> None:
    text = ("Partition|NodeList|State|JobIDRaw|End|ExitCode|Start|User|NNodes|Elapsed\n"
            "gpu|gpu-[01-03,07]|CANCELLED by 1000|42|2026-12-01T10:00:05|0:15|2026-12-01T10:00:00|alice|4|00:00:05\n")
    jobs, notes = parse_sacct(text, "t")
    assert notes == []
    assert len(jobs) == 1
    job = jobs[0]
    assert (job.job_id, job.user, job.state, job.exit_code) == ("42", "alice", "CANCELLED", "0:15")
    assert job.nodes == ("gpu-01", "gpu-02", "gpu-03", "gpu-07")
    assert job.end - job.start == 5


def test_sacct_parse_leaves_out_steps_jobs_not_started_or_not_ended() -> None:
    text = (HEADER + "\n"
            "1|a|FAILED|1:0|2026-12-01T10:00:00|2026-12-01T10:00:01|1|n1\n"
            "1.batch||FAILED|1:0|2026-12-01T10:00:00|2026-12-01T10:00:01|1|n1\n"
            "2|a|PENDING|0:0|Unknown|Unknown|1|None assigned\n"
            "3|a|RUNNING|0:0|2026-12-01T10:00:00|Unknown|1|n2\n"
            "4|a|CANCELLED by 0|0:0|None|2026-12-01T10:00:00|1|None assigned\n")
    jobs, notes = parse_sacct(text, "t")
    assert [j.job_id for j in jobs] == ["1"] and notes == []


def test_sacct_parse_missing_column_names_it_and_the_source() -> None:
    try:
        parse_sacct("JobIDRaw|User|State|ExitCode|Start|End|NNodes\n1|a|FAILED|1:0|x|y|1\n", "saved.txt")
    except SacctFormatError as exc:
        assert "saved.txt" in str(exc) and "NodeList" in str(exc)
    else:
        raise AssertionError("a header without NodeList was accepted")


def test_sacct_parse_a_line_with_the_wrong_field_count_is_a_note_naming_the_line() -> None:
    jobs, notes = parse_sacct(HEADER + "\n1|a|FAILED\n2|b|FAILED|1:0|2026-12-01T10:00:00|"
                              "2026-12-01T10:00:01|1|n1\n", "f.txt")
    assert [j.job_id for j in jobs] == ["2"]
    assert notes and notes[0].startswith("f.txt:2:")


def test_sacct_parse_a_bad_hostlist_is_a_note_not_a_crash() -> None:
    jobs, notes = parse_sacct(HEADER + "\n1|a|FAILED|1:0|2026-12-01T10:00:00|2026-12-01T10:00:01|1|n[1-\n", "f")
    assert jobs == [] and len(notes) == 1 and "n[1-" in notes[0]


_names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
_job = st.tuples(st.integers(1, 10**9), _names, st.sampled_from(["FAILED", "NODE_FAIL", "COMPLETED", "TIMEOUT"]),
                 st.integers(0, 10**6), st.integers(0, 10**5),
                 st.lists(st.integers(0, 999), min_size=1, max_size=20, unique=True))


@settings(max_examples=60, deadline=None)
@given(jobs=st.lists(_job, max_size=12, unique_by=lambda j: j[0]), order=st.permutations(list(COLUMNS)),
       extra=st.lists(st.sampled_from(["Partition", "Elapsed", "Account", "QOS"]), unique=True))
def test_sacct_parse_round_trips_any_column_order(jobs: List[tuple], order: List[str], extra: List[str]) -> None:
    header = list(order) + extra
    base = _t("2026-11-01T00:00:00")
    lines = ["|".join(header)]
    for job_id, user, state, start, length, nums in jobs:
        nodes = sorted(f"gpu-{n:03d}" for n in nums)
        from ClusterShell.NodeSet import NodeSet

        values = {"JobIDRaw": str(job_id), "User": user, "State": state, "ExitCode": "1:0",
                  "Start": datetime.datetime.fromtimestamp(base + start).strftime("%Y-%m-%dT%H:%M:%S"),
                  "End": datetime.datetime.fromtimestamp(base + start + length).strftime("%Y-%m-%dT%H:%M:%S"),
                  "NNodes": str(len(nodes)), "NodeList": str(NodeSet.fromlist(nodes)),
                  "Partition": "gpu", "Elapsed": "1", "Account": "x", "QOS": "normal"}
        lines.append("|".join(values[h] for h in header))
    got, notes = parse_sacct("\n".join(lines) + "\n", "prop")
    assert notes == []
    assert [(j.job_id, j.user, j.state, j.end - j.start, j.nodes) for j in got] == [
        (str(i), u, s, float(n), tuple(sorted(f"gpu-{x:03d}" for x in nums))) for i, u, s, _, n, nums in jobs]


@settings(max_examples=200, deadline=None)
@given(head=st.booleans(), body=st.lists(st.one_of(st.sampled_from(list(COLUMNS) + ["None", "Unknown"]),
                                                  st.text(alphabet="|\n-[],:.0123456789abT ", max_size=20)),
                                        max_size=40))
def test_sacct_parse_garbage_is_a_format_error_or_notes_never_another_exception(head: bool, body: List[str]) -> None:
    try:
        parse_sacct((HEADER + "\n" if head else "") + "".join(body), "fuzz")
    except SacctFormatError:
        pass


def _stand_in(tmp_path: Path, body: str) -> str:
    """An executable in place of sacct: what the door must handle, not a model of our code."""
    path = tmp_path / "sacct"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_sacct_door_accounting_disabled_is_unknown_in_sacct_s_own_words(tmp_path: Path) -> None:
    sacct = _stand_in(tmp_path, 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1\n')
    acct = read_accounting(SuspectsConfig(sacct=sacct), {}, _t("2026-12-01T00:00:00"), _t("2026-12-02T00:00:00"))
    assert acct.jobs == () and acct.unknown and "accounting storage is disabled" in acct.unknown


def test_sacct_door_missing_sacct_is_unknown(tmp_path: Path) -> None:
    acct = read_accounting(SuspectsConfig(sacct=str(tmp_path / "nope")), {}, 0.0, 86400.0)
    assert acct.unknown and "not found" in acct.unknown


def test_sacct_door_empty_output_is_unknown_not_no_jobs(tmp_path: Path) -> None:
    acct = read_accounting(SuspectsConfig(sacct=_stand_in(tmp_path, "exit 0\n")), {}, 0.0, 86400.0)
    assert acct.unknown and "empty" in acct.unknown


def test_sacct_door_reads_a_long_window_in_pieces_and_keeps_each_job_once(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    line = "7|alice|FAILED|1:0|2026-12-01T10:00:00|2026-12-01T10:00:01|1|gpu-01"
    sacct = _stand_in(tmp_path, f'echo "$@" >> {log}\necho "{HEADER}"\necho "{line}"\n')
    acct = read_accounting(SuspectsConfig(sacct=sacct), {}, _t("2026-12-01T00:00:00"), _t("2026-12-04T00:00:00"))
    calls = log.read_text().splitlines()
    assert acct.unknown is None and [j.job_id for j in acct.jobs] == ["7"]
    assert len(calls) == 3
    assert all("-a -X --parsable2" in c and "--starttime" in c and "--endtime" in c for c in calls)
    assert "--starttime 2026-12-02T00:00:00 --endtime 2026-12-03T00:00:00" in calls[1]


def test_sacct_door_a_piece_past_the_cap_is_split_then_unknown(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    sacct = _stand_in(tmp_path, f'echo "$@" >> {log}\necho "{HEADER}"\nhead -c 200000 /dev/zero | tr "\\0" x\n')
    acct = read_accounting(SuspectsConfig(sacct=sacct, sacct_max_bytes=1 << 16), {}, 0.0, 86400.0)
    assert acct.unknown and "sacct_max_bytes" in acct.unknown
    assert len(log.read_text().splitlines()) > 2  # halves were asked for before giving up


def test_sacct_file_unreadable_is_unknown_naming_the_file(tmp_path: Path) -> None:
    acct = read_sacct_file(str(tmp_path / "missing.txt"))
    assert acct.unknown and "missing.txt" in acct.unknown
    (tmp_path / "bad.txt").write_text("JobID|User\n1|a\n")
    acct = read_sacct_file(str(tmp_path / "bad.txt"))
    assert acct.unknown and "NodeList" in acct.unknown
    assert os.path.exists(tmp_path / "bad.txt")


def test_sacct_parse_without_clustershell_is_unknown_naming_the_package(monkeypatch) -> None:
    """A site without ClusterShell: a bracketed NodeList cannot be expanded, and skipping every
    multi-node job would leave statistics of single-node jobs alone, so the answer is unknown."""
    import sys
    monkeypatch.setitem(sys.modules, "ClusterShell.NodeSet", None)  # import fails as if absent
    text = HEADER + "\n" + "|".join(("42", "alice", "FAILED", "1:0", "2026-12-01T10:00:00",
                                      "2026-12-01T10:00:05", "2", "gpu-[01-02]")) + "\n"
    try:
        parse_sacct(text, "t")
    except SacctFormatError as exc:
        assert "python3-clustershell" in str(exc) and "gpu-[01-02]" in str(exc)
    else:
        raise AssertionError("a bracketed NodeList without ClusterShell was read")
    # a plain list needs no ClusterShell
    jobs, notes = parse_sacct(text.replace("gpu-[01-02]", "gpu-01,gpu-02"), "t")
    assert [j.nodes for j in jobs] == [("gpu-01", "gpu-02")] and notes == []


# ------------------------------------------------------------------ regressions found by fuzzing

def _line(nodelist: str) -> str:
    return HEADER + "\n1|a|FAILED|1:0|2026-12-01T10:00:00|2026-12-01T10:00:01|2|" + nodelist + "\n"


def test_regression_sacct_nodelist_digits_beside_the_bracket_are_refused() -> None:
    """fuzz_sacct (corpus/sacct/regress-digit-beside-bracket): NodeSet reads the digits beside a
    bracket into its numbers ("7[1-12]x" is [71-712]x, "888[841-1275]" eight million names, held
    at once), and the reader's own path for the one-bracket form read them as a prefix.  Slurm
    never writes a digit there (its number is every trailing digit): the line is a note."""
    for nodelist in ("7[1-12]x", "p[0-10]0-", "888[841-1275]M"):
        jobs, notes = parse_sacct(_line(nodelist), "t")
        assert jobs == [] and len(notes) == 1 and repr(nodelist) in notes[0], (nodelist, notes)


def test_regression_sacct_text_and_file_split_lines_alike(tmp_path: Path) -> None:
    """fuzz_sacct (corpus/sacct/regress-vertical-tab): str.splitlines also ends a line at a
    vertical tab or form feed, a file does not, so --sacct-file and sacct's own output read the
    same bytes differently."""
    text = _line("n1").replace("|a|", "|a\x0bb|") + "2|c\x0c|FAILED|1:0|2026-12-01T10:00:00|2026-12-01T10:00:01|1|n2\n"
    path = tmp_path / "s.txt"
    path.write_text(text)
    jobs, _ = parse_sacct(text, "t")
    assert [j.user for j in jobs] == ["a\x0bb", "c\x0c"]
    assert [j.user for j in read_sacct_file(str(path)).jobs] == ["a\x0bb", "c\x0c"]
