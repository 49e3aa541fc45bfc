"""The history file's items, one encoder for every mode's line (pure): the node's runs
(act/history.py), the fabric sweep's (report/sweep.py) and the gang check's (commands/gang.py).

    item = finding_item(finding, retest=False)   # {"check", "severity", "gpu", "value", "message", ...}
    events = brief_events(events)               # a multi-node run's [{"kind", "message"}]
    line = encode(record)                       # one JSON line, keys sorted, bytes

A node-local finding carries its GPU's identity (pci_bus_id, serial, uuid: the caller passes
them); a multi-node one (checks/internode.py) the node it is about and the partners it failed
with.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Sequence

if TYPE_CHECKING:
    from .model import Finding, LogEvent

MAX_MESSAGE_CHARS = 2000  # one line stays small enough that the size bound means something


def clip(text: Any) -> Any:
    """Head and tail of a long text: a traceback's last line names the exception."""
    if isinstance(text, str) and len(text) > MAX_MESSAGE_CHARS:
        half = MAX_MESSAGE_CHARS // 2
        return f"{text[:half]}\n... [{len(text) - 2 * half} chars left out] ...\n{text[-half:]}"
    return text


def item(check: Any, severity: Any, gpu: Any, value: Any, message: Any, **where: Any) -> Dict[str, Any]:
    """One finding of a history line, from its parts (a JSON report's finding, or a Finding)."""
    return {"check": check, "severity": severity, "gpu": gpu, "value": value,
            "message": clip(message), **where}


def finding_item(finding: "Finding", **where: Any) -> Dict[str, Any]:
    """One Finding of a history line; `where`: what else names it (a re-test's "retest")."""
    if finding.node is not None:
        where = {"node": finding.node, "partners": list(finding.partners), **where}
    return item(finding.check, finding.severity.value, finding.gpu, finding.value, finding.message, **where)


def brief_events(events: Sequence["LogEvent"]) -> List[Dict[str, Any]]:
    """A multi-node run's events on its line (the sweep's, the gang check's): kind and message,
    500 characters each, the first 50 (a sweep of many nodes logs one event per drain)."""
    return [{"kind": e.kind, "message": e.message[:500]} for e in events][:50]


def encode(record: Dict[str, Any]) -> bytes:
    """One line; default=str so a value of an unexpected type never loses the whole line."""
    return (json.dumps(record, sort_keys=True, default=str, separators=(",", ":")) + "\n").encode()
