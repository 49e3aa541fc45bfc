"""What `--internode-sweep` prints: a table for a person, or one JSON document with --json.

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

What a sweep leaves behind (commands/internodesweep.py writes them):

    history_record(report, events, now)  -> the --history line ("mode": "fabric-sweep")
    metrics_text(report, now)            -> gpu_healthcheck_fabric.prom's text

Metrics (node_exporter's textfile collector reads every *.prom of its folder):
    gpu_healthcheck_fabric_busbw_gbps{node,partner}      the last bus bandwidth of each job a
                                                         node ran with a partner (GB/s)
    gpu_healthcheck_fabric_sweep_nodes{outcome}          nodes by outcome (bad, transient, ...)
    gpu_healthcheck_fabric_sweep_node_outcome{node,outcome}  1 per node the last sweep judged,
                                                         with its outcome (the mixin counts a
                                                         bad one out of the healthy nodes)
    gpu_healthcheck_fabric_sweep_rounds, _jobs           the last sweep's rounds and jobs
    gpu_healthcheck_fabric_sweep_last_run_timestamp_seconds
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Sequence, TextIO, Tuple

from ..decide.sweep import BAD, PASS, SKIPPED, TRANSIENT, UNKNOWN
from ..promtext import Samples, render_families
from ..text import iso_utc

if TYPE_CHECKING:
    from ..decide.sweep import JobResult, SweepReport
    from ..model import LogEvent


def document(report: "SweepReport") -> Dict[str, Any]:
    outcome = report.outcome
    nodes = []
    for n in outcome.nodes if outcome else ():
        action = report.actions.get(n.node)
        nodes.append({"node": n.node, "outcome": n.outcome, "busbw_gbps": n.busbw_gbps,
                      "partners": list(n.partners), "why": n.why, "action": action.said if action else None,
                      "reason": action.reason if action else None,
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


def history_record(report: "SweepReport", events: Sequence["LogEvent"], now: float) -> Dict[str, Any]:
    outcome = report.outcome
    from ..checks.internode import check_fabric_busbw
    from ..historyline import brief_events, finding_item

    findings = [finding_item(f, retest=node.node in report.retested)
                for node in (outcome.nodes if outcome else ())
                for f in check_fabric_busbw(node, node.node in report.retested)]
    drained = [a.reason for a in report.actions.values() if a.holds_node]
    resumed = [a for a in report.actions.values() if a.resumed]
    verdict = "unknown" if outcome is None else "fail" if outcome.of(BAD) else "pass"
    return {"time": iso_utc(now), "mode": "fabric-sweep", "sweep": report.sweep_id, "verdict": verdict,
            "findings": findings, "rounds": outcome.rounds if outcome else 0,
            "jobs": outcome.jobs if outcome else 0, "error": report.error,
            "action": {"taken": "drain" if drained else "resume" if resumed else "none",
                       "reason": drained[0] if drained else None,
                       "dry_run": any(a.report_only for a in report.actions.values())},
            "events": brief_events(events)}


def busbw_samples(report: "SweepReport") -> List[Tuple[Dict[str, str], float]]:
    return pair_samples(report.outcome.results if report.outcome else ())


def pair_samples(results: Sequence["JobResult"]) -> List[Tuple[Dict[str, str], float]]:
    """The last bus bandwidth of each pair that ran (both ways round), for the sweep's textfile
    and the gang check's."""
    last: Dict[Tuple[str, str], float] = {}
    for result in results:
        if result.busbw_gbps is None or len(result.job.nodes) != 2 or result.job.kind == "gang":
            continue
        a, b = result.job.nodes
        last[(a, b)] = last[(b, a)] = result.busbw_gbps
    return [({"node": n, "partner": p}, v) for (n, p), v in sorted(last.items())]


def metrics_text(report: "SweepReport", now: float) -> str:
    outcome = report.outcome
    counts = {o: 0 for o in (BAD, TRANSIENT, UNKNOWN, PASS, SKIPPED)}
    for node in outcome.nodes if outcome else ():
        counts[node.outcome] += 1
    families: List[Tuple[str, str, str, Samples]] = [
        ("gpu_healthcheck_fabric_busbw_gbps", "gauge", "Bus bandwidth of the last sweep job a node "
         "ran with a partner (GB/s, nccl-tests busbw at the largest size).", busbw_samples(report)),
        ("gpu_healthcheck_fabric_sweep_nodes", "gauge", "Nodes of the last fabric sweep by outcome.",
         [({"outcome": o}, float(c)) for o, c in counts.items()]),
        # per node, so that the fleet rules can join a bad node to its own series (hostname =
        # node): the sweep drains it from this host, and the node's own textfile knows nothing
        # of it until the repair loop takes it.  Labels stay bounded: the swept nodes, and the
        # five outcomes.
        ("gpu_healthcheck_fabric_sweep_node_outcome", "gauge", "1 per node the last fabric sweep "
         "judged, labelled with its outcome (bad, transient, unknown, pass, skipped).",
         [({"node": n.node, "outcome": n.outcome}, 1.0)
          for n in sorted(outcome.nodes if outcome else (), key=lambda n: n.node)]),
        ("gpu_healthcheck_fabric_sweep_rounds", "gauge", "Rounds of the last fabric sweep.",
         [({}, float(outcome.rounds if outcome else 0))]),
        ("gpu_healthcheck_fabric_sweep_jobs", "gauge", "Slurm jobs of the last fabric sweep.",
         [({}, float(outcome.jobs if outcome else 0))]),
        ("gpu_healthcheck_fabric_sweep_last_run_timestamp_seconds", "gauge",
         "When the last fabric sweep ended (Unix time).", [({}, now)]),
    ]
    return render_families(families)
