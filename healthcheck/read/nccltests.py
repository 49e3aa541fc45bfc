"""nccl-tests' output (`all_reduce_perf`, `all_gather_perf`, ...) as a plain record (pure: text in).

    run = parse_nccl_tests(text)
    run.busbw_gbps          # bus bandwidth at the largest message size, GB/s (None: no row)
    run.avg_busbw_gbps      # "# Avg bus bandwidth    : 68.4048" (None: the run never got there)
    run.wrong, run.out_of_bounds, run.oob_failed
    run.warnings            # the text after each "NCCL WARN"
    run.errors              # "Test NCCL failure common.cu:777 'unhandled system error'", ...
    run.hosts               # the hosts of the "#  Rank  N ... on HOST device ..." lines
    run.ranks, run.rank_lines  # distinct ranks, and rank lines (a rank printed twice: two runs)
    run.complete            # the summary was printed: the run was not cut off

What it reads, from nccl-tests' src/common.cu as real runs print it (tests/fixtures/fabric):
- the table rows, in both layouts: the current one (`size count type redop root time algbw
  busbw #wrong time algbw busbw #wrong`, redop `none` for all_gather; a large `#wrong` is
  printed in %g form, `1.04858e+06`, and counted) and the older one (no `root`, and for
  all_gather no `redop`; its `error` column is `N/A` without validation or the largest error as
  a float with it, never a count);
- `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth    : X` (a trailing blank is
  common; before nccl-tests 2.10 without the `#`);
- `NCCL WARN` lines (NCCL_DEBUG=WARN or INFO), and the test's own failures (`Test NCCL
  failure`, `NCCL failure`, `Test CUDA failure`, ` .. host pid N: Test failure ...`; 2.17 prints
  the last after every failed validation too, so wrong elements are judged before it:
  decide/sweep.judge_collective);
- every line may carry a launcher's prefix: Open MPI's `--tag-output` (`[1,0]<stdout>:`,
  with blanks before it where a log indents it) or srun's `--label` (`0: `);
- a run cut off anywhere (a hang ended at its deadline, a crash, a truncated log): rows cut
  mid-line are skipped, and `complete` stays False.

Which figure is judged: the bus bandwidth at the largest message size, the better of
out-of-place and in-place.  `# Avg bus bandwidth` averages every size from -b to -e, so it
depends on the sizes asked for (68 GB/s above for a run whose large messages reach 235 GB/s);
the largest size is the one nearest the links' capacity, which is what a floor is about.
"""

from __future__ import annotations

import math
import re
from typing import List, Optional, Tuple

from ..netmodel import NcclRow, NcclRun

# Open MPI's --tag-output ("[1,0]<stdout>:"), srun's --label ("0: ", "12: ").
_PREFIX_RE = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:\s)")
# Before nccl-tests 2.10 the summary and the header had no leading "#" (its PRINT(" Out of ...")).
_OOB_RE = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)\b")
_AVG_RE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_RANK_RE = re.compile(r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
# Greedy to the end, stripped after: a lazy `(.*?)\s*$` is quadratic on a line of blanks.
_WARN_RE = re.compile(r"\bNCCL WARN\s(.*)")
_FAILURE_RE = re.compile(r"\b((?:Test (?:NCCL|CUDA) failure|NCCL failure|Test failure)\b.*)")
# The data types nccl-tests prints in its `type` column (src/common.cu test_typenames).
_TYPES = frozenset({"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float",
                    "double", "bfloat16", "f8e4m3", "f8e5m2", "char", "int", "uint"})
MAX_KEPT = 20  # warnings and errors kept: a run that repeats one WARN per rank says it enough


def strip_prefix(line: str) -> str:
    """The line without a launcher's per-rank prefix."""
    return _PREFIX_RE.sub("", line, count=1)


def _number(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _count(text: str) -> Optional[int]:
    """A #wrong cell: a count; None for N/A or an older layout's float error."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None


def _wrong(text: str, counted: bool) -> Optional[int]:
    """A #wrong cell: a count, also in %g form ("1.04858e+06", nccl-tests prints large counts
    so) where the layout's column is `#wrong` (`counted`); None for N/A or an older layout's
    float error ("1e-07"), which is no count."""
    plain = _count(text)
    if plain is not None or not counted:
        return plain
    value = _number(text)
    return int(round(value)) if value is not None and 0 <= value < 1e18 else None


def parse_row(line: str) -> Optional[NcclRow]:
    """One table row, or None when the line is not one (a header, a log line, a row cut off)."""
    tokens = line.split()
    if not 11 <= len(tokens) <= 13 or tokens[2] not in _TYPES:
        return None
    size, count = _count(tokens[0]), _count(tokens[1])
    if size is None or count is None:
        return None
    middle = tokens[3:-8]  # redop and/or root, or nothing (older all_gather)
    if len(middle) > 2 or (middle and not middle[0].isalpha()):
        return None
    if len(middle) == 2 and _number(middle[1]) is None:
        return None
    time_out, algbw_out, busbw_out, wrong_out, _, _, busbw_in, wrong_in = tokens[-8:]
    figures = [_number(t) for t in (time_out, algbw_out, busbw_out, busbw_in)]
    if any(f is None or f < 0 for f in figures):
        return None
    for cell in (wrong_out, wrong_in):
        if _count(cell) is None and cell != "N/A" and _number(cell) is None:
            return None
    t_out, a_out, b_out, b_in = (float(f) for f in figures)  # type: ignore[arg-type]
    counted = len(middle) == 2  # the current layout (redop and root): its column is #wrong
    return NcclRow(size, count, tokens[2], middle[0] if middle else None, b_out, b_in, a_out, t_out,
                   _wrong(wrong_out, counted), _wrong(wrong_in, counted))


def parse_nccl_tests(text: str) -> NcclRun:
    """Everything nccl-tests printed (stdout and stderr merged, in any order) as an NcclRun."""
    rows: List[NcclRow] = []
    warnings: List[str] = []
    errors: List[str] = []
    hosts: List[str] = []
    ranks = set()
    rank_lines = 0
    avg: Optional[float] = None
    oob: Optional[int] = None
    failed = False
    for raw in text.splitlines():
        line = strip_prefix(raw).strip()
        if not line:
            continue
        m = _AVG_RE.match(line)
        if m:
            avg = _number(m.group(1))
            continue
        m = _OOB_RE.match(line)
        if m:
            oob, failed = int(m.group(1)), m.group(2) == "FAILED"
            continue
        m = _RANK_RE.match(line)
        if m:
            ranks.add(int(m.group(1)))
            rank_lines += 1
            if m.group(2) not in hosts:
                hosts.append(m.group(2))
            continue
        if line.startswith("#"):
            continue
        m = _WARN_RE.search(line)
        if m:
            warning = m.group(1).strip()
            if len(warnings) < MAX_KEPT and warning not in warnings:
                warnings.append(warning)
            continue
        m = _FAILURE_RE.search(line)
        if m:
            if len(errors) < MAX_KEPT:
                errors.append(m.group(1).strip())
            continue
        row = parse_row(line)
        if row is not None:
            rows.append(row)
    return NcclRun(tuple(rows), avg, oob, failed, tuple(warnings), tuple(errors), tuple(hosts),
                   len(ranks), rank_lines)
