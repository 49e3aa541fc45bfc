"""perftest's `ib_write_bw` output as a plain record (pure: text in).

    run = parse_ib_write_bw(text)
    run.avg_gbps            # average bandwidth of the largest message size, Gb/s (None: no result)
    run.peak_gbps
    run.device              # "mlx5_0", from " Dual-port : OFF  Device : mlx5_0"
    run.errors              # lines that say the test could not run ("Couldn't connect to ...")

Both report formats, converted to Gb/s as perftest computes them (perftest_parameters.c,
print_report_bw: `format_factor = (report_fmt == MBS) ? 0x100000 : 125000000`):
- the default `BW peak[MB/sec]    BW average[MB/sec]`: MiB/s, so Gb/s = MB * 1048576 / 125e6;
- `--report_gbits`: `BW peak[Gb/sec]    BW average[Gb/sec]`, Gb/s as printed.
The result rows follow their header line up to the next dashed line; other lines in between
(`Conflicting CPU frequency values detected: ...`) are skipped.  A server and a client in one
log (a loopback run) give two results of one size: the lower average is the one kept.  A row cut
off (a truncated log, a run ended at its deadline) is no result.
"""

from __future__ import annotations

import math
import re
from typing import List, Optional, Tuple

from ..netmodel import IbRow, IbRun

_HEADER_RE = re.compile(r"#bytes\s+#?iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(Gb|MB)/sec\]")
_DEVICE_RE = re.compile(r"\bDevice\s*:\s*(\S+)")
_LINK_RE = re.compile(r"^\s*Link type\s*:\s*(\S+)")
# What perftest prints when it cannot run a test at all (perftest_communication.c and friends).
_ERROR_RE = re.compile(r"(Couldn't|Unable to|Failed to|failed to|Error:|ERROR|Conflicting parameters|"
                       r"No IB devices found|IB device \S+ not found|Segmentation fault)")
MB_TO_GBPS = 1048576 / 125e6
MAX_KEPT = 20


def _figure(text: str, factor: float) -> Optional[float]:
    try:
        value = float(text) * factor
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _row(line: str, factor: float) -> Optional[IbRow]:
    tokens = line.split()
    if len(tokens) < 4 or not all(t.isascii() and t.isdigit() for t in tokens[:2]):
        return None
    if len(tokens[0]) > 18 or len(tokens[1]) > 18:
        return None
    peak, avg = _figure(tokens[2], factor), _figure(tokens[3], factor)
    if peak is None or avg is None:
        return None
    return IbRow(int(tokens[0]), int(tokens[1]), peak, avg)


def parse_ib_write_bw(text: str) -> IbRun:
    rows: List[IbRow] = []
    errors: List[str] = []
    device = link = unit = None
    factor: Optional[float] = None  # inside a result table: the unit's factor to Gb/s
    for raw in text.splitlines():
        line = raw.strip()
        header = _HEADER_RE.search(line)
        if header:
            unit = header.group(2)
            factor = 1.0 if unit == "Gb" else MB_TO_GBPS
            continue
        if line.startswith("---"):
            factor = None
            continue
        if factor is not None:
            row = _row(line, factor)
            if row is not None:
                rows.append(row)
                continue
        if device is None:
            m = _DEVICE_RE.search(line)
            if m:
                device = m.group(1)
        if link is None:
            m = _LINK_RE.match(raw)
            if m:
                link = m.group(1)
        if _ERROR_RE.search(line) and len(errors) < MAX_KEPT:
            errors.append(line)
    return IbRun(tuple(rows), device, link, unit, tuple(errors))
