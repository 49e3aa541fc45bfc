"""ECC off by the site's choice is info, not a warning (issue 22, item 18), on real replays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
DUMPS = TESTS / "fixtures" / "nvidia-smi-xml"


def _replay(dump: str) -> str:
    return subprocess.run([sys.executable, str(TESTS / "fakegpu" / "from_nvidia_smi.py"), str(DUMPS / f"{dump}.xml")],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("dump", ["dual_a5000-v13", "pro-6000-maxq-blackwell-v13", "rtx-4000-sff-ada-v13"])
def test_ecc_mode_off_on_a_workstation_board_is_info_and_the_node_passes(node, dump):
    result = node.run("--node", "--json", scenario=_replay(dump))
    assert result.rc == 0, (result.stdout, result.stderr)
    modes = [f for f in result.json["findings"] if f["check"] == "ecc.mode"]
    assert modes and all(f["severity"] == "info" and f["action"] == "none" for f in modes)
    assert "ships with ECC off" in modes[0]["message"]


def test_ecc_mode_off_on_a_data_centre_gpu_still_warns_unless_the_site_expects_it(node):
    scenario = 'gpus = 1\ngpu.0.name = NVIDIA H100 80GB HBM3\ngpu.0.ecc_mode = disabled\n'
    result = node.run("--node", "--json", scenario=scenario)
    assert result.rc == 1 and result.checks("warn") == ["ecc.mode"], result.stdout
    node.write_config("expect_ecc = false")
    result = node.run("--node", "--json", scenario=scenario)
    assert result.rc == 0 and result.checks("info") == ["ecc.mode"], result.stdout
    assert "expect_ecc = false" in result.json["findings"][0]["message"]
    node.write_config("expect_ecc = true")  # the site runs its RTX boards with ECC on
    result = node.run("--node", "--json", scenario=_replay("dual_a5000-v13"))
    assert result.rc == 1 and set(result.checks("warn")) == {"ecc.mode"}
