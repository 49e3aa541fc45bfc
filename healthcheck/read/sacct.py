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
import functools
import io
import operator
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from ..fleetmodel import Accounting, Job, gc_paused
from ..outside import run_bounded
from ..tools import find_tool

if TYPE_CHECKING:
    from ..configsections import SuspectsConfig

COLUMNS = ("JobIDRaw", "User", "State", "ExitCode", "Start", "End", "NNodes", "NodeList")
MIN_PIECE_S = 600.0  # a piece this short that still passes the output cap is unknown
_NOT_A_TIME = {"", "Unknown", "None", "N/A"}


class SacctFormatError(ValueError):
    """The text is not `sacct --parsable2` output with the columns we need (names the source)."""


def _time(text: str, minutes: Dict[str, float]) -> Optional[float]:
    """sacct's local time (`2026-12-04T10:00:03`) as epoch seconds; None where it has none.
    `minutes` caches each minute's start (a million lines have some tens of thousands of
    minutes; zone and DST changes fall on whole minutes)."""
    if len(text) == 19 and text[16] == ":" and text[17:].isdecimal():
        minute = minutes.get(text[:16])
        if minute is None:
            try:
                minute = datetime.datetime.fromisoformat(text[:16] + ":00").timestamp()
            except ValueError:
                return None
            minutes[text[:16]] = minute
        return minute + int(text[17:])
    if text in _NOT_A_TIME:
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


MAX_NODES = 65536  # in one job's NodeList: more is a garbled line (Slurm's largest clusters have tens of thousands)
_ELEMENT = re.compile(r"(?:[^,\[]|\[[^\]]*\])+")  # one name of a hostlist: commas in brackets are its own
_BRACKET = re.compile(r"\[([^\]]*)\]")
_LONG_NUMBER = re.compile(r"\d{19}")
_DIGIT_BESIDE_BRACKET = re.compile(r"\d\[|\]\d")
_HOSTNAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_RANGES = r"\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\]"
_HOSTLIST = re.compile(rf"(?:[A-Za-z0-9._-]|{_RANGES})+(?:,(?:[A-Za-z0-9._-]|{_RANGES})+)*")
_DIGITS = frozenset("0123456789")
_TABLE_CELLS = 1 << 22  # names kept in the lists per pattern (sliced, not formatted), all patterns together


def _most_names(hostlist: str) -> int:
    """The most names a Slurm hostlist (as _HOSTLIST takes it) can expand to: per name, the
    product of its brackets' sizes; summed over the names."""
    total = 0
    for element in _ELEMENT.findall(hostlist):
        names = 1
        for inner in _BRACKET.findall(element):
            names *= sum(int(hi or lo) - int(lo) + 1 if int(hi or lo) >= int(lo) else 1
                         for lo, _, hi in (part.partition("-") for part in inner.split(",")))
            if names > MAX_NODES:
                return names  # enough: no need to multiply numbers of a million digits
        total += names
    return total


