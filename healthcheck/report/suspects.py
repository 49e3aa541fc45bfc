"""What one `--suspects` run leaves behind (pure; commands/suspects.py writes them):

    history_record(result, host, now)    -> the --history line ("mode": "suspects")
    state_document(result, now)          -> <state_dir>/suspects.json, which --cluster reads
    metrics_text(result, now)            -> gpu_healthcheck_suspects.prom's text

`result` is a SuspectsResult: the suspects, the window, the accounting's source and whether it
could be read.

Metrics (node_exporter's textfile collector on the admin host reads every *.prom of its folder):
    gpu_healthcheck_suspect{node,kind[,serial]}          1 per suspect of the last run
    gpu_healthcheck_suspect_score{node,kind[,serial]}    its score (larger is worse)
    gpu_healthcheck_suspects_accounting_unknown          1: Slurm's accounting could not be read
    gpu_healthcheck_suspects_last_run_timestamp_seconds

Labels are bounded: `node` (a Slurm node name), `kind` (one of decide/suspects.py's rule names)
and, for a rule about one GPU serial, `serial` (the node textfile labels every GPU metric with
its serial already).  Job ids, users and messages stay in the evidence (history, --json),
never in a label.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..fleetmodel import SUSPECTS_STATE_FILE, SUSPECTS_TEXTFILE, Suspect
from ..text import iso_utc

STATE_FILE = SUSPECTS_STATE_FILE
STATE_SCHEMA = 1
TEXTFILE = SUSPECTS_TEXTFILE
SUMMARY_CHARS = 240  # the history line's evidence summary: a few job ids, never all of them
MAX_SUSPECTS = 64  # suspects kept in one history line; the rest are counted


class SuspectsResult(NamedTuple):
    suspects: Sequence[Suspect]
    since: float
    until: float
    source: str  # "sacct" or the --sacct-file path
    jobs: int
    unknown: Optional[str]  # why the accounting could not be read; None: it was


def evidence_text(s: Suspect) -> str:
    """One line of a suspect's evidence, for the table and the history."""
    e: Dict[str, Any] = s.evidence
    if s.kind == "black_hole":
        return (f"{e['failed_fast']} jobs of {e['users']} users failed within {e['within_s']:g} s of "
                f"starting, in {len(e['incidents'])} incident(s); jobs {','.join(e['jobs'])}")
    if s.kind == "lemon":
        return (f"{e['failures']} failures against {e['expected']} expected over {e['jobs']} jobs "
                f"(p={e['p_value']:.2g}, {e['users_in_excess']} users in excess); jobs "
                f"{','.join(e['failed_jobs'])}")
    return ", ".join(f"{k}={v}" for k, v in e.items())


def _short(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 3] + "..."


def history_record(result: SuspectsResult, host: str, now: float,
                   verification: Optional[Mapping[str, str]] = None, events: Sequence[Any] = ()) -> Dict[str, Any]:
    """One history line per run: verdict warn (suspects), pass (none) or unknown (the
    accounting could not be read, whatever our own history named).  `verification` (--act):
    node -> what sending it to verification did, in each of its suspects' items; `events`:
    the LogEvents of --act."""
    items = []
    for s in result.suspects[:MAX_SUSPECTS]:
        item: Dict[str, Any] = {"node": s.node, "kind": s.kind, "score": round(s.score, 3),
                                "evidence": _short(evidence_text(s))}
        if s.serial is not None:
            item["serial"] = s.serial
        if verification is not None and s.node in verification:
            item["verification"] = verification[s.node]
        items.append(item)
    record: Dict[str, Any] = {
        "schema": 1, "time": iso_utc(now), "epoch": round(now, 3), "mode": "suspects",
        "node": host, "host": host, "job_id": None,
        "verdict": "unknown" if result.unknown else "warn" if result.suspects else "pass",
        "since": iso_utc(result.since), "until": iso_utc(result.until),
        "accounting": {"source": result.source, "jobs": result.jobs, "unknown": result.unknown},
        "suspects": items, "findings": [],
        "action": {"taken": "drain" if "applied" in (verification or {}).values() else "none",
                   "reason": None, "detail": None,
                   "dry_run": "report_only" in (verification or {}).values(),
                   "refused": "refused" in (verification or {}).values(), "pending": False},
        "events": [{"kind": e.kind, "priority": e.priority, "message": e.message} for e in events]}
    if len(result.suspects) > MAX_SUSPECTS:
        record["items_dropped"] = len(result.suspects) - MAX_SUSPECTS
    return record


def state_document(result: SuspectsResult, now: float) -> Dict[str, Any]:
    """The last run's suspects, for --cluster on the same host."""
    return {"schema": STATE_SCHEMA, "time": iso_utc(now), "epoch": round(now, 3),
            "since": iso_utc(result.since), "until": iso_utc(result.until),
            "source": result.source, "unknown": result.unknown,
            "suspects": [{"node": s.node, "kind": s.kind, "score": round(s.score, 3),
                          **({"serial": s.serial} if s.serial is not None else {})}
                         for s in result.suspects]}


def parse_state(data: Any) -> Optional[Dict[str, Any]]:
    """A loaded suspects.json, or None when it is not one (another schema, damaged): its
    suspects are kept only where each has a string node and kind and a number score."""
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
        return None
    raw = data.get("suspects")
    if not isinstance(raw, list):
        return None
    suspects = [s for s in raw if isinstance(s, dict) and isinstance(s.get("node"), str)
                and isinstance(s.get("kind"), str) and isinstance(s.get("score"), (int, float))
                and isinstance(s.get("serial", ""), str)]
    return {**data, "suspects": suspects}


def _labels(s: Suspect) -> Tuple[Tuple[str, str], ...]:
    labels = [("node", s.node), ("kind", s.kind)]
    if s.serial is not None:
        labels.append(("serial", s.serial))
    return tuple(labels)


def metrics_text(result: SuspectsResult, now: float) -> str:
    from ..promtext import Samples, render_families

    # one series per label set: the worst score where two suspects share one
    worst: Dict[Tuple[Tuple[str, str], ...], float] = {}
    for s in result.suspects:
        key = _labels(s)
        worst[key] = max(worst.get(key, s.score), s.score)
    ordered = sorted(worst.items())
    families: List[Tuple[str, str, str, Samples]] = [
        ("gpu_healthcheck_suspect", "gauge", "1 per suspect node (or GPU serial) of the last "
         "--suspects run, by rule (kind).", [(dict(k), 1.0) for k, _ in ordered]),
        ("gpu_healthcheck_suspect_score", "gauge", "The score of each suspect of the last --suspects "
         "run (larger is worse; a lemon's is -log10 of its p-value).",
         [(dict(k), round(v, 3)) for k, v in ordered]),
        ("gpu_healthcheck_suspects_accounting_unknown", "gauge", "1 when the last --suspects run "
         "could not read Slurm's accounting (its black holes and lemons are unknown).",
         [({}, 1.0 if result.unknown else 0.0)]),
        ("gpu_healthcheck_suspects_last_run_timestamp_seconds", "gauge",
         "When the last --suspects run ended (Unix time).", [({}, now)]),
    ]
    return render_families(families)
