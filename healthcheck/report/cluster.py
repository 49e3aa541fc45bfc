"""`gpu-healthcheck --cluster`: the nodes gpu-healthcheck drained, with their reasons in columns.

    rows = rows_from_show_nodes(text, max_concurrent)   # text: `scontrol -o show nodes`
    lines = format_table(rows)

commands/cluster.py makes the one `scontrol -o show nodes` call (the controller is shared; a
loop of `show node X` is not) and prints these.

    NODE   STATE       GPU  PCI               SERIAL         CHECK                     VALUE  CONTEXT  JOB  TIME                 FABRIC  REPAIR
    gpu-a  IDLE+DRAIN  2    00000000:38:00.0  1650522003802  ecc.volatile_uncorrected  3      epilog   12   2026-11-29T19:01:02  -       resetting

    not ours:
    gpu-c  IDLE+DRAIN  bad fan [admin@2026-11-29T18:00:00]

A drain the budget refused (drain.max_fraction) is noted in the node's Comment and listed in
its own section: the node still runs jobs.

FABRIC is what the fabric sweep measured on a node it drained (`busbw=41.2<100
partners=gpu-c,gpu-e`), "-" for the other drains.

REPAIR is the repair loop's state of the node (decide.repair.cluster_state: its Comment claim,
reason and state flags): resetting, rebooting, validating, rma, waiting_for_idle,
waiting_for_budget, blocked (a reset that could not run: a line below the table names what
holds the GPU), fabric_retest (a fabric drain rebooted, waiting for the next fabric sweep's
re-test), fabric_testing (in that re-test: resumed into its reservation, so listed while in
service), drained (waiting for its next check), or "-" where the loop has no part.

SUSPECTS lists the last `--suspects` run's suspects (<state_dir>/suspects.json: --suspects and
--cluster both run on the admin host), each with its node's state now:

    suspects of the last --suspects run (2026-12-04T06:00:00+00:00, sacct):
    NODE    STATE  KIND        SCORE  SERIAL
    gpu-07  IDLE   black_hole  42.0   -

--json prints a list of objects with keys node, state, gpu, pci, serial, check, value, context,
job, time, repair, fabric, ours, refused, raw_reason and suspect (ours first, then refused drains,
then the others, then the suspect nodes not drained), and held_by for a blocked repair.
`suspect` is the list of the node's suspects ({kind, score, serial?}), empty when it is none; a
suspect node that is not drained has a row of its own with ours false and raw_reason null.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

# the admin's runbook, as the packages install it (docs/runbook.md in the source)
RUNBOOK = "/usr/share/doc/gpu-healthcheck/docs/runbook.md"

COLUMNS = ("node", "state", "gpu", "pci", "serial", "check", "value", "context", "job", "time",
           "fabric", "repair")


def rows_from_show_nodes(text: str, max_concurrent: Union[int, float] = 1,
                         suspects: Sequence[Dict[str, Any]] = ()) -> List[Dict[str, Any]]:
    """Pure: one row per node drained by us or by someone else, ours first, then one per
    suspect node not drained; max_concurrent is repair.max_concurrent (whether a drained node
    waits for the repair budget); suspects: the last --suspects run's ({node, kind, score})."""
    from ..act.scontrol import parse_node_line, reason_time
    from ..decide.fabricretest import FABRIC_TESTING, parse_retest_mark
    from ..decide.repair import BLOCKED, blocked_by, cluster_state
    from ..decide.verdict import is_ours, our_comment, refused_reason, refused_time

    ours: List[Dict[str, Any]] = []
    refused: List[Dict[str, Any]] = []
    others: List[Dict[str, Any]] = []
    parsed = [(line, parse_node_line(line)) for line in text.splitlines()]
    cluster = [node for _, node in parsed if node is not None]
    for line, node in parsed:
        if node is None:
            continue
        would_have = refused_reason(node.comment)
        if would_have and not (node.drained and is_ours(node.reason)):
            # a drain the budget refused: the node runs jobs, its Comment says why it should not
            row = _our_row(node.name, node.state, would_have, node.comment)
            row["time"] = refused_time(node.comment)
            row["refused"] = True
            refused.append(row)
        retest = parse_retest_mark(node.comment)
        if not node.drained and retest is not None and retest.state == FABRIC_TESTING:
            # resumed into the fabric sweep's re-test reservation (or left there by a killed sweep)
            row = dict.fromkeys(COLUMNS)
            row.update(node=node.name, state=node.state, check="fabric", repair=FABRIC_TESTING,
                       raw_reason=our_comment(node.comment), ours=True, refused=False)
            ours.append(row)
            continue
        if not node.reason or not node.drained:
            # a reason on a node in service is a note, or a leftover: Slurm 24.11 keeps the
            # last reason after State=RESUME (tested; 22.05 clears it)
            continue
        if is_ours(node.reason):
            row = _our_row(node.name, node.state, node.reason, node.reason)
            row["time"] = reason_time(line)
            row["repair"] = cluster_state(node, cluster, max_concurrent)
            if row["repair"] == BLOCKED:
                row["held_by"] = blocked_by(node)
            ours.append(row)
        else:
            row = dict.fromkeys(COLUMNS)
            row.update(node=node.name, state=node.state, time=reason_time(line),
                       raw_reason=node.reason, ours=False, refused=False)
            others.append(row)
    return _with_suspects(ours + refused + others, {n.name: n.state for n in cluster}, suspects)


