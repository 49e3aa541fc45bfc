"""The real `dcgmi nvlink --link-status` of tests/fixtures/dcgm/ (DCGM-198: two H100 NVL, all
18 links Down) as the NVML reader sees the same links on the fake GPUs: the DCGM bridge does not
run --link-status (DCGM reads these states from NVML; gpu-healthcheck reads NVML itself on every
level, the prolog included, without dcgmi's start-up), so `nvlink.down` is what that output
implies: both GPUs fail, reset, every link named."""

from __future__ import annotations

import re
from typing import Dict, List

from tests.lib.fakenode import FIXTURES

LINK_STATUS = FIXTURES / "dcgm" / "issue-DCGM-198__dcgmi-nvlink-link-status-all-down__2xH100-NVL.txt"


def link_status(text: str) -> Dict[int, List[str]]:
    """{gpuId: per-link letters} from the GPUs: block (Key: Up=U, Down=D, Disabled=X, Not Supported=_)."""
    gpus: Dict[int, List[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^\s+gpuId (\d+):$", line)
        if head:
            current = int(head.group(1))
        elif current is not None and re.match(r"^\s+[UDX_]( [UDX_])*$", line):
            gpus[current], current = line.split(), None
    return gpus


def test_dcgm_link_status_all_down_is_what_nvlink_down_finds_through_nvml(node):
    links = link_status(LINK_STATUS.read_text())
    assert links == {0: ["D"] * 18, 1: ["D"] * 18}
    scenario = f"gpus = {len(links)}\ngpu.*.name = NVIDIA H100 NVL\ngpu.*.nvlink.links = 18\n" + "".join(
        f"gpu.{g}.nvlink.down = {','.join(str(i) for i, s in enumerate(st) if s == 'D')}\n"
        for g, st in links.items())
    result = node.run("--node", "--json", scenario=scenario)
    assert result.rc == 2, result.stdout
    found = [f for f in result.json["findings"] if f["check"] == "nvlink.down"]
    assert [(f["gpu"], f["severity"], f["action"]) for f in found] == [(0, "fail", "reset"), (1, "fail", "reset")]
    every = ",".join(str(i) for i in range(18))
    assert all(f"links {every} inactive: 0 of 18 links active" in f["message"] for f in found)