class _Hosts:
    """NodeList (`gpu-[01-04,07]`, `None assigned`) to a tuple of names, through ClusterShell's
    NodeSet.  Each distinct text is expanded once (a million jobs on ten thousand nodes repeat
    their lists), and each node name is one string however many jobs name it.

    The one form Slurm writes for a job on one group of nodes, `prefix[1-4,7]suffix` (hostname
    characters around one bracket of ascending decimal ranges, no digit beside it), is expanded
    here without NodeSet: a distinct list of a 64-node job cost ~75 us in NodeSet, and a large
    cluster's accounting has hundreds of thousands of them.  It gives what NodeSet gives (the
    sacct fuzz target compares the two on every input); anything else, or a range this does
    not take as plainly ascending, goes to NodeSet."""

    def __init__(self) -> None:
        self.expanded: Dict[str, Tuple[str, ...]] = {}  # text -> names, each text once
        self._names: Dict[str, str] = {}
        self._tables: Dict[Tuple[str, int, str], List[Optional[str]]] = {}  # name by number
        self._cells = 0  # the tables' length, all together
        self._nodeset: Optional[Callable[[str], Any]] = None

    def expand(self, text: str) -> Tuple[str, ...]:
        got = self.expanded.get(text)
        if got is None:
            if not text or text.startswith("None"):
                got = ()
            elif "[" not in text:
                name = self._names.setdefault
                got = tuple(name(n, n) for n in sorted(set(text.split(",")) - {""}))
            else:
                got = self._simple(text) or self._by_nodeset(text)
            self.expanded[text] = got
        return got

    def _by_nodeset(self, text: str) -> Tuple[str, ...]:
        nodeset = self._library(text)
        if not _HOSTLIST.fullmatch(text) or _DIGIT_BESIDE_BRACKET.search(text):
            # NodeSet's own syntax beyond a Slurm hostlist (@group runs the site's group
            # resolver, "*" matches against it, !&^ are set operations, [-3-10] counts from
            # -3) is not accounting's, and one garbled bracket ("n110[-310-[-]2-20") kept
            # NodeSet 1.9 busy for good (fuzz_sacct found it): such a line is refused first.
            # So is a digit beside a bracket, which Slurm never writes (its number is every
            # trailing digit) and NodeSet reads into its range: "888[841-1275]" is 888841 to
            # 8881275, eight million numbers held at once
            raise ValueError(f"NodeList {text!r}: not a Slurm hostlist")
        # NodeSet holds each range as a set of numbers, and a name with two brackets as their
        # product: "n[0-999999999]" or "r[110-877]m[110-800]" (fuzz_sacct) would take the
        # memory or the time before it could be refused, so the names are counted first
        if _most_names(text) > MAX_NODES:
            raise ValueError(f"NodeList {text!r}: more than {MAX_NODES} nodes")
        try:
            got = nodeset(text)
            size = len(got)
        except Exception as exc:  # noqa: BLE001  NodeSetParseError, and for some garbled lists
            # an AssertionError or ValueError of ClusterShell's own (fuzz_sacct found them):
            # either way the line cannot be read, which is a note, not the end of the read
            raise ValueError(f"NodeList {text!r}: {exc or type(exc).__name__}") from None
        if size > MAX_NODES:
            raise ValueError(f"NodeList {text!r}: more than {MAX_NODES} nodes")
        name = self._names.setdefault
        return tuple(name(n, n) for n in got)

    def _library(self, text: str) -> Callable[[str], Any]:
        """ClusterShell's NodeSet without node groups (a NodeList names nodes, never groups)."""
        if self._nodeset is None:
            try:
                from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
            except ImportError:
                # every multi-node job would be skipped: the statistics would lean on
                # single-node jobs alone, so the whole answer is unknown instead
                raise SacctFormatError(
                    f"NodeList {text!r} needs ClusterShell to expand it, and it is not "
                    "installed (Debian/Ubuntu: python3-clustershell; EL: python3-clustershell "
                    "from EPEL; pip: ClusterShell)") from None
            self._nodeset = functools.partial(NodeSet, resolver=RESOLVER_NOGROUP)
        return self._nodeset

    def _simple(self, text: str) -> Optional[Tuple[str, ...]]:
        """`prefix[ranges]suffix` expanded as NodeSet would, or None where the text is any
        other form (NodeSet then reads it)."""
        self._library(text)  # a bracket means ClusterShell is needed, whichever path expands it
        open_at = text.find("[")
        close_at = text.find("]", open_at)
        prefix, inner, suffix = text[:open_at], text[open_at + 1:close_at], text[close_at + 1:]
        if close_at < 0 or not inner or not _HOSTNAME_CHARS.issuperset(prefix) \
                or not _HOSTNAME_CHARS.issuperset(suffix) or prefix[-1:] in _DIGITS \
                or suffix[:1] in _DIGITS or _LONG_NUMBER.search(text):
            # NodeSet reads digits beside a bracket into its numbers ("n7[9-10]" is n79..n710,
            # fuzz_sacct found it), and refuses a number in the name past 64 bits: its path
            # refuses both
            return None
        spans = []
        width = -1
        last = -1
        for part in inner.split(","):
            lo_s, dash, hi_s = part.partition("-")
            if dash and not hi_s:
                return None
            hi_s = hi_s or lo_s
            if not lo_s or not _DIGITS.issuperset(lo_s) or not _DIGITS.issuperset(hi_s):
                return None
            # zero-padded ("08") ranges keep their width; a plain one has no leading zero
            pad = len(lo_s) if len(lo_s) > 1 and lo_s[0] == "0" else 0
            if (pad and len(hi_s) != pad) or (not pad and len(hi_s) > 1 and hi_s[0] == "0"):
                return None
            if width not in (-1, pad):
                return None
            width = pad
            lo, hi = int(lo_s), int(hi_s)
            if lo <= last or hi < lo:
                return None  # overlapping or out of order: NodeSet sorts and merges those
            spans.append((lo, hi))
            last = hi
        if sum(hi + 1 - lo for lo, hi in spans) > MAX_NODES:
            return None  # NodeSet's path, which refuses it
        name = self._names.setdefault
        table = self._tables.get((prefix, width, suffix))
        need = last + 1 - (0 if table is None else len(table))
        if need > 0 and self._cells + need > _TABLE_CELLS:
            # past the tables' budget (a garbled file of many patterns or huge numbers): each
            # name made on its own
            return tuple(name(made, made) for made in (f"{prefix}{k:0{width}d}{suffix}"
                                                       for lo, hi in spans for k in range(lo, hi + 1)))
        if table is None:
            table = self._tables[(prefix, width, suffix)] = []
        if need > 0:
            table.extend([None] * need)
            self._cells += need
        out: List[str] = []
        for lo, hi in spans:
            seg = table[lo:hi + 1]
            if None in seg:
                for k in range(lo, hi + 1):
                    if table[k] is None:
                        made = f"{prefix}{k:0{width}d}{suffix}"
                        table[k] = name(made, made)
                seg = table[lo:hi + 1]
            out += seg  # type: ignore[arg-type]  # filled just above
        return tuple(out)


