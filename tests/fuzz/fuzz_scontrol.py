#!/usr/bin/env python3
"""atheris target: healthcheck.act.scontrol.parse_show_nodes / parse_node_line / reason_time.

    python3 tests/fuzz/fuzz_scontrol.py -max_total_time=20 tests/fuzz/corpus/scontrol

Invariants: never raises; at most one node per line; a node name is non-empty without
whitespace; a reason is stripped and never "(null)"; a reason time holds no whitespace.
Input starting with "R" is structured: a real `scontrol -o show nodes` line is built around a
fuzzed NodeName, State and Reason, and those must come back exactly.
"""

import re
import sys

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.act import scontrol
    from healthcheck.decide.verdict import sanitise

from _common import HEAD, TERMINATOR  # noqa: E402


def check_node(node, line):
    assert node.name and not re.search(r"\s", node.name), node
    assert node.state and not re.search(r"\s", node.state), node
    if node.reason is not None:
        assert node.reason == node.reason.strip() and node.reason not in ("", "(null)", "none"), node
    when = scontrol.reason_time(line)
    assert when is None or (when and not re.search(r"\s", when)), when


def structured(fdp):
    name = re.sub(r"\s", "", fdp.ConsumeUnicodeNoSurrogates(20)) or "n"
    state = re.sub(r"\s", "", fdp.ConsumeUnicodeNoSurrogates(20)) or "IDLE"
    reason = sanitise(fdp.ConsumeUnicodeNoSurrogates(300))
    stamp = fdp.ConsumeBool()
    comment = fdp.ConsumeBool()
    if not reason or reason in ("(null)", "none") or TERMINATOR.search(" " + reason):
        return
    line = f"NodeName={name} " + HEAD.format(state=state) + f" Reason={reason}"
    if stamp:
        line += " [root@2026-11-29T19:01:02]"
    if comment:
        line += " Comment=x=y"
    node = scontrol.parse_node_line(line)
    assert (node.name, node.state, node.reason) == (name, state, reason), (line, node)
    assert scontrol.reason_time(line) == ("2026-11-29T19:01:02" if stamp else None), line


def TestOneInput(data: bytes) -> None:
    if data[:1] == b"R":
        structured(atheris.FuzzedDataProvider(data[1:]))
        return
    text = _common.text(data)
    lines = text.splitlines()
    nodes = scontrol.parse_show_nodes(text)
    assert len(nodes) <= len(lines)
    named = [line for line in lines if scontrol.parse_node_line(line) is not None]
    for node, line in zip(nodes, named):
        check_node(node, line)
    # one line as given, newlines and all (callers may pass one line that is not split)
    node = scontrol.parse_node_line(text)
    if node is not None:
        assert node.name and node.state
    scontrol.reason_time(text)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
