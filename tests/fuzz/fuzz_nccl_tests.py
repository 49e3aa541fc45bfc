#!/usr/bin/env python3
"""atheris target: healthcheck.read.nccltests.parse_nccl_tests on untrusted nccl-tests output
(what a pair job's all_reduce_perf printed), and the sweep's judgement of it.

    python3 tests/fuzz/fuzz_nccl_tests.py -max_total_time=20 tests/fuzz/corpus/nccl_tests

Invariants: never raises; every figure is finite and >= 0; a run that never printed its
summary is not complete and is never judged a pass (a run cut off, garbage); a pass has a bus
bandwidth, no wrong element, no NCCL WARN and no failure line.
"""

import sys

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.decide.sweep import judge_collective
    from healthcheck.read.nccltests import parse_nccl_tests


def TestOneInput(data: bytes) -> None:
    text = _common.text(data)
    run = parse_nccl_tests(text)
    for row in run.rows:
        assert row.busbw_gbps >= 0 and row.size_bytes >= 0, row
    assert run.wrong >= 0
    if "Avg bus bandwidth" not in text:
        assert not run.complete
    busbw, problem = judge_collective(run, exited=0, timed_out=False)
    if problem is None:
        assert run.complete and busbw is not None and busbw >= 0
        assert run.wrong == 0 and not run.warnings and not run.errors and not run.oob_failed
    else:
        assert problem.strip(), run
    _, problem = judge_collective(run, exited=None, timed_out=True)
    assert problem is not None  # a run ended at its deadline never passes


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
