"""What the gang check writes into the job's output (commands/gang.py runs it): the words for
each bad node's drain, and the --json document.

    words = drain_words(actions, requeue, act, requeueable)
    json.dump(document(result, job_id, actions, requeue, act), out)
"""

from __future__ import annotations

from typing import Dict

from ..decide.gang import GangResult, suspects
from ..model import Outcome


def drain_words(actions: Dict[str, str], requeue: bool, act: bool, requeueable: bool) -> Dict[str, str]:
    said = {Outcome.APPLIED.value: "drained", Outcome.ALREADY_OURS.value: "already drained by us",
            Outcome.ADMIN_OWNED.value: "already drained by an admin",
            Outcome.REFUSED.value: "not drained: drain.max_fraction is spent",
            Outcome.REPORT_ONLY.value: "would drain (report_only)" if act else
            "the privileged side (SPANK allow_gang=yes) drains it and requeues the job"}
    tail = "; requeuing the job" if requeue else "" if requeueable or not act else \
        "; the job is not requeueable (--no-requeue): it goes on"
    return {node: said.get(taken, taken) + tail for node, taken in actions.items()}


def document(result: GangResult, job_id: str, actions: Dict[str, str], requeue: bool,
              act: bool) -> Dict[str, object]:
    whole = result.whole
    named = suspects(result)
    return {"schema": 1, "mode": "gang", "job_id": job_id, "act": act, "outcome": result.outcome,
            "why": result.why, "rounds": result.rounds, "jobs": result.jobs,
            "nodes": list(whole.job.nodes) if whole else [],
            "busbw_gbps": whole.busbw_gbps if whole else None,
            "bad": [{"node": n.node, "busbw_gbps": n.busbw_gbps, "partners": list(n.partners),
                     "why": n.why, "action": actions.get(n.node)} for n in result.bad],
            "suspects": [{"node": n.node, "why": n.why} for n in result.others if n.node in named],
            "requeue": requeue}
