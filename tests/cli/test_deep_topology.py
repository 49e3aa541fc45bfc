"""The deep level's peer test on real topologies, on the fake GPUs through the real CLI: NVML's
far end of each link (gpu.N.nvlink.L.remote) decides which pairs are copied between, each
judged against its own links x per-link rate; a slow pair is named with its links and warns,
a GPU slow with every peer fails."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

from healthcheck.deepmodel import GpuLinks, LinkEnd, Topology
from healthcheck.read.deeptopo import PeerPair, plan_pairs

CONFIG = "[probe]\nfull_fraction = 0.35\n[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


def bus(i: int) -> str:
    """The fake's default PCI address of GPU i (tests/fakegpu/scenario.c)."""
    return f"00000000:{0x18 + i * 0x10:02X}:00.0"


def deep_run(node, scenario: str):
    node.write_config(CONFIG)
    return node.run("--node", "--level", "deep", "--json", scenario=scenario, timeout=300)


def by_check(result, check):
    return [f for f in result.json["findings"] if f["check"] == check]


def bridged_pairs(n: int, links: int, name: str) -> str:
    """n boards bridged in pairs (0-1, 2-3, ...): every link of each goes to its partner."""
    lines = [f"gpus = {n}", "gpu.*.memory.total_mib = 24", f"gpu.*.name = {name}", f"gpu.*.nvlink.links = {links}"]
    lines += [f"gpu.{i}.nvlink.*.remote = {bus(i ^ 1)}" for i in range(n)]
    return "\n".join(lines) + "\n"


TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "msccl-tools__nvidia-smi-topo-m__DGX-1.txt"


def nv_links(text: str) -> Dict[int, List[Tuple[int, int]]]:
    """{GPU: [(peer, links)]} from the NV# cells of `nvidia-smi topo -m`."""
    lines = [ln.split("\t") for ln in text.splitlines() if ln.startswith("GPU")]
    out: Dict[int, List[Tuple[int, int]]] = {}
    for row in lines:
        gpu = int(row[0][3:])
        out[gpu] = [(peer, int(cell.strip()[2:])) for peer, cell in enumerate(row[1:9]) if cell.strip().startswith("NV")]
    return out


# DGX-1 (8 V100 SXM2, the hybrid cube mesh, 6 links per GPU): its real `nvidia-smi topo -m`
DGX1 = nv_links(TOPO.read_text())


def dgx1() -> str:
    lines = ["gpus = 8", "gpu.*.memory.total_mib = 24", "gpu.*.name = Tesla V100-SXM2-32GB",
             "gpu.*.nvlink.links = 6", "gpu.*.architecture = volta", "gpu.*.cuda_cc = 7.0",
             # 6 links at ~21 GB/s per link and direction, what a healthy DGX-1 copies
             "gpu.*.nvlink.peer_gbps = 126"]
    for gpu, peers in DGX1.items():
        link = 0
        for peer, count in peers:
            for _ in range(count):
                lines.append(f"gpu.{gpu}.nvlink.{link}.remote = {bus(peer)}")
                link += 1
        assert link == 6
    return "\n".join(lines) + "\n"


def test_deep_h100_nvl_bridged_in_pairs_passes_copying_each_pair_over_its_bridge(node):
    result = deep_run(node, bridged_pairs(4, 12, "NVIDIA H100 NVL"))
    assert result.rc == 0, result.json["findings"]
    peers = result.json["deep"]["peers"]
    assert [(p["src"], p["dst"], p["via"], p["links"]) for p in peers] == [
        (0, 1, "nvlink", list(range(12))), (2, 3, "nvlink", list(range(12)))]
    assert not [f for f in result.json["findings"] if f["check"].startswith("deep.")]


def test_deep_slow_bridge_names_that_pair_and_only_that_pair(node):
    result = deep_run(node, bridged_pairs(4, 12, "NVIDIA H100 NVL") + "gpu.2.nvlink.peer.3.gbps = 100\n")
    pair = by_check(result, "deep.nvlink_pair")
    assert [(f["gpu"], f["severity"], f["action"]) for f in pair] == [(None, "warn", "none")]
    message = pair[0]["message"]
    assert message.startswith("peer copy GPU 2 -> GPU 3 over NVLink links 0-11: 100 GB/s, below its floor "
                              "180 GB/s (60 % of 12 links x 25 GB/s, NVIDIA H100 datasheet")
    assert "GPU 0" not in message and "GPU 1" not in message
    assert not by_check(result, "deep.nvlink_peer")
    assert result.json["verdict"] == "warn"