def _with_suspects(rows: List[Dict[str, Any]], states: Dict[str, str],
                   suspects: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    by_node: Dict[str, List[Dict[str, Any]]] = {}
    for s in suspects:
        by_node.setdefault(s["node"], []).append(
            {k: s[k] for k in ("kind", "score", "serial") if k in s})
    for row in rows:
        row["suspect"] = by_node.pop(row["node"], [])
    for name, found in by_node.items():
        # a suspect in service (or unknown to the controller now): its own row
        row = dict.fromkeys(COLUMNS)
        row.update(node=name, state=states.get(name, "?"), ours=False, refused=False, raw_reason=None,
                   suspect=found)
        rows.append(row)
    return rows


def _our_row(name: str, state: str, reason: str, raw: Optional[str]) -> Dict[str, Any]:
    from ..decide.sweep import fabric_columns
    from ..decide.verdict import parse_reason

    row: Dict[str, Any] = dict.fromkeys(COLUMNS)
    fabric = fabric_columns(reason)
    if fabric is not None:
        # the fabric sweep's drain: no GPU of its own; what it measured, and with whom
        row.update(node=name, state=state, raw_reason=raw, ours=True, refused=False, check="fabric",
                   value=fabric.split()[0], fabric=fabric)
        return row
    parsed = (parse_reason(reason) if _fully_parsed(reason) else None) or {}
    row.update(node=name, state=state, raw_reason=raw, ours=True, refused=False,
               gpu=parsed.get("gpu"), pci=parsed.get("pci"), serial=parsed.get("serial"),
               check=parsed.get("check"), value=parsed.get("value"),
               context=parsed.get("context"), job=parsed.get("job"))
    return row


def _fully_parsed(reason: str) -> bool:
    """Whether verdict.REASON_RE explains the whole reason.  Its match is loose (a free-text
    reason after our prefix still yields a "check"), so columns from a partial match would
    mislead; a reason cut at Slurm's 255 bytes may end mid-token and still counts."""
    import re

    from ..decide.verdict import MAX_REASON_BYTES, REASON_RE

    m = re.match(REASON_RE, reason)
    if m is None:
        return False
    return m.end() == len(reason.rstrip()) or len(reason.encode()) >= MAX_REASON_BYTES - 5


def _columns(rows: List[Dict[str, Any]]) -> List[str]:
    table = [tuple(c.upper() for c in COLUMNS)]
    table += [tuple("-" if r[c] is None else str(r[c]) for c in COLUMNS) for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(t[i].ljust(widths[i]) for i in range(len(COLUMNS))).rstrip() for t in table]
    # a reason we could not split into columns (older version, truncated) is still shown
    return (lines + [f"  {r['node']}: {r['raw_reason']}" for r in rows if r["check"] is None]
            + [f"  {r['node']}: repair blocked by {r['held_by']}" for r in rows if r.get("held_by")])


def format_table(rows: List[Dict[str, Any]], suspects_from: Optional[str] = None) -> List[str]:
    """suspects_from: when and from what the last --suspects run read, heading its section
    (None: no --suspects run recorded on this host, and no section)."""
    ours = [r for r in rows if r["ours"] and not r.get("refused")]
    refused = [r for r in rows if r.get("refused")]
    others = [r for r in rows if not r["ours"] and r["raw_reason"] is not None]
    lines: List[str] = []
    if ours:
        lines += _columns(ours)
    else:
        lines.append("no nodes drained by gpu-healthcheck")
    if refused:
        lines.append("")
        lines.append("drains refused by drain.max_fraction (these nodes still run jobs):")
        lines += _columns(refused)
    if others:
        lines.append("")
        lines.append("not ours:")
        width = max(len(r["node"]) for r in others)
        swidth = max(len(r["state"]) for r in others)
        for r in others:
            when = f" [{r['time']}]" if r["time"] else ""
            lines.append(f"{r['node'].ljust(width)}  {r['state'].ljust(swidth)}  {r['raw_reason']}{when}")
    if suspects_from is not None:
        lines += [""] + _suspect_lines(rows, suspects_from)
    return lines


def _suspect_lines(rows: List[Dict[str, Any]], suspects_from: str) -> List[str]:
    table = [("NODE", "STATE", "KIND", "SCORE", "SERIAL")]
    table += [(r["node"], r["state"], str(s["kind"]), f"{float(s['score']):.1f}", str(s.get("serial") or "-"))
              for r in rows for s in r.get("suspect") or ()]
    if len(table) == 1:
        return [f"no suspects in the last --suspects run ({suspects_from})"]
    widths = [max(len(t[i]) for t in table) for i in range(5)]
    return ([f"suspects of the last --suspects run ({suspects_from}):"]
            + ["  ".join(t[i].ljust(widths[i]) for i in range(5)).rstrip() for t in table])
