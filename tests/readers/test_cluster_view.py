"""`gpu-healthcheck --cluster`'s one `scontrol -o show nodes` call, read through a stub scontrol
that prints literal Slurm 22.05 lines."""

from __future__ import annotations

import io
import json

from healthcheck.config import Config
from healthcheck.commands.cluster import show_cluster
from healthcheck.report.cluster import COLUMNS
from tests.lib.shownodes import SHOW_NODES, fake_scontrol


def test_show_cluster_makes_one_scontrol_call_and_prints_json(tmp_path):
    scontrol = tmp_path / "scontrol"
    calls = fake_scontrol(scontrol, SHOW_NODES)
    out = io.StringIO()
    rc = show_cluster(Config(scontrol=str(scontrol)), {}, True, out)
    assert rc == 0
    assert calls.read_text().splitlines() == ["-o show nodes"]
    doc = json.loads(out.getvalue())
    assert [d["node"] for d in doc] == ["gpu-a", "gpu-b", "gpu-f", "gpu-c", "gpu-e"]
    assert set(doc[0]) == set(COLUMNS) | {"ours", "refused", "raw_reason", "suspect"}
    assert doc[0]["suspect"] == []  # no --suspects run on this host
    assert doc[3]["ours"] is False and doc[3]["raw_reason"] == "bad fan, ticket 4711"


def test_failing_scontrol_exits_3_naming_it(tmp_path):
    scontrol = tmp_path / "scontrol"
    fake_scontrol(scontrol, "", rc=1)
    out, err = io.StringIO(), io.StringIO()
    assert show_cluster(Config(scontrol=str(scontrol)), {}, False, out, err) == 3
    assert str(scontrol) in err.getvalue() and "scontrol" in err.getvalue()
    assert "Unable to contact slurm controller" in err.getvalue()
    assert out.getvalue() == ""
    missing = tmp_path / "nowhere" / "scontrol"
    assert show_cluster(Config(scontrol=str(missing)), {}, False, out, err) == 3
    assert f"{missing} not found" in err.getvalue()
