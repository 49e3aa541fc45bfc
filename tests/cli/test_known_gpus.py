"""A GPU that later vanishes keeps its name: `--node --act` keeps the GPUs NVML identified in
state_dir/known-gpus.json; a prolog that finds the GPU lost without a name, and a `--node` that
finds it gone from NVML (seven of expected_gpus = 8, renumbered), name it by its PCI address and
serial, in the finding, the JSON document and the drain reason.  The real CLI on the fake GPUs."""

from __future__ import annotations

import json

from tests.lib.gpucluster import pci, serial

JOB = {"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "0"}


def test_known_gpus_name_a_lost_gpu_in_the_prolog_and_a_missing_one_by_hand(node):
    assert node.run("--node", "--act", "--json").rc == 0  # healthy: its 8 GPUs are known
    known = json.loads((node.state_dir / "known-gpus.json").read_text())
    assert [g["serial"] for g in known["gpus"]] == [serial(i) for i in range(8)]
    # GPU 3 is lost: NVML lists it but knows neither its address nor its serial
    prolog = node.run("--prolog", "--json", env=JOB, scenario="gpus = 8\ngpu.3.lost = 1\n")
    assert prolog.rc == 1
    assert prolog.json["action"]["reason"] == f"gpu-healthcheck: gpu3 pci={pci(3)} sn={serial(3)} gpu.lost=GPU_IS_LOST prolog job=77"
    # it is gone from NVML after the boot: seven GPUs, the old 4-7 renumbered 3-6
    node.write_config("expected_gpus = 8")
    seven = "gpus = 7\n" + "".join(f"gpu.{i}.pci_bus_id = {pci(i + 1)}\ngpu.{i}.serial = {serial(i + 1)}\n"
                                   f"gpu.{i}.uuid = GPU-fa4e0000-0000-4000-8000-{i + 1:012x}\n" for i in range(3, 7))
    by_hand = node.run("--node", "--json", scenario=seven)
    assert by_hand.rc == 2
    [count] = [f for f in by_hand.json["findings"] if f["check"] == "gpu.count" and f["severity"] == "fail"]
    assert (count["gpu"], count["pci_bus_id"], count["serial"]) == (None, pci(3), serial(3)), count
    assert by_hand.json["action"]["reason"] == f"gpu-healthcheck: pci={pci(3)} sn={serial(3)} gpu.count=7 node"
    # a plain --node changes nothing: the record still knows GPU 3
    assert serial(3) in (node.state_dir / "known-gpus.json").read_text()
