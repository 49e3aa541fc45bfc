"""`--cluster`'s REPAIR column and JSON field on literal `scontrol -o show nodes` lines."""

from __future__ import annotations

from healthcheck.report.cluster import COLUMNS, format_table, rows_from_show_nodes
from tests.lib.shownodes import node_line

OURS = "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=1650522003802 ecc.volatile_uncorrected=3 epilog job=12"
CLAIM = " Comment=gpu-healthcheck: repair resetting gpus=2 at=2027-01-15T08:00:00Z"
LINES = "\n".join([
    node_line("gpu-a", "IDLE+DRAIN", OURS + " [root@2026-11-29T19:01:02]") + CLAIM,
    node_line("gpu-b", "IDLE+DRAIN", OURS + " [root@2026-11-29T19:02:02]"),
    node_line("gpu-c", "IDLE+DRAIN", "bad fan [admin@2026-11-29T18:00:00]"),
    node_line("gpu-d", "IDLE"),
]) + "\n"


def test_cluster_repair_column_from_the_claim_and_the_budget():
    rows = {r["node"]: r for r in rows_from_show_nodes(LINES)}
    assert (rows["gpu-a"]["repair"], rows["gpu-b"]["repair"], rows["gpu-c"]["repair"]) == (
        "resetting", "waiting_for_budget", None)
    assert rows_from_show_nodes(LINES, max_concurrent=2)[1]["repair"] == "drained"
    # a share: 50 % of the 4 GPU nodes is 2, so gpu-b may repair once its check comes
    assert rows_from_show_nodes(LINES, max_concurrent=0.5)[1]["repair"] == "drained"
    table = format_table(rows_from_show_nodes(LINES))
    assert table[0].split() == [c.upper() for c in COLUMNS] and COLUMNS[-1] == "repair"
    assert table[1].split()[-1] == "resetting" and table[2].split()[-1] == "waiting_for_budget"


def test_cluster_repair_column_blocked_names_what_holds_the_gpu():
    blocked = " Comment=gpu-healthcheck: repair blocked gpus=2 at=2027-01-15T08:00:00+00:00 by=nv-hostengine_pid_4242"
    lines = node_line("gpu-a", "IDLE+DRAIN", OURS + " [root@2026-11-29T19:01:02]") + blocked + "\n"
    [row] = rows_from_show_nodes(lines)
    assert (row["repair"], row["held_by"]) == ("blocked", "nv-hostengine_pid_4242")
    table = format_table([row])
    assert table[1].split()[-1] == "blocked" and table[-1] == "  gpu-a: repair blocked by nv-hostengine_pid_4242"
    # resumed since: the stale mark is no repair state, and no holder is shown
    back = node_line("gpu-a", "IDLE") + blocked + "\n"
    assert rows_from_show_nodes(back) == []
    # marked rma since: rma, not blocked
    rma = OURS.replace("=3 epilog", "=3 rma epilog")
    [row] = rows_from_show_nodes(node_line("gpu-a", "IDLE+DRAIN", rma + " [root@2026-11-29T19:01:02]") + blocked + "\n")
    assert row["repair"] == "rma" and "held_by" not in row
