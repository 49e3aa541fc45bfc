"""healthcheck/checks/floors.py, pure: the table's lookups (the deep.floors check that names a
model with none is checks/deeptopo.py's, in tests/unit/checks/test_deeptopo.py; the floors end
to end on the fake GPUs are in tests/cli/test_deep_floors.py)."""

from healthcheck.checks.floors import FLOORS, floor_of, has_floor, hbm_floor, peak


def test_floors_lookup_exact_then_longest_prefix_then_none():
    assert floor_of("NVIDIA H100 NVL") is FLOORS["NVIDIA H100 NVL"]
    assert floor_of("NVIDIA GH200 480GB") is FLOORS["NVIDIA GH200"]
    assert floor_of("NVIDIA B300 SXM6 AC") is FLOORS["NVIDIA B300"]
    assert floor_of("NVIDIA A1000") is None and floor_of(None) is None


def test_floors_site_entry_wins_and_gives_an_unknown_model_a_floor():
    site = ("NVIDIA X900:hbm_gbps=1000", "NVIDIA B200:gflops=70000")
    assert peak("NVIDIA B200", "gflops", site) == (70000.0, "site config deep.floors")
    assert has_floor("NVIDIA X900", site) and not has_floor("NVIDIA X900", ())
    assert hbm_floor("NVIDIA X900", 0.5, site)[0] == 500.0
    assert hbm_floor("NVIDIA X900", 0.5, ())[0] is None


def test_floors_nvlink_is_links_times_the_per_link_rate():
    assert FLOORS["NVIDIA H100 80GB HBM3"].nvlink_gbps == 18 * 25.0
    assert FLOORS["NVIDIA B200"].nvlink_gbps == 18 * 50.0
    assert FLOORS["NVIDIA L40S"].nvlink_gbps is None
