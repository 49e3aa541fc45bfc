"""decide.levels: the level that found a drain, and what a run must have judged to undo it."""

from __future__ import annotations

from healthcheck.decide.levels import drain_level, found_at, short_of, validation_level
from healthcheck.decide.verdict import NodeState, may_resume
from healthcheck.deepmodel import DcgmRead, DeepRun
from healthcheck.model import GpuSnapshot, NodeSnapshot

NODE = NodeSnapshot(host="gpu-a", gpus=tuple(GpuSnapshot(i, uuid=f"GPU-{i}") for i in range(8)))
DRAINED = NodeState("gpu-a", "IDLE+DRAIN", reason="gpu-healthcheck: gpu3 pci=00000000:48:00.0 "
                                                   "deep.hbm=1500 node")


def test_drain_levels_deep_checks_need_deep_the_full_probe_full_the_rest_any_level():
    assert found_at(("deep.hbm", "xid"), "deep") == "deep"
    assert found_at(("dcgm.diag",), "deep") == "deep"
    assert found_at(("cuda.probe",), "full") == "full"
    assert found_at(("cuda.probe",), "deep") == "quick"  # the quick probe at deep
    assert found_at(("xid", "ecc.volatile_uncorrected"), "deep") == "quick"
    # a reason naming a deep check is deep whatever the note says, or with no note at all
    assert drain_level(None, ("deep.hbm",)) == "deep" and drain_level("full", ("xid",)) == "full"


def test_drain_levels_validation_is_the_drains_level_and_never_below_full():
    assert [validation_level(lv) for lv in ("quick", "full", "deep")] == ["full", "full", "deep"]


def test_drain_levels_a_quick_pass_does_not_resume_a_deep_drain():
    why = short_of("deep", ("deep.hbm",), "quick", NODE)
    assert why and "drained at level deep (deep.hbm)" in why and "--level deep" in why
    assert may_resume(DRAINED, [], NODE.gpus, level_short=why) == why
    assert short_of("full", ("cuda.probe",), "quick", NODE)
    assert short_of("quick", ("xid",), "quick", NODE) is None


def test_drain_levels_a_deep_pass_that_did_not_run_the_drains_test_does_not_resume():
    assert "did not test" in short_of("deep", ("deep.hbm",), "deep", NODE)
    assert short_of("deep", ("deep.hbm",), "deep", NODE._replace(deep=DeepRun())) is None
    assert "dcgm.diag" in short_of("deep", ("dcgm.diag",), "deep", NODE._replace(dcgm=DcgmRead()))
    assert short_of("deep", ("dcgm.diag",), "deep", NODE._replace(dcgm=DcgmRead(diag_ran=True))) is None
