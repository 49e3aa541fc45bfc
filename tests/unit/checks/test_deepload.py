"""healthcheck/checks/deepload.py (and deepshared.py), pure: each check on its snapshot record
(tests/lib/snapshots.FAULTS); the end-to-end cases on the fake GPUs are in
tests/cli/test_deep_load.py."""

from healthcheck.deepmodel import DeepGpu, DeepRun
from healthcheck.model import Action, Severity
from tests.lib.snapshots import HEALTHY, NODE, _DEEP_OK, catalogue_cases, found

globals().update(catalogue_cases("deepload"))


def _node(**deep):
    return NODE._replace(deep=DeepRun(gpus=(DeepGpu(0, "ok", **{**_DEEP_OK, **deep}),)))


def test_compute_wrong_names_how_many_in_how_many_launches_and_which_kernel():
    [f] = found(_node(launches=12, wrong_elements=7, wrong_launches=2, wrong_most=4,
                      wrong_kernels=("hc_mma_bf16",)), check="deep.compute_wrong")
    assert (f.severity, f.action, f.value) == (Severity.FAIL, Action.RMA, 4)
    assert "4 wrong element(s) in one launch, in 2 of 12 launches (7 in all; BF16 tensor-core GEMM)" in f.message


def test_throttle_says_when_each_reason_first_appeared_and_the_sustained_clock():
    [f] = found(_node(load_reasons=0x8, reasons_first_s=((0x8, 1.2),), load_s=3.1,
                      sm_clock_sustained_mhz=990, sm_clock_max_mhz=1980), check="deep.throttle")
    assert f.severity is Severity.WARN
    assert "HW_SLOWDOWN (from 1.2 s) in 3 s of load, SM clock 990 MHz of 1980 MHz" in f.message


def test_power_cap_alone_is_info_and_a_clock_at_its_maximum_is_silent():
    [f] = found(_node(load_reasons=0x4, sm_clock_sustained_mhz=1980, sm_clock_max_mhz=1980),
                check="deep.throttle")
    assert f.severity is Severity.INFO
    assert found(_node(load_reasons=0x4, sm_clock_sustained_mhz=1980, sm_clock_max_mhz=1980),
                 check="deep.clock") == []


def test_clock_below_its_siblings_names_the_median_and_the_reason():
    gpus = tuple(HEALTHY._replace(index=i, uuid=f"GPU-{i}") for i in range(3))
    deep = DeepRun(gpus=tuple(DeepGpu(i, "ok", sm_clock_sustained_mhz=1500 if i == 0 else 1900,
                                      sm_clock_max_mhz=1980, load_reasons=0x20 if i == 0 else 0)
                              for i in range(3)))
    [f] = found(NODE._replace(gpus=gpus, deep=deep), check="deep.clock")
    assert f.severity is Severity.WARN and f.value == 1500
    assert "79 % of its 2 siblings' median 1,900 MHz (limit 85 %); held down by SW_THERMAL" in f.message
