#!/usr/bin/env python3
"""atheris target: healthcheck.read.sacct (`sacct --parsable2` text, the accounting door's and
--sacct-file's parser) and its NodeList expansion.

    python3 tests/fuzz/fuzz_sacct.py -max_total_time=20 tests/fuzz/corpus/sacct

The input is split at the first NUL into a NodeList and sacct text.  Invariants: the NodeList
expands to what ClusterShell's NodeSet gives, or is refused (ValueError naming it) where
NodeSet refuses it: the reader's own path for the one-bracket form must never differ from the
library; parse_sacct raises nothing but SacctFormatError (naming the source), and every job it
gives has an id without a step, a start and end that are numbers, and at least one node; a
line it cannot read is a note naming the source and line; read_sacct_file on the text as a
file never raises and its jobs are the parser's, each id once.
"""

import math
import os
import sys
import tempfile

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from ClusterShell.NodeSet import NodeSet

    from healthcheck.read.sacct import SacctFormatError, _Hosts, parse_sacct, read_sacct_file

WORK = tempfile.mkdtemp(prefix="fuzz-sacct-")


def check_nodelist(text: str) -> None:
    try:
        got = _Hosts().expand(text)
    except ValueError as exc:
        assert repr(text) in str(exc), exc
        return
    assert all(got), got
    if "[" in text and got:  # bounded: the reader refuses a list too large to expand
        assert got == tuple(NodeSet(text)), (text, got)


def TestOneInput(data: bytes) -> None:
    text = _common.text(data)
    nodelist, _, body = text.partition("\x00")
    check_nodelist(nodelist[:200])
    try:
        jobs, notes = parse_sacct(body, "fuzz.txt")
    except SacctFormatError as exc:
        assert "fuzz.txt" in str(exc), exc
        jobs, notes = None, []
    for job in jobs or ():
        assert "." not in job.job_id and job.nodes and all(job.nodes), job
        assert math.isfinite(job.start) and math.isfinite(job.end), job
    assert all(note.startswith("fuzz.txt:") for note in notes), notes
    path = os.path.join(WORK, "sacct.txt")
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(body)
    acct = read_sacct_file(path)
    if acct.unknown:
        assert path in acct.unknown and not acct.jobs, acct
    else:
        assert jobs is not None
        ids = [j.job_id for j in acct.jobs]
        assert len(ids) == len(set(ids)) and set(ids) == {j.job_id for j in jobs}, (ids, jobs)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
