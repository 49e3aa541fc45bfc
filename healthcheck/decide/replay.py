"""Replay a GPU failure history through the repeat rules, against the naive rule (pure).

    events = [FleetEvent(t, "node1", "SN1", "dbe"), ...]        # read/.. or the CSV below
    result = replay(events, config.suspects)
    result["rules"] -> [{"name", "default", "flags", "hits", "precision", "recall",
                         "suspect_node_days"}], result["naive"] -> {...}

`--replay-failures FILE.csv` reads `time,node,serial,kind` (ISO 8601; kind dbe, otb, xid:N,
remap, sbe_burst).  Each event is a hardware failure someone had to deal with, so it counts as
one remediation for the lemon rule.  Events are taken in time order; a rule's state before an
event decides whether that event is a hit, then the event updates it.

- flags: suspect periods a rule opened (a trigger while already suspect extends the period);
- hits: events at a node (a GPU serial, for the serial rules) while it was suspect;
- precision: flags followed by at least one hit / flags (None where a rule never flagged);
- recall: hits / events;
- suspect_node_days: days spent suspect, summed, up to the last event of the history.

Rules: `lemon` (default: `remediations` events at a node within `remediation_window_s`),
`serial_lemon` (default: the same for one GPU serial), `xid_repeat` (default: Xid 13 or 31
twice on one serial within `xid_repeat_window_s`), `node_repeat` (two events at a node within
7 days: the repeat that the ORNL history shows 143 times the base rate), and the naive rule
(any event at a node).  Every flag holds for HOLD_S: the naive rule's 30 days.
"""

from __future__ import annotations

import csv
import datetime
import io
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any, Callable, Deque, DefaultDict, Dict, List, Optional, Sequence, Tuple

from ..fleetmodel import FleetEvent

if TYPE_CHECKING:
    from ..configsections import SuspectsConfig

HOLD_S = 30 * 86400.0
REPEAT_WINDOW_S = 7 * 86400.0
KINDS = ("dbe", "otb", "remap", "sbe_burst")


class ReplayFormatError(ValueError):
    """The CSV cannot be read (names the file and line)."""


def parse_failures_csv(text: str, source: str) -> List[FleetEvent]:
    """`time,node,serial,kind` rows.  Raises ReplayFormatError naming the line."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or [h.strip().lower() for h in header] != ["time", "node", "serial", "kind"]:
        raise ReplayFormatError(f"{source}:1: expected the header time,node,serial,kind, got {header!r}")
    events: List[FleetEvent] = []
    for number, row in enumerate(reader, 2):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 4:
            raise ReplayFormatError(f"{source}:{number}: {len(row)} fields, expected 4")
        when, node, serial, kind = (c.strip() for c in row)
        try:
            stamp = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            raise ReplayFormatError(f"{source}:{number}: time {when!r} is not ISO 8601") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=datetime.timezone.utc)  # a history without zone: UTC
        if kind not in KINDS and not (kind.startswith("xid:") and kind[4:].isdigit()):
            raise ReplayFormatError(f"{source}:{number}: kind {kind!r} is not one of "
                                    f"{', '.join(KINDS)}, xid:N")
        if not node:
            raise ReplayFormatError(f"{source}:{number}: no node")
        events.append(FleetEvent(stamp.timestamp(), node, serial or None, kind))
    return events


class _Rule:
    """One rule's suspect periods over one key (a node or a serial)."""

    def __init__(self, name: str, default: bool, key: Callable[[FleetEvent], Optional[str]],
                 count: int, window_s: float, applies: Callable[[FleetEvent], bool] = lambda e: True) -> None:
        self.name, self.default, self.key, self.count, self.window_s = name, default, key, count, window_s
        self.applies = applies
        self.recent: DefaultDict[str, Deque[float]] = defaultdict(deque)
        self.until: Dict[str, float] = {}  # key -> end of its open period
        self.periods: List[List[float]] = []  # [start, end, hits]
        self.open: Dict[str, List[float]] = {}
        self.hits = 0

    def see(self, event: FleetEvent) -> None:
        key = self.key(event)
        if key is None:
            return
        if self.until.get(key, -1.0) > event.time:
            self.hits += 1
            self.open[key][2] += 1
        if not self.applies(event):
            return
        recent = self.recent[key]
        recent.append(event.time)
        while event.time - recent[0] > self.window_s:
            recent.popleft()
        if len(recent) >= self.count:
            if self.until.get(key, -1.0) > event.time:
                self.until[key] = self.open[key][1] = event.time + HOLD_S  # extended
            else:
                period = [event.time, event.time + HOLD_S, 0]
                self.periods.append(period)
                self.open[key] = period
                self.until[key] = period[1]

    def result(self, events: int, last: float) -> Dict[str, Any]:
        flags = len(self.periods)
        days = sum(max(0.0, min(end, last) - start) for start, end, _ in self.periods) / 86400.0
        return {"name": self.name, "default": self.default, "flags": flags, "hits": self.hits,
                "precision": (round(sum(1 for p in self.periods if p[2] > 0) / flags, 4) if flags else None),
                "recall": round(self.hits / events, 4) if events else None,
                "suspect_node_days": round(days, 1)}


def _rules(cfg: "SuspectsConfig") -> Tuple[List[_Rule], _Rule]:
    node: Callable[[FleetEvent], Optional[str]] = lambda e: e.node
    serial: Callable[[FleetEvent], Optional[str]] = lambda e: e.serial
    rules = [
        _Rule("lemon", True, node, cfg.remediations, cfg.remediation_window_s),
        _Rule("serial_lemon", True, serial, cfg.remediations, cfg.remediation_window_s),
        _Rule("xid_repeat", True, serial, 2, cfg.xid_repeat_window_s,
              lambda e: e.kind in ("xid:13", "xid:31")),
        _Rule("node_repeat", False, node, 2, REPEAT_WINDOW_S),
    ]
    return rules, _Rule("naive", False, node, 1, HOLD_S)


def replay(events: Sequence[FleetEvent], cfg: "SuspectsConfig") -> Dict[str, Any]:
    rules, naive = _rules(cfg)
    ordered = sorted(events, key=lambda e: e.time)
    for event in ordered:
        for rule in rules + [naive]:
            rule.see(event)
    last = ordered[-1].time if ordered else 0.0
    return {"events": len(ordered), "rules": [r.result(len(ordered), last) for r in rules],
            "naive": naive.result(len(ordered), last)}
