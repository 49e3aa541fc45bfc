"""What the gang check writes into the job's output (commands/gang.py runs it): the words for
each bad node's drain, and the --json document.

    words = drain_words(actions, requeue, act, requeueable)
    json.dump(document(result, job_id, actions, requeue, act), out)

What the gang check's privileged side leaves in node_exporter's textfile folder (commands/gang.py
writes it as `gpu_healthcheck_gang.prom` beside `metrics_file`, on the node that ran
`--gang --act`, the job's batch host).

    metrics_text(result, nodes, now)     # result None: the check could not run

Metrics (the last gang check measured on this node; gauges, replaced at every check):
    gpu_healthcheck_gang_outcome{outcome}            1 for its outcome (passed, failed, unknown,
                                                     single, could_not_run), 0 for the others
    gpu_healthcheck_gang_job_nodes                   nodes of the job it checked
    gpu_healthcheck_gang_job_busbw_gbps              bus bandwidth of the collective over all of
                                                     them (GB/s; absent when it gave no figure)
    gpu_healthcheck_gang_node_outcome{node,outcome}  1 for each node's outcome (bad, transient,
                                                     unknown, pass), 0 for the others; only
                                                     after a failed collective, when nodes were told apart
    gpu_healthcheck_gang_busbw_gbps{node,partner}    the last bus bandwidth of each pair a node
                                                     ran with a partner while the node was sought
    gpu_healthcheck_gang_rounds, _collectives        rounds and collectives it ran
    gpu_healthcheck_gang_last_run_timestamp_seconds  when it ended (Unix time)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from ..decide.gang import FAILED, PASSED, SINGLE, UNKNOWN, GangResult, suspects
from ..decide.sweep import BAD, PASS, TRANSIENT
from ..decide.sweep import UNKNOWN as NODE_UNKNOWN
from ..model import NodeAction, Outcome
from ..netmodel import GangOutcome
from ..promtext import Samples, render_families
from .sweep import pair_samples

if TYPE_CHECKING:
    from ..decide.sweep import JobResult


def drain_words(actions: Dict[str, NodeAction], requeue: bool, act: bool, requeueable: bool) -> Dict[str, str]:
    said = {Outcome.APPLIED: "drained", Outcome.ALREADY_OURS: "already drained by us",
            Outcome.ADMIN_OWNED: "already drained by an admin",
            Outcome.REFUSED: "not drained: drain.max_fraction is spent",
            Outcome.REPORT_ONLY: "would drain (report_only)" if act else
            "the privileged side (SPANK allow_gang=yes) drains it and requeues the job"}
    tail = "; requeuing the job" if requeue else "" if requeueable or not act else \
        "; the job is not requeueable (--no-requeue): it goes on"
    return {node: said.get(action.outcome, action.said) + tail for node, action in actions.items()}


def document(result: GangResult, job_id: str, actions: Dict[str, NodeAction], requeue: bool,
              act: bool) -> Dict[str, object]:
    whole = result.whole
    named = suspects(result)
    return {"schema": 1, "mode": "gang", "job_id": job_id, "act": act, "outcome": result.outcome,
            "why": result.why, "rounds": result.rounds, "jobs": result.jobs,
            "nodes": list(whole.job.nodes) if whole else [],
            "busbw_gbps": whole.busbw_gbps if whole else None,
            "bad": [{"node": n.node, "busbw_gbps": n.busbw_gbps, "partners": list(n.partners),
                     "why": n.why, "action": actions[n.node].said if n.node in actions else None}
                    for n in result.bad],
            "suspects": [{"node": n.node, "why": n.why} for n in result.others if n.node in named],
            "requeue": requeue}


COULD_NOT_RUN = GangOutcome.COULD_NOT_RUN
OUTCOMES = (PASSED, FAILED, UNKNOWN, SINGLE, COULD_NOT_RUN)
NODE_OUTCOMES = (BAD, TRANSIENT, NODE_UNKNOWN, PASS)
FILE_NAME = "gpu_healthcheck_gang.prom"


def metrics_text(result: Optional["GangResult"], nodes: Sequence[str], now: float,
                 pair_results: Sequence["JobResult"] = ()) -> str:
    """The textfile of one gang check; `pair_results`: every pair the search for the node ran."""
    outcome = COULD_NOT_RUN if result is None else result.outcome
    judged = [] if result is None else [*result.bad, *result.others]
    whole = result.whole if result is not None else None
    families: List[Tuple[str, str, str, Samples]] = [
        ("gpu_healthcheck_gang_outcome", "gauge", "Outcome of the last gang check run on this node (1 for it).",
         [({"outcome": o}, 1.0 if o == outcome else 0.0) for o in OUTCOMES]),
        ("gpu_healthcheck_gang_job_nodes", "gauge", "Nodes of the job the last gang check measured.",
         [({}, float(len(nodes)))]),
        ("gpu_healthcheck_gang_job_busbw_gbps", "gauge", "Bus bandwidth of the last gang check's collective "
         "over all of the job's nodes (GB/s, nccl-tests busbw).",
         [({}, whole.busbw_gbps)] if whole is not None and whole.busbw_gbps is not None else []),
        ("gpu_healthcheck_gang_node_outcome", "gauge", "Outcome of each node of the last gang check's "
         "search for the bad node (1 for it).",
         [({"node": n.node, "outcome": o}, 1.0 if o == n.outcome else 0.0)
          for n in sorted(judged, key=lambda n: n.node) for o in NODE_OUTCOMES]),
        ("gpu_healthcheck_gang_busbw_gbps", "gauge", "Bus bandwidth of the last pair a node of the last gang "
         "check ran with a partner (GB/s).", pair_samples(pair_results)),
        ("gpu_healthcheck_gang_rounds", "gauge", "Rounds of the last gang check.",
         [({}, float(result.rounds if result else 0))]),
        ("gpu_healthcheck_gang_collectives", "gauge", "Collectives the last gang check ran.",
         [({}, float(result.jobs if result else 0))]),
        ("gpu_healthcheck_gang_last_run_timestamp_seconds", "gauge", "When the last gang check on this node "
         "ended (Unix time).", [({}, now)]),
    ]
    return render_families(families)
