#!/usr/bin/env python3
"""atheris target: healthcheck.read.perftest.parse_ib_write_bw on untrusted ib_write_bw output.

    python3 tests/fuzz/fuzz_perftest.py -max_total_time=20 tests/fuzz/corpus/perftest

Invariants: never raises; every bandwidth is finite and >= 0; text without a result header has
no result (a run cut off before it measured is no figure, never a zero that passes).
"""

import sys

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.read.perftest import parse_ib_write_bw


def TestOneInput(data: bytes) -> None:
    text = _common.text(data)
    run = parse_ib_write_bw(text)
    for row in run.rows:
        assert row.avg_gbps >= 0 and row.peak_gbps >= 0 and row.avg_gbps < float("inf"), row
    if "BW average[" not in text:
        assert run.avg_gbps is None and not run.rows


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
