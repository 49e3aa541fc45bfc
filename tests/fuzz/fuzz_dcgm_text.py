#!/usr/bin/env python3
"""atheris target: healthcheck.read.dcgm.parse_diag on untrusted dcgmi diag output (the text
tables of read/dcgmtext.py, and the JSON).

    python3 tests/fuzz/fuzz_dcgm_text.py -max_total_time=20 tests/fuzz/corpus/dcgm_text

Invariants: never raises; every result's status is pass/fail/warn/skip and its GPU None or
>= 0; no results means an error; output with an error judges to unknown only, never a drain
(garbage or a table cut short is never a drain); a whole table cut at any line is an error.
"""

import sys

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.read.dcgm import diag_form, parse_diag
    from healthcheck.read.dcgmtext import BORDER, HEADER_END
    from healthcheck.checks import CheckContext, run_checks
    from healthcheck.config import Config
    from healthcheck.deepmodel import DcgmRead
    from healthcheck.model import GpuSnapshot, Mode, NodeSnapshot

# what the readers give (deepmodel.DcgmResult.status): a fail DCGM 4.x graded CONFIG, its own
# internal error, or UNKNOWN is "config", "internal" or "ungraded" (read/dcgm4.py)
STATUSES = {"pass", "fail", "warn", "skip", "config", "internal", "ungraded"}
NODE = NodeSnapshot(host="h", gpus=tuple(GpuSnapshot(i, uuid=f"GPU-{i}") for i in range(8)))
CTX = CheckContext(Config(), Mode.NODE, level="deep")


def judged(results, error):
    node = NODE._replace(dcgm=DcgmRead(diag=results, diag_error=error, diag_ran=True))
    findings, crashes = run_checks(node, CTX)
    assert not crashes, crashes
    return [f for f in findings if f.check == "dcgm.diag"]


def check(text):
    results, error = parse_diag(text)
    assert results or error, text
    for r in results:
        assert r.status in STATUSES and (r.gpu is None or r.gpu >= 0), r
    if error:
        found = judged(results, error)
        assert [f.severity.value for f in found] == ["unknown"] and not any(f.drains for f in found)
    return results, error


def TestOneInput(data: bytes) -> None:
    text = _common.text(data)
    results, error = check(text)
    if error is None and diag_form(text) == "table":
        # a whole table (not one of the JSON documents, which hold no table to cut): cut before
        # its footer (the first border after the header), it is cut short, never judged
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if HEADER_END.match(line.rstrip()))
        footer = next(i for i, line in enumerate(lines) if i > start and BORDER.match(line.rstrip()))
        _, cut = check("\n".join(lines[:footer]))
        assert cut, text


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
