"""The one door to Slurm's accounting: `sacct`, bounded in time and output, and its parser.

    acct = read_accounting(config.suspects, environ, since=t0, until=t1)
    acct.unknown or acct.jobs          # Accounting (fleetmodel): unknown is never "no jobs"
    jobs, notes = parse_sacct(text, "jobs.txt")   # any `sacct --parsable2` text with a header

What runs, once per piece of the window (`suspects.sacct_piece_s`, a day by default, so a
long window on a large cluster is many small answers, each under the deadline and the cap):

    sacct -a -X --parsable2 --format=JobIDRaw,User,State,ExitCode,Start,End,NNodes,NodeList
          --starttime 2026-12-01T00:00:00 --endtime 2026-12-02T00:00:00

`-a` every user's jobs (root or SlurmUser sees them all), `-X` allocations only (one line per
job, not per step).  These columns exist, with these names, in sacct 22.05 through 26.05
(SchedMD's sacct.1 field list).  A job that overlaps two pieces comes back in both; its
JobIDRaw keeps one.  A piece whose output passes the cap is split in two and read again, down
to `MIN_PIECE_S`; past that the accounting is unknown rather than silently cut.

Unknown (`Accounting.unknown` names why, in sacct's own words where it gave any): sacct
missing, its deadline, a non-zero exit (slurmdbd down: "Problem talking to the database";
AccountingStorageType=none: "Slurm accounting storage is disabled"), output without the
header.  Unknown never makes a node a suspect and never reads as "no failures".
"""

from __future__ import annotations

import datetime
import sys
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from ..fleetmodel import Accounting, Job
from ..outside import run_bounded
from ..tools import find_tool

if TYPE_CHECKING:
    from ..configsections import SuspectsConfig

COLUMNS = ("JobIDRaw", "User", "State", "ExitCode", "Start", "End", "NNodes", "NodeList")
MIN_PIECE_S = 600.0  # a piece this short that still passes the output cap is unknown
_NOT_A_TIME = {"", "Unknown", "None", "N/A"}


class SacctFormatError(ValueError):
    """The text is not `sacct --parsable2` output with the columns we need (names the source)."""


def _time(text: str, hours: Dict[str, float]) -> Optional[float]:
    """sacct's local time (`2026-12-04T10:00:03`) as epoch seconds; None where it has none.
    `hours` caches each hour's start (a million lines have a few hundred hours; zone and DST
    changes fall on whole hours)."""
    if text in _NOT_A_TIME:
        return None
    if len(text) == 19 and text[13] == ":" and text[16] == ":" and text[14:16].isdigit() and text[17:].isdigit():
        hour = hours.get(text[:13])
        if hour is None:
            try:
                hour = datetime.datetime.fromisoformat(text[:13] + ":00:00").timestamp()
            except ValueError:
                return None
            hours[text[:13]] = hour
        return hour + int(text[14:16]) * 60 + int(text[17:19])
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


class _Hosts:
    """NodeList (`gpu-[01-04,07]`, `None assigned`) to a tuple of names, through ClusterShell's
    NodeSet; a plain list without brackets is split here, and each distinct text is expanded
    once (a million jobs on ten thousand nodes repeat their lists)."""

    def __init__(self) -> None:
        self._seen: Dict[str, Tuple[str, ...]] = {}

    def expand(self, text: str) -> Tuple[str, ...]:
        got = self._seen.get(text)
        if got is None:
            if not text or text.startswith("None"):
                got = ()
            elif "[" not in text:
                got = tuple(sorted(set(text.split(","))))
            else:
                try:
                    from ClusterShell.NodeSet import NodeSet, NodeSetParseError
                except ImportError:
                    # every multi-node job would be skipped: the statistics would lean on
                    # single-node jobs alone, so the whole answer is unknown instead
                    raise SacctFormatError(
                        f"NodeList {text!r} needs ClusterShell to expand it, and it is not "
                        "installed (Debian/Ubuntu: python3-clustershell; EL: python3-clustershell "
                        "from EPEL; pip: ClusterShell)") from None

                try:
                    got = tuple(NodeSet(text))
                except NodeSetParseError as exc:
                    raise ValueError(f"NodeList {text!r}: {exc}") from None
            self._seen[text] = got
        return got


def parse_sacct(text: str, source: str, hosts: Optional[_Hosts] = None) -> Tuple[List[Job], List[str]]:
    """(jobs, notes) from `sacct --parsable2` text with a header.  Lines that cannot be read are
    skipped, each with a note naming the source and line; jobs that never started or have not
    ended are left out (nothing to judge yet); job steps (`1234.batch`) are left out.

    Raises:
        SacctFormatError: no header, or the header lacks one of COLUMNS.
    """
    return parse_sacct_lines(iter(text.splitlines()), source, hosts)


