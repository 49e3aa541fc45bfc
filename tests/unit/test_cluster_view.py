"""`gpu-healthcheck --cluster`'s pure parts on literal `scontrol -o show nodes` lines (Slurm 22.05
format): rows, order and table."""

from __future__ import annotations

from healthcheck.report.cluster import COLUMNS, rows_from_show_nodes
from tests.lib.shownodes import GPU_A, GPU_D, SHOW_NODES


def test_our_reason_is_split_into_columns_with_slurms_time():
    [row] = rows_from_show_nodes(GPU_A)
    assert row == {"node": "gpu-a", "state": "IDLE+DRAIN", "gpu": "2", "pci": "00000000:38:00.0",
                   "serial": "1650522003802", "check": "ecc.volatile_uncorrected", "value": "3",
                   "context": "epilog", "job": "12", "time": "2026-11-29T19:01:02", "repair": "drained",
                   "fabric": None, "ours": True, "refused": False, "suspect": [],
                   "raw_reason": "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=1650522003802 "
                                 "ecc.volatile_uncorrected=3 epilog job=12"}


def test_ours_come_first_then_others_drained_and_healthy_nodes_are_left_out():
    rows = rows_from_show_nodes(SHOW_NODES)
    assert [(r["node"], r["ours"]) for r in rows] == [
        ("gpu-a", True), ("gpu-b", True), ("gpu-f", True), ("gpu-c", False), ("gpu-e", False)]
    b = rows[1]
    assert (b["gpu"], b["check"], b["value"], b["context"], b["job"], b["time"]) == (
        "5", "remap.failure", "1", "node", None, "2026-11-29T19:05:00")
    c = rows[3]
    assert c["raw_reason"] == "bad fan, ticket 4711" and c["time"] == "2026-11-29T18:30:00"
    assert c["check"] is None and c["gpu"] is None


def test_table_has_the_columns_and_a_not_ours_section():
    lines = _table(SHOW_NODES)
    assert lines[0].split() == [c.upper() for c in COLUMNS]
    assert lines[1].split() == ["gpu-a", "IDLE+DRAIN", "2", "00000000:38:00.0", "1650522003802",
                                "ecc.volatile_uncorrected", "3", "epilog", "12", "2026-11-29T19:01:02",
                                "-", "drained"]
    assert lines[2].split()[:7] == ["gpu-b", "MIXED+DRAIN", "5", "00000000:9A:00.0",
                                    "1650522003805", "remap.failure", "1"]
    # a reason of ours we cannot split still shows whole
    assert any("gpu-f: gpu-healthcheck: written by a future version" in l for l in lines)
    tail = lines[lines.index("not ours:") + 1:]
    assert tail[0].split()[:2] == ["gpu-c", "IDLE+DRAIN"] and "bad fan, ticket 4711" in tail[0]
    assert tail[1].startswith("gpu-e") and "Not responding" in tail[1]
    assert not any("gpu-d" in l or "gpu-g" in l for l in lines)


def test_no_drained_nodes_says_so():
    assert _table(GPU_D + "\n") == ["no nodes drained by gpu-healthcheck"]
    assert _table("") == ["no nodes drained by gpu-healthcheck"]


def test_garbled_output_is_not_a_crash():
    assert rows_from_show_nodes("garbage\n\x00\nNodeName=\n") == []


def _table(text: str) -> list:
    from healthcheck.report.cluster import format_table

    return format_table(rows_from_show_nodes(text))
