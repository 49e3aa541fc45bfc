"""A GPU the admin took out of service drains nothing (issue 22, item 8), on the fake GPUs."""

from __future__ import annotations

import pytest

from tests.conftest import make_sysfs

DBE3 = "gpus = 8\ngpu.3.ecc.volatile.uncorrected = 2\n"  # GPU 3: an old double-bit error


@pytest.mark.parametrize("entry", ["1650522003803", "GPU-fa4e0000-0000-4000-8000-000000000003",
                                   "0000:48:00.0", "00000000:48:00.0"])
def test_gpu_out_of_service_in_exclude_gpus_is_info_never_a_drain(node, entry):
    assert node.run("--node", "--json", scenario=DBE3).rc == 2  # not excluded: it fails
    node.write_config(f'exclude_gpus = ["{entry}"]')
    result = node.run("--node", "--json", scenario=DBE3)
    assert result.rc == 0, result.stdout
    [dbe] = [f for f in result.json["findings"] if f["check"] == "ecc.volatile_uncorrected"]
    assert (dbe["gpu"], dbe["severity"], dbe["action"]) == (3, "info", "none")
    assert dbe["message"].startswith("out of service (exclude_gpus)")


def test_gpu_out_of_service_left_out_of_gres_conf_passes_the_prolog(node):
    node.gres_conf.write_text("AutoDetect=off\nName=gpu File=/dev/nvidia[0-2,4-7]\n")  # the README's example
    env = {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_GPUS": "3"}
    result = node.run("--prolog", "--json", scenario=DBE3, env=env)
    assert result.rc == 0, result.stdout
    assert [p["gpu"] for p in result.json["probes"]] == [4]  # gres index 3 is /dev/nvidia4
    [dbe] = [f for f in result.json["findings"] if f["check"] == "ecc.volatile_uncorrected"]
    assert dbe["severity"] == "info" and "in no gres record" in dbe["message"]
    # a job without GPUs judges every GPU too: still out of service
    result = node.run("--prolog", "--json", scenario=DBE3, env={k: v for k, v in env.items() if k != "SLURM_JOB_GPUS"})
    assert result.rc == 0, result.stdout
    # and the node check still fails it: --node judges the hardware, not Slurm's view
    assert node.run("--node", "--json", scenario=DBE3).rc == 2


@pytest.mark.parametrize("driver", ["vfio-pci", ""])
def test_gpu_count_leaves_out_functions_not_bound_to_nvidia(node, tmp_path, driver):
    node.sysfs = make_sysfs(tmp_path / "sys-a", nvidia=[f"0000:{b:02x}:00.0" for b in (0x18, 0x28)])
    make_sysfs(node.sysfs, nvidia=["0000:ca:00.0"], others=(), driver=driver)  # given to a VM, or unbound
    node.write_config()
    result = node.run("--node", "--json", scenario="gpus = 2\n")
    assert result.rc == 0, result.stdout
    [note] = [f for f in result.json["findings"] if f["check"] == "gpu.count"]
    assert note["severity"] == "info" and "0000:ca:00.0" in note["message"]
    assert (driver or "no driver") in note["message"]
