"""The deep level's published floors (checks/floors.py): DCGM 4.6.0's diag-skus minimum and
NVIDIA's datasheets, per model, on the fake GPUs through the real CLI; a model with none is
named, never silently passed; --check-config lists the models that have one."""

from __future__ import annotations

import json

from healthcheck.checks.floors import FLOORS, floor_of, hbm_floor

DEEP = "gpus = 8\ngpu.*.memory.total_mib = 24\n"
CONFIG = "[probe]\nfull_fraction = 0.35\n[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"
# the models the deep level must have a floor for (NVML's names)
REQUIRED = ["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe",
            "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A10", "NVIDIA A30", "NVIDIA A40",
            "NVIDIA L4", "NVIDIA L40S", "NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL",
            "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H800", "NVIDIA GH200 480GB", "NVIDIA B200",
            "NVIDIA GB200", "NVIDIA B300 SXM6 AC"]


def deep_run(node, scenario: str):
    node.write_config(CONFIG)
    return node.run("--node", "--level", "deep", "--json", scenario=DEEP + scenario, timeout=300)


def by_check(result, check):
    return [f for f in result.json["findings"] if f["check"] == check]


def test_deep_floors_cover_every_required_model_each_with_its_source():
    for model in REQUIRED:
        row = floor_of(model)
        assert row is not None, model
        assert row.hbm_gbps and row.gflops and "datasheet" in row.source, model
    # the longest prefix wins: H200 NVL is not the H200 SXM, A10 is not a prefix of A100
    assert floor_of("NVIDIA H200 NVL") is FLOORS["NVIDIA H200 NVL"]
    assert floor_of("NVIDIA A100-SXM4-80GB") is FLOORS["NVIDIA A100-SXM4-80GB"]
    assert floor_of("NVIDIA A1000") is None
    # DCGM's own minimum where DCGM lists a sane one; the datasheet share where it does not
    assert hbm_floor("NVIDIA B200", 0.6, ())[0] == 4072.5
    assert hbm_floor("NVIDIA H200", 0.6, ())[0] == 0.6 * 4800
    assert hbm_floor("NVIDIA B200", 0.6, ("NVIDIA B200:hbm_gbps=7000",))[0] == 0.6 * 7000


def test_deep_eight_b200_at_30_percent_fail_their_floors(node):
    # every GPU equally slow: the siblings' median is as slow, only the floor catches it
    result = deep_run(node, "gpu.*.name = NVIDIA B200\ngpu.*.perf.hbm_gbps = 2400\n"
                            "gpu.*.perf.gflops = 22500\ngpu.*.nvlink.peer_gbps = 800\n")
    assert result.rc == 2, result.stdout
    hbm, compute = by_check(result, "deep.hbm"), by_check(result, "deep.compute")
    assert sorted({f["gpu"] for f in hbm}) == list(range(8))
    assert all(f["severity"] == "fail" and f["action"] == "reset" for f in hbm + compute)
    assert all("below its floor 4,072 GB/s (DCGM's memory_bandwidth minimum for SKU 2901" in f["message"]
               for f in hbm)
    assert sorted(f["gpu"] for f in compute) == list(range(8))
    assert all("below its floor 45,000 GFLOP/s (60 % of the peak 75,000, NVIDIA HGX B200 datasheet"
               in f["message"] for f in compute)
    assert not by_check(result, "deep.floors")


def test_deep_unknown_model_says_it_has_no_floor(node):
    result = deep_run(node, "gpus = 1\ngpu.0.name = NVIDIA X900 Prototype\ngpu.0.perf.hbm_gbps = 100\n")
    [info] = by_check(result, "deep.floors")
    assert info["severity"] == "info" and info["gpu"] is None
    assert info["message"].startswith("no floor for NVIDIA X900 Prototype (GPU 0): its deep figures are "
                                      "judged against its siblings only")
    assert not by_check(result, "deep.hbm")  # nothing to judge it against: named, not passed silently
    # a site floor for the model: no info, and the floor judges it
    node.write_config(CONFIG.replace("[deep]\n", '[deep]\nfloors = ["NVIDIA X900 Prototype:hbm_gbps=1000"]\n'))
    result = node.run("--node", "--level", "deep", "--json", timeout=300)
    assert not by_check(result, "deep.floors")
    assert [f["severity"] for f in by_check(result, "deep.hbm")] == ["fail", "fail"]


def test_check_config_lists_the_models_with_floors(node):
    node.write_config(CONFIG.replace("[deep]\n", '[deep]\nfloors = ["NVIDIA X900 Prototype:gflops=1000"]\n'))
    result = node.run("--check-config", "--json")
    floors = json.loads(result.stdout)["deep_floors"]
    assert "NVIDIA X900 Prototype" in floors and "NVIDIA GB300" in floors and len(floors) == len(FLOORS) + 1


def test_deep_floors_table_in_the_docs_is_the_codes():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "deep.md").read_text()
    for model, row in FLOORS.items():
        line = next((ln for ln in doc.splitlines() if ln.startswith(f"| {model} |")), None)
        assert line is not None, model
        assert f"| {row.hbm_gbps:,.0f} |" in line and f"| {row.gflops:,.0f} |" in line and row.source in line