def parse_sacct(text: str, source: str, hosts: Optional[_Hosts] = None) -> Tuple[List[Job], List[str]]:
    """(jobs, notes) from `sacct --parsable2` text with a header.  Lines that cannot be read are
    skipped, each with a note naming the source and line; jobs that never started or have not
    ended are left out (nothing to judge yet); job steps (`1234.batch`) are left out.

    Raises:
        SacctFormatError: no header, or the header lacks one of COLUMNS.
    """
    # lines as a file gives them (\n, \r, \r\n): str.splitlines would also end one at a
    # vertical tab or a form feed, and --sacct-file would read the same text otherwise
    return parse_sacct_lines(iter(io.StringIO(text, newline="")), source, hosts)


def parse_sacct_lines(lines: Iterator[str], source: str,
                      hosts: Optional[_Hosts] = None) -> Tuple[List[Job], List[str]]:
    """parse_sacct over lines as they are read (a file: its text is never held whole)."""
    with gc_paused():
        return _parse(lines, source, hosts or _Hosts())


def _parse(lines: Iterator[str], source: str, hosts: _Hosts) -> Tuple[List[Job], List[str]]:
    first = next(lines, "").rstrip("\r\n")
    if not first.strip():
        raise SacctFormatError(f"{source}: empty; expected sacct --parsable2 output with a header")
    header = first.rstrip("|").split("|")
    where = {name: i for i, name in enumerate(header)}
    missing = [c for c in COLUMNS if c not in where]
    if missing:
        raise SacctFormatError(f"{source}: the header lacks {', '.join(missing)} (it needs "
                               f"{'|'.join(COLUMNS)}; got {first[:200]!r})")
    pick = operator.itemgetter(*(where[c] for c in COLUMNS))
    width = len(header)
    minutes: Dict[str, float] = {}
    jobs: List[Job] = []
    notes: List[str] = []
    # a million jobs name a few hundred users, a few states and exit codes: one string each
    strings: Dict[str, str] = {}
    same = strings.setdefault
    seen = hosts.expanded.get
    for number, line in enumerate(lines, 2):
        line = line.rstrip("\r\n")
        if not line:
            continue
        fields = line.split("|")
        if len(fields) != width:
            if len(fields) == width + 1 and fields[-1] == "":
                fields.pop()  # --parsable (not 2) ends each line with a separator
            else:
                notes.append(f"{source}:{number}: {len(fields)} fields, the header has {width}; skipped")
                continue
        job_id, user, state, exit_code, start_s, end_s, _nnodes, nodelist = pick(fields)
        if "." in job_id:
            continue  # a step; -X leaves them out, a file may hold them
        # _time's common case inline (two calls a line were a tenth of the read)
        minute = minutes.get(start_s[:16])
        if minute is not None and len(start_s) == 19 and start_s[16] == ":" and start_s[17:].isdecimal():
            start: Optional[float] = minute + int(start_s[17:])
        else:
            start = _time(start_s, minutes)
        minute = minutes.get(end_s[:16])
        if minute is not None and len(end_s) == 19 and end_s[16] == ":" and end_s[17:].isdecimal():
            end: Optional[float] = minute + int(end_s[17:])
        else:
            end = _time(end_s, minutes)
        if start is None or end is None:
            continue  # pending, running, or cancelled before it started
        nodes = seen(nodelist)
        if nodes is None:
            try:
                nodes = hosts.expand(nodelist)
            except SacctFormatError:
                raise  # not this line's fault: no line could be read (ClusterShell missing)
            except ValueError as exc:
                notes.append(f"{source}:{number}: {exc}; skipped")
                continue
        if not nodes:
            continue
        if " " in state:
            state = state.split(" ", 1)[0]  # "CANCELLED by 1000"
        jobs.append(Job(job_id, same(user, user), same(state, state), same(exit_code, exit_code),
                        start, end, nodes))
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
    return Accounting(_once(jobs), None, tuple(notes))


def _once(jobs: List[Job]) -> Tuple[Job, ...]:
    """Each JobIDRaw once (the last line of it wins, where it came first)."""
    unique = dict(zip(map(operator.itemgetter(0), jobs), jobs))
    return tuple(jobs) if len(unique) == len(jobs) else tuple(unique.values())
