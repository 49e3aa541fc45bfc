"""deploy/slurm/gpu-healthcheck-sweep's node selection (commands/idlesweep.py, on the one
`scontrol -o show nodes` reader) on real output (tests/fixtures/scontrol-show-nodes: Slurm 22.05
and 24.11, gpu-a and gpu-b IDLE+DRAIN, gpu-c IDLE) and the job it submits."""

from __future__ import annotations

import pytest

from healthcheck.act.scontrol import parse_show_nodes
from healthcheck.commands import idlesweep as sweep
from healthcheck.decide.sweepnodes import idle_nodes
from tests.lib.fakenode import ROOT

SHOW_NODES = ROOT / "tests" / "fixtures" / "scontrol-show-nodes"


@pytest.mark.parametrize("version", ["slurm-22.05", "slurm-24.11"])
def test_sweep_picks_only_the_plainly_idle_nodes_of_the_partition(version):
    nodes = parse_show_nodes((SHOW_NODES / f"{version}.txt").read_text())
    assert [n.name for n in nodes] == ["gpu-a", "gpu-b", "gpu-c"]
    # a Reason with spaces stays one field, and does not hide the fields after it
    assert nodes[1].reason.startswith("bad fan, ticket 4711")
    assert [n.state for n in nodes] == ["IDLE+DRAIN", "IDLE+DRAIN", "IDLE"]
    assert idle_nodes(nodes, "gpu") == ["gpu-c"]  # the drained nodes are never swept
    assert idle_nodes(nodes, "gpu-healthcheck-sweep") == []  # not in that partition
    assert idle_nodes(nodes, "gpu", already=["gpu-c"]) == []  # its sweep job is queued


def test_sweep_submits_one_exclusive_deep_job_per_node_into_the_hidden_partition():
    argv = sweep.sbatch_argv("sbatch", "gpu-healthcheck-sweep", "gpu-c", 30, "/usr/bin/gpu-healthcheck")
    assert argv[:9] == ["sbatch", "-p", "gpu-healthcheck-sweep", "-w", "gpu-c", "--exclusive",
                        "-J", "gpu-healthcheck-sweep", "-t"]
    assert argv[-2:] == ["--wrap", "/usr/bin/gpu-healthcheck --node --act --level deep"]
    assert sweep.requested_nodes("gpu-a\n\ngpu-c\n") == ["gpu-a", "gpu-c"]


def test_sweep_fabric_runs_the_fabric_sweep_on_the_same_partition_and_names_its_end():
    assert sweep.internode_argv("/usr/bin/gpu-healthcheck", "gpu-healthcheck-sweep") == \
        ["/usr/bin/gpu-healthcheck", "--internode-sweep", "--act", "--partition", "gpu-healthcheck-sweep"]
    # 0, 2 and 3 are the fabric sweep's own outcomes: none is an error of the timer's run
    for status in (0, 2, 3):
        words, failed = sweep.internode_words(status, 3600)
        assert words.startswith(f"exit {status}: ") and not failed
    assert sweep.internode_words(2, 3600)[0] == "exit 2: bad node(s) found, drained (see its table above)"
    assert sweep.internode_words(1, 3600) == ("exit 1: not one of its statuses (0, 2, 3); see its output above", True)
    assert sweep.internode_words(-9, 3600)[0].startswith("killed by signal 9: ")
    words, failed = sweep.internode_words(None, 3600)
    assert failed and words.startswith("passed its deadline of 3600 s and was stopped")
