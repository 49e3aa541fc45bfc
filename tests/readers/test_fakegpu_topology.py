"""The fake NVML's NVLink topology (tests/fakegpu/nvml_topo.c) through the real pynvml, and
healthcheck.read.nvmltopo reading it: each link's far end, its device type, and PCIe peer to
peer by topology, as the real library reports them."""

from __future__ import annotations

import json
import subprocess
import sys

BRIDGED = ("gpus = 4\ngpu.*.nvlink.links = 2\n"
           "gpu.0.nvlink.*.remote = 00000000:28:00.0\ngpu.1.nvlink.*.remote = 00000000:18:00.0\n"
           "gpu.2.nvlink.0.remote = 00000000:38:00.0\ngpu.2.nvlink.1.remote = 0000000A:99:00.0\n"
           "gpu.3.nvlink.down = 1\n")


def run_child(node, code: str, scenario: str):
    node.scenario.write_text(scenario)
    done = subprocess.run([sys.executable, "-c", code], env=node.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_fake_nvml_far_ends_types_and_p2p_through_pynvml(node):
    code = """
import json, pynvml
pynvml.nvmlInit()
h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
ends = [[(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[g], l).busId.decode()
          if isinstance(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[g], l).busId, bytes)
          else pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[g], l).busId,
          pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h[g], l)) for l in range(2)] for g in range(4)]
p2p = {f"{a}{b}{k}": pynvml.nvmlDeviceGetP2PStatus(h[a], h[b], k) for a, b in ((0, 1), (0, 2), (2, 3)) for k in (0, 2)}
print(json.dumps({"ends": ends, "p2p": p2p}))
"""
    got = run_child(node, code, BRIDGED)
    gpu, unknown, switch = 0, 0xFF, 2
    assert got["ends"][0] == [["00000000:28:00.0", gpu], ["00000000:28:00.0", gpu]]
    assert got["ends"][2] == [["00000000:38:00.0", gpu], ["0000000A:99:00.0", unknown]]
    assert got["ends"][3] == [["00000000:C0:00.0", switch], ["00000000:C2:00.0", switch]]
    ok, chipset, not_supported = 0, 1, 5
    # 0-1 bridged; 0 and 2 share nothing; 2 links to 3 but 3 does not link back (on the switches)
    assert got["p2p"] == {"010": ok, "012": ok, "020": chipset, "022": not_supported, "230": chipset, "232": not_supported}


def test_read_topology_gives_each_active_links_far_end_and_the_pcie_peers(node):
    code = """
import json
from healthcheck.read.nvml import read_nvml
from healthcheck.read.nvmltopo import read_topology
print(json.dumps(read_topology(read_nvml(10).gpus)._asdict()))
"""
    scenario = BRIDGED + "gpu.*.nvlink.links = 2\ngpu.2.p2p.pcie = 1\ngpu.3.p2p.pcie = 1\n"
    topo = run_child(node, code, scenario)
    assert topo["error"] is None
    ends = {g[0]: [tuple(e) for e in g[2]] for g in topo["gpus"]}
    assert ends[0] == [(0, "00000000:28:00.0", "gpu"), (1, "00000000:28:00.0", "gpu")]
    assert ends[3] == [(0, "00000000:C0:00.0", "switch")]  # link 1 is down: not read
    assert ends[2][1] == (1, "0000000A:99:00.0", "unknown")
    assert [tuple(p) for p in topo["pcie_p2p"]] == [(2, 3)]


def test_fake_scenario_refuses_bad_topology_keys(node):
    for line, words in (("gpu.0.nvlink.0.remote = 28:00", "bad pci_bus_id"),
                        ("gpu.0.nvlink.peer.x.gbps = 3", "bad GPU"),
                        ("gpu.0.nvlink.peer.1.gbps = -3", "bad rate"),
                        ("gpu.0.nvlink.peer.1.speed = 3", "nvlink.peer.M.gbps")):
        node.scenario.write_text(f"gpus = 2\n{line}\n")
        done = subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"], env=node.env(),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and words in done.stderr, (line, done.stderr)