def test_deep_dgx1_hybrid_cube_mesh_passes_each_pair_on_its_own_links(node):
    result = deep_run(node, dgx1())
    assert result.rc == 0, result.json["findings"]
    peers = {(p["src"], p["dst"]): p for p in result.json["deep"]["peers"]}
    expected = {(a, b) for a, ps in DGX1.items() for b, _ in ps if a < b}
    assert set(peers) == expected and len(expected) == 16
    assert {len(p["links"]) for p in peers.values()} == {1, 2}
    assert round(peers[(0, 1)]["gbps"]) == 21 and round(peers[(0, 3)]["gbps"]) == 42
    assert not [f for f in result.json["findings"] if f["check"].startswith("deep.")]


def test_deep_gpu_slow_with_every_peer_fails_that_gpu_alone(node):
    # GPU 5 of a DGX-1 copies at a third of its rate to and from each of its 4 peers
    slow = "".join(f"gpu.{a}.nvlink.peer.{b}.gbps = 6\n" for a in range(8) for b, _ in DGX1[a] if 5 in (a, b))
    result = deep_run(node, dgx1() + slow)
    peer = by_check(result, "deep.nvlink_peer")
    assert [(f["gpu"], f["severity"], f["action"]) for f in peer] == [(5, "fail", "reset")]
    assert "slow with all 4 of its peers" in peer[0]["message"]
    assert not by_check(result, "deep.nvlink_pair")


def test_deep_pcie_boards_copy_peer_to_peer_only_where_nvml_says_they_can(node):
    scenario = ("gpus = 4\ngpu.*.memory.total_mib = 24\ngpu.*.name = NVIDIA L40S\ngpu.*.nvlink.links = 0\n"
                "gpu.0.p2p.pcie = 1\ngpu.1.p2p.pcie = 1\ngpu.2.p2p.pcie = 1\n")
    result = deep_run(node, scenario)
    assert result.rc == 0, result.json["findings"]
    peers = result.json["deep"]["peers"]
    assert [(p["src"], p["dst"], p["via"]) for p in peers] == [(0, 1, "pcie"), (1, 2, "pcie"), (2, 0, "pcie")]
    assert all(round(p["gbps"]) == 50 for p in peers)


def test_plan_pairs_from_topology_records():
    def gpu(i, ends):
        return GpuLinks(i, bus(i), tuple(LinkEnd(link, remote, kind) for link, remote, kind in ends))

    nvl = Topology(gpus=(gpu(0, [(0, bus(1), "gpu"), (1, bus(1), "gpu")]),
                         gpu(1, [(0, bus(0), "gpu"), (1, bus(0), "gpu")]),
                         gpu(2, [(0, "00000000:C0:00.0", "switch")]), gpu(3, [(0, "00000000:C0:00.0", "switch")])))
    assert plan_pairs(nvl, [0, 1, 2, 3]) == (PeerPair(0, 1, "nvlink", (0, 1)), PeerPair(2, 3, "nvswitch", (0,)))
    # one GPU not under test: its pair is not copied
    assert plan_pairs(nvl, [0, 2, 3]) == (PeerPair(2, 3, "nvswitch", (0,)),)
    # a link whose far end says GPU but only one side sees it: no pair
    half = Topology(gpus=(gpu(0, [(0, bus(1), "gpu")]), gpu(1, [])))
    assert plan_pairs(half, [0, 1]) == ()


def test_deep_unknown_model_pairs_take_the_link_rate_of_nvmls_nvlink_version(node):
    # a model the floors table lacks: the per-link rate of the NVLink version NVML reports
    # (Hopper: 4.0, 25 GB/s) gives each pair its floor all the same
    result = deep_run(node, bridged_pairs(4, 12, "NVIDIA X900 Prototype") + "gpu.0.nvlink.peer.1.gbps = 90\n")
    [pair] = by_check(result, "deep.nvlink_pair")
    assert pair["message"].startswith("peer copy GPU 0 -> GPU 1 over NVLink links 0-11: 90 GB/s, below its floor "
                                      "180 GB/s (60 % of 12 links x 25 GB/s, NVML reports NVLink 4.0)")
    assert [f["severity"] for f in by_check(result, "deep.floors")] == ["info"]
