"""`gpu-healthcheck --cluster` through the real CLI, on a stub scontrol printing literal
`scontrol -o show nodes` lines (Slurm 22.05 format)."""

from __future__ import annotations

import json
import os

from healthcheck.report.cluster import COLUMNS
from tests.lib.shownodes import SHOW_NODES, fake_scontrol


def test_cluster_through_the_real_cli(node):
    # the node fixture points `scontrol` at <tmp>/no-scontrol: put a fake one there
    calls = fake_scontrol(node.tmp / "no-scontrol", SHOW_NODES)
    result = node.run("--cluster")
    assert result.rc == 0, result.stderr
    assert result.stdout.splitlines()[0].split() == [c.upper() for c in COLUMNS]
    assert "gpu-a" in result.stdout and "not ours:" in result.stdout
    result = node.run("--cluster", "--json")
    assert result.rc == 0 and json.loads(result.stdout)[0]["serial"] == "1650522003802"
    assert len(calls.read_text().splitlines()) == 2  # one call per invocation
    os.unlink(node.tmp / "no-scontrol")
    result = node.run("--cluster")
    assert result.rc == 3 and "scontrol" in result.stderr
