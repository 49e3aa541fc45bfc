"""What `--fabric-sweep` prints: a table for a person, or one JSON document with --json.

    NODE   OUTCOME    BUSBW  PARTNERS       ACTION   WHY
    gpu-c  bad        41.2   gpu-a,gpu-e    applied  busbw=41.2<100
    gpu-d  transient  41.2   gpu-a,gpu-f    -        busbw=41.2<100; passed with gpu-a,gpu-f
    sweep 20261203T090000-login-4242: 8 nodes, 3 rounds, 7 jobs, median busbw 380.0 GB/s

JSON: {"schema": 1, "mode": "fabric-sweep", "sweep_id", "rounds", "jobs", "median_gbps",
"nodes": [{"node", "outcome", "busbw_gbps", "partners", "why", "action", "reason", "retest"}],
"not_swept": {node: why}, "jobs_run": [{"nodes", "kind", "round", "job_id", "busbw_gbps",
"problem", "skipped", "rails"}], "error"}.  Nodes that passed are in "nodes" too; the table
lists only the others, and the nodes re-tested after the repair loop's reboot ("retest": true,
action resumed | drained | rma | kept, decide/fabricretest.py) whatever their outcome.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, TextIO

from ..decide.sweep import PASS

if TYPE_CHECKING:
    from ..decide.sweep import SweepReport


def document(report: "SweepReport") -> Dict[str, Any]:
    outcome = report.outcome
    nodes = []
    for n in outcome.nodes if outcome else ():
        taken, reason = report.actions.get(n.node, (None, None))
        nodes.append({"node": n.node, "outcome": n.outcome, "busbw_gbps": n.busbw_gbps,
                      "partners": list(n.partners), "why": n.why, "action": taken, "reason": reason,
                      "retest": n.node in report.retested})
    jobs = [{"nodes": list(r.job.nodes), "kind": r.job.kind, "round": r.job.round, "job_id": r.job_id,
             "busbw_gbps": r.busbw_gbps, "problem": r.problem, "skipped": r.skipped,
             "rails": [{"node": x.node, "hca": x.hca, "gbps": x.gbps, "problem": x.problem} for x in r.rails]}
            for r in (outcome.results if outcome else ())]
    return {"schema": 1, "mode": "fabric-sweep", "sweep_id": report.sweep_id,
            "rounds": outcome.rounds if outcome else 0, "jobs": outcome.jobs if outcome else 0,
            "median_gbps": outcome.median_gbps if outcome else None, "nodes": nodes,
            "not_swept": report.not_candidates, "jobs_run": jobs, "error": report.error}


def table(report: "SweepReport") -> List[str]:
    doc = document(report)
    rows = [("NODE", "OUTCOME", "BUSBW", "PARTNERS", "ACTION", "WHY")]
    for n in doc["nodes"]:
        if n["outcome"] == PASS and not n["retest"]:
            continue
        rows.append((n["node"], n["outcome"], "-" if n["busbw_gbps"] is None else f"{n['busbw_gbps']:.1f}",
                     ",".join(n["partners"]) or "-", n["action"] or "-", n["why"] or "-"))
    lines = []
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = ["  ".join([*(r[i].ljust(widths[i]) for i in range(len(widths))), r[-1]]).rstrip()
                 for r in rows]
    else:
        lines = ["every node passed" if report.outcome else "the sweep did not finish"]
    for node, why in sorted(report.not_candidates.items()):
        lines.append(f"not swept: {node}: {why}")
    for job in doc["jobs_run"]:
        if job["skipped"]:
            lines.append(f"skipped: {','.join(job['nodes'])}: {job['skipped']}")
    median = doc["median_gbps"]
    lines.append(f"sweep {report.sweep_id}: {len(doc['nodes'])} nodes, {doc['rounds']} rounds, "
                 f"{doc['jobs']} jobs, median busbw " + ("-" if median is None else f"{median:.1f} GB/s"))
    if report.error:
        lines.append(f"stopped: {report.error}")
    return lines


def write_report(report: "SweepReport", as_json: bool, out: TextIO) -> None:
    if as_json:
        json.dump(document(report), out, indent=2)
        out.write("\n")
    else:
        out.write("\n".join(table(report)) + "\n")
    out.flush()