def parse_sacct_lines(lines: Iterator[str], source: str,
                      hosts: Optional[_Hosts] = None) -> Tuple[List[Job], List[str]]:
    """parse_sacct over lines as they are read (a file: its text is never held whole)."""
    hosts = hosts or _Hosts()
    first = next(lines, "").rstrip("\r\n")
    if not first.strip():
        raise SacctFormatError(f"{source}: empty; expected sacct --parsable2 output with a header")
    header = first.rstrip("|").split("|")
    where = {name: i for i, name in enumerate(header)}
    missing = [c for c in COLUMNS if c not in where]
    if missing:
        raise SacctFormatError(f"{source}: the header lacks {', '.join(missing)} (it needs "
                               f"{'|'.join(COLUMNS)}; got {first[:200]!r})")
    idx = [where[c] for c in COLUMNS]
    width = len(header)
    hours: Dict[str, float] = {}
    jobs: List[Job] = []
    notes: List[str] = []
    intern = sys.intern  # a million jobs name a few hundred users, a few states and exit codes
    for number, line in enumerate(lines, 2):
        line = line.rstrip("\r\n")
        if not line:
            continue
        fields = line.split("|")
        if len(fields) == width + 1 and fields[-1] == "":
            fields.pop()  # --parsable (not 2) ends each line with a separator
        if len(fields) != width:
            notes.append(f"{source}:{number}: {len(fields)} fields, the header has {width}; skipped")
            continue
        job_id, user, state, exit_code, start_s, end_s, _nnodes, nodelist = (fields[i] for i in idx)
        if "." in job_id:
            continue  # a step; -X leaves them out, a file may hold them
        start, end = _time(start_s, hours), _time(end_s, hours)
        if start is None or end is None:
            continue  # pending, running, or cancelled before it started
        try:
            nodes = hosts.expand(nodelist)
        except SacctFormatError:
            raise  # not this line's fault: no line could be read (ClusterShell missing)
        except ValueError as exc:
            notes.append(f"{source}:{number}: {exc}; skipped")
            continue
        if not nodes:
            continue
        jobs.append(Job(job_id, intern(user), intern(state.split(" ", 1)[0]), intern(exit_code), start, end, nodes))
    return jobs, notes


def _stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_argv(sacct: str, since: float, until: float) -> List[str]:
    return [sacct, "-a", "-X", "--parsable2", f"--format={','.join(COLUMNS)}",
            "--starttime", _stamp(since), "--endtime", _stamp(until)]


def pieces(since: float, until: float, piece_s: float) -> Iterable[Tuple[float, float]]:
    start = since
    while start < until:
        yield start, min(until, start + piece_s)
        start += piece_s


def read_accounting(cfg: "SuspectsConfig", environ: Mapping[str, str], since: float,
                    until: float) -> Accounting:
    """Every allocation that ran in [since, until), read through sacct piece by piece."""
    sacct = find_tool("sacct", cfg.sacct, environ)
    hosts = _Hosts()
    seen: Dict[str, Job] = {}
    notes: List[str] = []
    todo = list(pieces(since, until, cfg.sacct_piece_s))
    todo.reverse()
    while todo:
        lo, hi = todo.pop()
        ran = run_bounded(sacct_argv(sacct, lo, hi), cfg.sacct_timeout_s, cap_bytes=cfg.sacct_max_bytes)
        if not ran.ok:
            return Accounting(unknown=f"accounting unknown: {ran.why()}", notes=tuple(notes))
        if ran.truncated:
            if hi - lo <= MIN_PIECE_S:
                return Accounting(unknown=f"accounting unknown: sacct printed more than "
                                          f"suspects.sacct_max_bytes = {cfg.sacct_max_bytes} for "
                                          f"{_stamp(lo)}..{_stamp(hi)}", notes=tuple(notes))
            mid = (lo + hi) / 2  # too many jobs for one answer: ask for each half
            todo += [(mid, hi), (lo, mid)]
            continue
        try:
            jobs, why = parse_sacct(ran.text(), f"sacct {_stamp(lo)}..{_stamp(hi)}", hosts)
        except SacctFormatError as exc:
            return Accounting(unknown=f"accounting unknown: {exc}", notes=tuple(notes))
        notes += why
        for job in jobs:
            seen[job.job_id] = job
    return Accounting(tuple(seen.values()), None, tuple(notes))


def read_sacct_file(path: str) -> Accounting:
    """--sacct-file: saved `sacct --parsable2` output.  A file that cannot be read or has no
    usable header is unknown, naming the file."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            jobs, notes = parse_sacct_lines(iter(f), path)
    except OSError as exc:
        return Accounting(unknown=f"accounting unknown: cannot read {path}: {exc.strerror or exc}")
    except SacctFormatError as exc:
        return Accounting(unknown=f"accounting unknown: {exc}")
    unique = {j.job_id: j for j in jobs}
    return Accounting(tuple(unique.values()), None, tuple(notes))
