"""NVLink, the NVSwitch fabric and the new NVML keys through the real CLI on the fake GPUs, and
real nvidia-smi output replayed through the fake NVML (pure checks: tests/unit/checks/; real
kernel-log lines: tests/readers/test_kernlog_checks.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.lib.fakenode import FAKEGPU, FIXTURES, nvml_read

SMI = FIXTURES / "nvidia-smi"


def test_a_pcie_board_answers_not_supported_and_is_not_a_finding(node):
    [g] = nvml_read(node, "gpus = 1\ngpu.0.nvlink.links = 0\ngpu.0.fabric.state = not_supported\n"
                          "gpu.0.unsupported = RowRemapperHistogram\n")
    assert g["nvlink_links"] is None and g["fabric_state"] is None and g["remap_histogram"] is None
    assert g["query_errors"] == []
    result = node.run("--node", "--json", scenario="gpus = 1\ngpu.0.nvlink.links = 0\n"
                                                   "gpu.0.fabric.state = not_supported\n")
    assert result.json["verdict"] == "pass", result.stdout


@pytest.mark.parametrize("line, error", [
    ("gpu.0.nvlink.36.crc_errors = 1", "bad link"),
    ("gpu.0.nvlink.3.crc = 1", "unknown key"),
    ("gpu.0.nvlink.down = 1,x", "bad link list"),
    ("gpu.0.fabric.state = training", "bad fabric.state"),
    ("gpu.0.remap.histogram = 1,2,3", "bad remap.histogram"),
])
def test_bad_fabric_keys_fail_the_scenario_naming_the_line(node, line, error):
    node.scenario.write_text("gpus = 1\n" + line + "\n")
    result = node.run("--node", "--json")
    assert result.json["nvml_error"] is not None
    assert f"node.scenario:2: {error}" in result.stderr


# --- through the CLI ---------------------------------------------------------------------

def test_nvlink_down_link_5_of_gpu_3_fails_the_node_naming_gpu3_and_the_link(node):
    result = node.run("--node", "--json", scenario="gpus = 8\ngpu.*.nvlink.links = 18\ngpu.3.nvlink.down = 5\n")
    assert result.rc == 2, result.stdout
    doc = result.json
    [f] = [f for f in doc["findings"] if f["check"] == "nvlink.down"]
    assert f["gpu"] == 3 and f["value"] == "link5" and "link 5 inactive" in f["message"]
    assert doc["action"]["reason"].startswith("gpu-healthcheck: gpu3 pci=00000000:48:00.0 ")
    assert "nvlink.down=link5 node" in doc["action"]["reason"]
    assert doc["gpus"][3]["nvlink"]["down"] == [5]
    table = node.run("--node").stdout
    assert any(l.startswith("3 ") and "link 5 inactive" in l for l in table.splitlines()), table


def proc_with_uptime(tmp: Path, seconds: float) -> Path:
    proc = tmp / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "uptime").write_text(f"{seconds:.2f} 1000.00\n")
    return proc


def test_fabric_state_every_gpu_with_its_fabric_in_progress_is_unknown_and_never_drains(node, tmp_path):
    node.write_config(f'proc_root = "{proc_with_uptime(tmp_path, 42.0)}"')
    scenario = "gpus = 8\ngpu.*.fabric.state = in_progress\n"
    result = node.run("--node", "--json", "--act", scenario=scenario)
    doc = result.json
    assert result.rc == 3 and doc["verdict"] == "unknown", doc["findings"]
    fabric = [f for f in doc["findings"] if f["check"] == "fabric.state"]
    assert [f["gpu"] for f in fabric] == list(range(8))
    assert all(f["severity"] == "unknown" and "still training" in f["message"] for f in fabric)
    assert doc["action"]["taken"] == "none" and doc["action"]["reason"] is None
    # the prolog lets the job start: a fabric still training is not the node's fault
    env = {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_JOB_GPUS": "0"}
    prolog = node.run("--prolog", "--json", env=env)
    assert prolog.rc == 0 and prolog.json["action"]["reason"] is None, prolog.stdout


def test_fabric_state_still_in_progress_past_the_grace_fails(node, tmp_path):
    node.write_config(f'proc_root = "{proc_with_uptime(tmp_path, 7200.0)}"')
    result = node.run("--node", "--json", scenario="gpus = 8\ngpu.*.fabric.state = in_progress\n")
    assert result.rc == 2
    assert {f["severity"] for f in result.json["findings"] if f["check"] == "fabric.state"} == {"fail"}


def test_fabric_state_completed_with_an_error_status_fails_through_the_cli(node):
    result = node.run("--node", "--json", scenario="gpus = 8\ngpu.*.fabric.status = 23\n")
    assert result.rc == 2
    assert {f["check"] for f in result.json["findings"] if f["severity"] == "fail"} == {"fabric.state"}


def test_nvlink_errors_and_pcie_replay_new_during_the_job_are_counted_by_the_epilog(node):
    env = {"SLURM_JOB_ID": "41", "SLURMD_NODENAME": "n1", "SLURM_JOB_GPUS": "0,1"}
    node.scenario.write_text("gpus = 2\ngpu.*.pcie.replay = 67\ngpu.*.nvlink.*.crc_errors = 1\n")
    assert node.run("--prolog", env=env).rc == 0
    node.scenario.write_text("gpus = 2\ngpu.*.pcie.replay = 67\ngpu.1.pcie.replay = 500\n"
                             "gpu.*.nvlink.*.crc_errors = 1\ngpu.0.nvlink.7.crc_errors = 400\n"
                             "gpu.0.nvlink.7.recovery_errors = 2\n")
    result = node.run("--epilog", "--json", env=env)
    doc = result.json
    by_check = {(f["check"], f["gpu"]): f for f in doc["findings"]}
    nv = by_check[("nvlink.errors", 0)]
    assert nv["severity"] == "warn" and "399 CRC" in nv["message"] and "2 recovery" in nv["message"]
    assert "links 0,1,2" in nv["message"] or "7" in nv["message"]
    pcie = by_check[("pcie.replay", 1)]
    assert pcie["severity"] == "warn" and pcie["value"] == 433 and "new during the job" in pcie["message"]
    assert result.rc == 0 and doc["action"]["taken"] == "none"


def test_prometheus_textfile_has_link_errors_replays_and_fabric_state(node, tmp_path):
    prom = tmp_path / "gpu.prom"
    node.write_config(f'metrics_file = "{prom}"')
    node.run("--node", scenario="gpus = 2\ngpu.1.nvlink.3.replay_errors = 9\ngpu.0.pcie.replay = 5\n"
                                "gpu.1.fabric.status = 23\n")
    text = prom.read_text()
    assert re.search(r'gpu_healthcheck_gpu_nvlink_errors_total\{gpu="1",[^}]*type="replay",[^}]*\} 9', text)
    assert re.search(r'gpu_healthcheck_gpu_pcie_replays_total\{gpu="0",[^}]*\} 5', text)
    assert re.search(r'gpu_healthcheck_gpu_fabric_state\{gpu="1",[^}]*state="completed_error",[^}]*\} 1', text)
    assert re.search(r'gpu_healthcheck_gpu_fabric_state\{gpu="0",[^}]*state="completed",[^}]*\} 1', text)
    assert "# TYPE gpu_healthcheck_gpu_nvlink_links_down gauge" in text


# --- real nvidia-smi output, replayed ----------------------------------------------------

def convert(*paths: Path) -> str:
    import importlib.util

    spec = importlib.util.spec_from_file_location("from_nvidia_smi", FAKEGPU / "from_nvidia_smi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return "".join(module.convert(p) for p in paths)


H100_DUMPS = ["gpud__nvidia-smi-q__535.161.08__8xH100-80GB-HBM3.txt",
              "gpud__nvidia-smi-q__535.183.01__8xH100-80GB-HBM3.txt"]


@pytest.mark.parametrize("dump", H100_DUMPS)
def test_each_real_8xh100_text_dump_replays_to_pass(node, dump):
    scenario = convert(SMI / dump)
    assert "gpus = 8" in scenario and "gpu.7.fabric.state = completed" in scenario
    assert "gpu.0.remap.histogram = 2560,0,0,0,0" in scenario
    result = node.run("--node", "--json", scenario=scenario)
    doc = result.json
    assert len(doc["gpus"]) == 8 and all(g["fabric"]["state"] == 3 for g in doc["gpus"])
    assert doc["verdict"] == "pass" and result.rc == 0, doc["findings"]
    assert not [f for f in doc["findings"] if f["severity"] != "info"], doc["findings"]
    # The dumps show "HW Power Brake Slowdown: Active" (with the HW Slowdown it implies, and SW
    # thermal on one GPU of the 535.183 node) on healthy GPUs: each is reported, as info.
    braked = sum(1 for m in re.finditer(r"clocks_event_reasons = (0x[0-9A-F]+)", scenario)
                 if int(m[1], 16) & 0x80)
    assert braked >= 1
    slowed = [f for f in doc["findings"] if f["check"] == "clocks.hw_slowdown"]
    assert len(slowed) == braked and all("HW_POWER_BRAKE" in f["value"] for f in slowed), slowed


def test_clocks_hw_slowdown_the_same_dump_with_a_hw_thermal_slowdown_warns(node):
    scenario = convert(SMI / H100_DUMPS[0]).replace("gpu.3.clocks_event_reasons = 0x88",
                                                    "gpu.3.clocks_event_reasons = 0xC8")
    assert "gpu.3.clocks_event_reasons = 0xC8" in scenario
    result = node.run("--node", "--json", scenario=scenario)
    warned = [f for f in result.json["findings"] if f["severity"] == "warn"]
    assert result.json["verdict"] == "warn" and [f["check"] for f in warned] == ["clocks.hw_slowdown"]
    assert warned[0]["gpu"] == 3 and "HW_THERMAL" in warned[0]["message"]


def test_fabric_state_the_real_insufficient_resources_excerpt_replays_to_fail(node):
    scenario = convert(SMI / "issue-azhpc-images-pr506__nvidia-smi-q-fabric-insufficient-resources__excerpt.txt")
    assert "gpu.*.fabric.status = 23" in scenario
    result = node.run("--node", "--json", scenario=scenario)
    assert result.rc == 2
    assert {f["check"] for f in result.json["findings"]} == {"fabric.state"}
    assert "INSUFFICIENT_RESOURCES" in result.json["findings"][0]["message"]


def test_fabric_state_the_real_unhealthy_excerpt_replays_to_warn(node):
    scenario = convert(SMI / "issue-dra-driver-626__nvidia-smi-q-grep-fabric-health-unhealthy__excerpt.txt")
    result = node.run("--node", "--json", scenario=scenario)
    assert result.rc == 1 and {f["check"] for f in result.json["findings"]} == {"fabric.state"}


def test_nvlink_down_the_real_bad_nvlink_status_replays_to_fail_and_the_good_one_passes(node):
    bad = convert(SMI / "azurehpc__bad_nvlink_status__A100-SXM4-80GB.txt")
    assert "gpu.6.nvlink.links = 12" in bad
    result = node.run("--node", "--json", scenario="gpus = 8\n" + bad)
    assert result.rc == 2
    [f] = [f for f in result.json["findings"] if f["severity"] == "fail"]
    assert (f["check"], f["gpu"]) == ("nvlink.down", 6) and "0 of 12 links active" in f["message"]
    good = convert(SMI / "gpud__nvidia-smi-nvlink-status__8xA100-SXM4-80GB.txt")
    assert good.count("nvlink.links = 12") == 8
    assert node.run("--node", "--json", scenario="gpus = 8\n" + good).json["verdict"] == "pass"


def test_a_text_dump_and_its_nvlink_status_combine(node):
    scenario = convert(SMI / H100_DUMPS[0], SMI / "issue-bottlerocket-pr4418__nvidia-smi-nvlink-status-H100__first-2-of-8-gpus.txt")
    scenario = scenario.replace("clocks_event_reasons = 0x88", "clocks_event_reasons = 0x0")
    doc = node.run("--node", "--json", scenario=scenario).json
    assert doc["gpus"][0]["nvlink"]["links"] == 18 and doc["gpus"][2]["nvlink"] is None
    assert doc["verdict"] == "pass", doc["findings"]
