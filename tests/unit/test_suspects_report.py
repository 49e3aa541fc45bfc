"""What a --suspects run leaves behind (report/suspects.py): the textfile's labels are bounded
(node, kind, serial; never a job id, user or message), the history line and the state file."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from healthcheck.fleetmodel import Suspect
from healthcheck.report.cluster import format_table, rows_from_show_nodes
from healthcheck.report.suspects import (SuspectsResult, history_record, metrics_text, parse_state,
                                         state_document)
from tests.lib.metrics import parse_metrics, value_of
from tests.lib.shownodes import node_line

HOSTILE = 'x"} 1\nevil_metric{a="b'


def _black_hole(node: str = "gpu-07", jobs=("200", "201")) -> Suspect:
    return Suspect(node, "black_hole", 42.0, {"failed_fast": 6, "users": 5, "within_s": 30.0,
                                              "incidents": [{"jobs": list(jobs)}], "jobs": list(jobs)})


def _result(suspects, unknown=None) -> SuspectsResult:
    return SuspectsResult(suspects, 1795900000.0, 1795978862.5, "sacct", 46, unknown)


def test_the_textfile_has_one_series_per_suspect_with_bounded_labels():
    serial = Suspect("gpu-02", "xid_repeat", 2.5, {"xid": 31, "message": HOSTILE}, serial="1650522003802")
    text = metrics_text(_result([_black_hole(jobs=(HOSTILE, "201")), serial]), 1795978862.5)
    types, samples = parse_metrics(text)
    assert set(types) == {"gpu_healthcheck_suspect", "gpu_healthcheck_suspect_score",
                          "gpu_healthcheck_suspects_accounting_unknown",
                          "gpu_healthcheck_suspects_last_run_timestamp_seconds"}
    assert value_of(samples, "gpu_healthcheck_suspect", node="gpu-07", kind="black_hole") == 1
    assert value_of(samples, "gpu_healthcheck_suspect_score", node="gpu-07", kind="black_hole") == 42
    assert value_of(samples, "gpu_healthcheck_suspect_score", node="gpu-02", kind="xid_repeat",
                    serial="1650522003802") == 2.5
    assert value_of(samples, "gpu_healthcheck_suspects_accounting_unknown") == 0
    assert value_of(samples, "gpu_healthcheck_suspects_last_run_timestamp_seconds") == 1795978862.5
    assert "evil" not in text and "201" not in text  # evidence never reaches a label
    assert {k for _, labels, _ in samples for k in labels} <= {"node", "kind", "serial"}


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_no_evidence_ever_becomes_a_label_or_a_line(job: str, message: str):
    s = Suspect("gpu-01", "lemon", 3.0, {"failures": 9, "expected": 2.0, "jobs": 20, "p_value": 0.001,
                                         "users_in_excess": 3, "failed_jobs": [job], "message": message})
    text = metrics_text(_result([s]), 1.0)
    _, samples = parse_metrics(text)
    assert [sorted(labels.items()) for name, labels, _ in samples if name == "gpu_healthcheck_suspect"] == \
        [[("kind", "lemon"), ("node", "gpu-01")]]
    assert len(text.splitlines()) == 4 * 2 + 4  # HELP, TYPE and one sample per family


def test_no_suspects_and_unknown_accounting():
    _, samples = parse_metrics(metrics_text(_result([], unknown="sacct: slurmdbd down"), 5.0))
    assert value_of(samples, "gpu_healthcheck_suspects_accounting_unknown") == 1
    assert not [s for s in samples if s[0] == "gpu_healthcheck_suspect"]
    assert history_record(_result([], unknown="sacct: slurmdbd down"), "admin", 5.0)["verdict"] == "unknown"
    assert history_record(_result([]), "admin", 5.0)["verdict"] == "pass"


def test_the_history_line_summarises_each_suspect_in_bounded_words():
    many = [str(10_000_000 + i) for i in range(200)]
    record = history_record(_result([_black_hole(jobs=many)]), "admin", 1795978862.5)
    assert record["mode"] == "suspects" and record["verdict"] == "warn" and record["findings"] == []
    [item] = record["suspects"]
    assert (item["node"], item["kind"], item["score"]) == ("gpu-07", "black_hole", 42.0)
    assert item["evidence"].startswith("6 jobs of 5 users failed within 30 s") and len(item["evidence"]) <= 240
    assert json.loads(json.dumps(record)) == record


def test_the_state_file_feeds_the_cluster_view():
    state = parse_state(json.loads(json.dumps(state_document(_result([_black_hole("gpu-a"),
                                                                     _black_hole("gpu-z")]), 7.0))))
    assert state is not None
    lines = node_line("gpu-a", "IDLE+DRAIN", "bad fan [admin@2026-11-29T18:00:00]") + "\n" + node_line("gpu-z", "IDLE")
    rows = rows_from_show_nodes(lines, 1, state["suspects"])
    assert [(r["node"], r["suspect"]) for r in rows] == [
        ("gpu-a", [{"kind": "black_hole", "score": 42.0}]), ("gpu-z", [{"kind": "black_hole", "score": 42.0}])]
    table = format_table(rows, "2026-12-04T06:00:00+00:00, sacct")
    assert table[-4] == "suspects of the last --suspects run (2026-12-04T06:00:00+00:00, sacct):"
    assert table[-2].split() == ["gpu-a", "IDLE+DRAIN", "black_hole", "42.0", "-"]
    assert table[-1].split() == ["gpu-z", "IDLE", "black_hole", "42.0", "-"]
    assert "gpu-z" not in "\n".join(table[:-4])  # a suspect in service is no drain "not ours"
    assert parse_state({"schema": 2, "suspects": []}) is None
    assert parse_state({"schema": 1, "suspects": [{"node": 1, "kind": "x", "score": 1}]})["suspects"] == []
