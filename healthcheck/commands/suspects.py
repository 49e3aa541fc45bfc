"""`gpu-healthcheck --suspects` and `--replay-failures` (docs/suspects.md).

    main(args, config, started) -> exit status     # cli.py's dispatch table, after usage(args)

--suspects: Slurm's accounting (sacct, or --sacct-file) and this host's own history in, the
suspects (decide/suspects.py) out, as a table or one JSON document:

    {"since": "...", "until": "...",
     "accounting": {"source": "sacct", "jobs": 10234, "unknown": null, "notes": []},
     "history": {"file": "/var/lib/gpu-healthcheck/history.jsonl", "events": 12,
                 "counter_samples": 96, "notes": []},
     "suspects": [{"node": "gpu-07", "kind": "black_hole", "score": 42.0, "evidence": {...}}]}

Exit status: 0 no suspect, 1 suspects found, 3 the accounting could not be read (the history's
suspects are still printed: unknown accounting never names a node, and never reads as none),
--act could not drain a suspect (scontrol failed) or the command could not run.  Without --act
it changes nothing: statistics never drain a node.

--act (with `[suspects] act = true`; exit 3 without it, nothing done) sends each suspect node to
verification (decide/verify.py, act/verify.py): drained after its running jobs with the reason
`gpu-healthcheck: suspect <kind> <evidence>`, within drain.max_fraction, never over an admin's
reason, only said under drain.report_only, and not again within suspects.verify_cooldown_s (this
host's history says when it was last sent).  The repair loop on the node verifies it at the deep
level.  Nothing is sent when the accounting could not be read.  The outcome per node is the JSON's
`verification` ({node: applied|refused|admin_owned|already_ours|report_only|cooldown|error: ...};
only `applied` starts the cooldown), each suspect's `verification` in the history line, and
journal entries.

Every --suspects run (from sacct or a --sacct-file) leaves, through act/suspectsrun.py: a
history line ("mode": "suspects"), <state_dir>/suspects.json (what --cluster on this host shows)
and, where metrics_file is set, gpu_healthcheck_suspects.prom beside it (report/suspects.py).

--replay-failures FILE.csv: decide/replay.py's table, or its JSON.  Exit 0, 3 unreadable file.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, TextIO, Tuple

from ..decide import exitcodes
from ..fleetmodel import Accounting, CounterSample, FleetEvent, Suspect
from ..model import UsageError
from ..report.suspects import evidence_text
from ..text import iso_utc

if TYPE_CHECKING:
    from ..config import Config
    from ..model import LogEvent

FOUND = exitcodes.ExitCode.WARN  # suspects found: the monitoring convention's "warning", someone should look
UNKNOWN = exitcodes.ExitCode.UNKNOWN
ACT_OFF = ("--suspects --act: [suspects] act is false in the config: no suspect was sent to "
           "verification (docs/suspects.md#what-happens-to-a-suspect)")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: float, option: str) -> float:
    """WHEN: `now`, a duration before now (`14d`, `12h`, `90m`, `2w`), or an ISO date or time
    (local time where it has no zone, as sacct's -S and -E read it).  Raises UsageError."""
    text = text.strip()
    if text == "now":
        return now
    m = _DURATION.fullmatch(text)
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise UsageError(f"{option} takes an ISO date or time (2026-12-01, 2026-12-01T08:00) or a "
                         f"duration before now (14d, 12h, 90m), got {text!r}") from None


def usage(args: Any) -> None:
    """The refusals of --suspects and --replay-failures, before the config is read (cli.py)."""
    if args.gpus or args.level or args.nodes or args.partition or args.gres:
        raise UsageError("--suspects takes --since, --until, --sacct-file, --act, --json and "
                         "--config; --replay-failures takes --json")
    if args.replay_failures:
        if args.since or args.until or args.sacct_file or args.act:
            raise UsageError("--replay-failures takes only --json and --config")
    elif args.act and args.sacct_file:
        raise UsageError("--suspects --act acts on the live accounting (sacct), never on a --sacct-file")


def main(args: Any, config: "Config", started: float) -> int:
    """cli.py's dispatch: --suspects or --replay-failures with the loaded config."""
    if args.replay_failures:
        return replay_command(args.replay_failures, config, args.json, sys.stdout, sys.stderr)
    now = time.time()
    until = parse_when(args.until, now, "--until") if args.until else now
    since = (parse_when(args.since, now, "--since") if args.since
             else until - config.suspects.lookback_s)
    if since >= until:
        raise UsageError(f"--since ({iso_utc(since)}) must be before --until ({iso_utc(until)})")
    if args.act and not config.suspects.act:
        print(f"gpu-healthcheck: {ACT_OFF}", file=sys.stderr)
        return UNKNOWN
    return suspects_command(config, since, until, args.sacct_file, args.json, sys.stdout, sys.stderr,
                            act=bool(args.act))


def _history(config: "Config", since: float, until: float
             ) -> Tuple[List[FleetEvent], List[CounterSample], List[str], Dict[str, float], bool]:
    """(the history's events in the window, its counter samples, notes, node -> when this host
    last sent it to verification, whether the history could be read)."""
    from ..decide.counters import counter_samples
    from ..decide.suspects import history_events
    from ..decide.verify import last_sends
    from ..report.history import HistoryError, read_history

    path = config.history_path()
    try:
        records, notes = read_history(path)
    except HistoryError as exc:
        return [], [], [f"cannot read the history {path}: {exc.strerror or exc}; its rules were not run"], {}, False
    events = [e for e in history_events(records) if since <= e.time <= until]
    samples = [s for s in counter_samples(records) if s.time <= until]  # their window: counter_window_s
    return events, samples, notes, last_sends(records), True


def _verify(config: "Config", suspects: List[Suspect], sent: Dict[str, float], readable: bool,
            unknown: Optional[str], events: List["LogEvent"]) -> Tuple[Dict[str, str], List[str]]:
    """--act: each suspect node sent to verification (act/verify.py).  (node -> outcome, notes)."""
    from ..act.verify import send_to_verification
    from ..decide.verify import plan_sends
    from ..model import DoorError

    if unknown:
        return {}, ["--act: the accounting could not be read: no suspect was sent to verification"]
    if not suspects:
        return {}, []
    if not readable:  # its cooldown cannot be told: a node verified an hour ago would go again
        return {}, [f"--act: the history {config.history_path()} could not be read, so when each "
                    f"suspect was last sent is unknown: none was sent to verification"]
    from ..act.slurm import Slurm

    try:
        cluster = Slurm(config, os.environ).ctl.show_nodes()
    except DoorError as exc:
        return {s.node: f"error: {exc}" for s in suspects}, [f"--act: slurmctld did not answer ({exc}): "
                                                             f"no suspect was sent to verification"]
    sends = plan_sends(suspects, cluster, sent, time.time(), config.suspects)
    return send_to_verification(config, sends, os.environ, events), []


def suspects_command(config: "Config", since: float, until: float, sacct_file: Optional[str],
                     as_json: bool, out: TextIO, err: TextIO, act: bool = False) -> int:
    from ..decide.suspects import find_suspects
    from ..read.sacct import read_accounting, read_sacct_file

    if sacct_file:
        acct = read_sacct_file(sacct_file)
        acct = acct._replace(jobs=tuple(j for j in acct.jobs if j.end >= since and j.start < until))
    else:
        acct = read_accounting(config.suspects, os.environ, since, until)
    events, samples, history_notes, sent, readable = _history(config, since, until)
    suspects = find_suspects(acct.jobs if acct.unknown is None else (), events, config.suspects, until,
                             samples)
    log: List["LogEvent"] = []  # the steps of --act (journal, history)
    verification: Dict[str, str] = {}
    if act:
        verification, act_notes = _verify(config, suspects, sent, readable, acct.unknown, log)
        history_notes = history_notes + act_notes
    doc: Dict[str, Any] = {
        "since": iso_utc(since), "until": iso_utc(until),
        "accounting": {"source": sacct_file or "sacct", "jobs": len(acct.jobs),
                       "unknown": acct.unknown, "notes": list(acct.notes)},
        "history": {"file": config.history_path(), "events": len(events),
                    "counter_samples": len(samples), "notes": history_notes},
        "suspects": [s.as_json() for s in suspects]}
    if act:
        doc["verification"] = verification
    from ..act.suspectsrun import record
    from ..report.suspects import SuspectsResult, history_record, metrics_text, state_document

    # every run is recorded, a --sacct-file one too: the history says which source it read
    result = SuspectsResult(suspects, since, until, sacct_file or "sacct", len(acct.jobs), acct.unknown)
    now = time.time()
    host = os.uname().nodename.split(".")[0]
    notes = record(config, history_record(result, host, now, verification if act else None, log),
                   state_document(result, now), metrics_text(result, now))
    if log and config.journal:
        from ..act.journal import send_events

        send_events(log, "suspects")
    if as_json:
        json.dump(doc, out, indent=2, sort_keys=False)
        out.write("\n")
    else:
        for line in format_table(suspects, acct, len(events), since, until):
            print(line, file=out)
        for node, outcome in verification.items():
            print(f"verification {node}: {outcome}", file=out)
    for note in list(acct.notes) + history_notes + notes:
        print(f"gpu-healthcheck: --suspects: {note}", file=err)
    if acct.unknown:
        print(f"gpu-healthcheck: --suspects: {acct.unknown}; no node is named from it", file=err)
        return UNKNOWN
    if any(outcome.startswith("error:") for outcome in verification.values()):
        return UNKNOWN  # --act could not do what was asked (slurmctld did not answer)
    return FOUND if suspects else int(exitcodes.done_exit(True))


def format_table(suspects: List[Suspect], acct: Accounting, events: int, since: float,
                 until: float) -> List[str]:
    head = (f"{iso_utc(since)} .. {iso_utc(until)}: "
            + (acct.unknown if acct.unknown else f"{len(acct.jobs)} jobs from the accounting")
            + f", {events} events from our history")
    if not suspects:
        return [head, "no suspects"]
    rows = [("NODE", "KIND", "SCORE", "EVIDENCE")]
    for s in suspects:
        rows.append((s.node + (f" (GPU SN {s.serial})" if s.serial else ""), s.kind, f"{s.score:.1f}",
                     evidence_text(s)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [head] + ["  ".join([r[i].ljust(widths[i]) for i in range(3)] + [r[3]]) for r in rows]


def replay_command(path: str, config: "Config", as_json: bool, out: TextIO, err: TextIO) -> int:
    from ..decide.replay import ReplayFormatError, parse_failures_csv, replay

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        events = parse_failures_csv(text, path)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"gpu-healthcheck: --replay-failures: cannot read {path}: {exc}", file=err)
        return UNKNOWN
    except ReplayFormatError as exc:
        print(f"gpu-healthcheck: --replay-failures: {exc}", file=err)
        return UNKNOWN
    result = replay(events, config.suspects)
    if as_json:
        json.dump(result, out, indent=2)
        out.write("\n")
        return int(exitcodes.done_exit(True))
    cols = ("name", "default", "flags", "hits", "precision", "recall", "suspect_node_days")
    rows: List[Tuple[str, ...]] = [("RULE", "DEFAULT", "FLAGS", "HITS", "PRECISION", "RECALL",
                                    "SUSPECT NODE-DAYS")]
    for r in result["rules"] + [result["naive"]]:
        rows.append(tuple("-" if r[c] is None else "yes" if r[c] is True else "no" if r[c] is False
                          else str(r[c]) for c in cols))
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    print(f"{result['events']} events from {path}", file=out)
    for r in rows:
        print("  ".join(r[i].ljust(widths[i]) for i in range(len(cols))).rstrip(), file=out)
    return int(exitcodes.done_exit(True))
