"""The fake nvidia-smi (tests/fakegpu/nvidia_smi.c) resets the simulated GPU the way the driver
does, as the real pynvml then sees it through the fake NVML."""

from __future__ import annotations

import os
import subprocess
import sys

READ = ("import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(2); "
        "print(n.nvmlDeviceGetTotalEccErrors(h, 1, 0), n.nvmlDeviceGetRemappedRows(h)[2])")


def run(fake, scenario, *args):
    env = {**os.environ, "FAKEGPU_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake)}
    return subprocess.run([str(fake / "nvidia-smi"), *args], env=env, capture_output=True, text=True)


def nvml(fake, scenario):
    env = {**os.environ, "FAKEGPU_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake)}
    return subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True,
                          check=True).stdout.split()


def test_nvidia_smi_reset_clears_volatile_ecc_applies_the_pending_remap_and_logs_the_driver(fakegpu, tmp_path):
    klog = tmp_path / "kern.log"
    scenario = tmp_path / "s"
    scenario.write_text(f"gpus = 4\ngpu.*.fabric.state = not_supported\ngpu.*.persistence_mode = 0\nkernel_log = {klog}\n"
                        "gpu.2.ecc.volatile.uncorrected = 3\ngpu.2.remap.pending = 1\n")
    assert nvml(fakegpu, scenario) == ["3", "1"]
    done = run(fakegpu, scenario, "--gpu-reset", "-i", "2")
    assert (done.returncode, done.stdout) == (0, "GPU 00000000:38:00.0 was successfully reset.\n")
    assert nvml(fakegpu, scenario) == ["0", "0"]  # persistent: another process sees it
    assert "PCI:00000000:38:00.0 reset by nvidia-smi" in klog.read_text()


def test_nvidia_smi_reset_is_refused_with_the_drivers_message_while_a_process_holds_the_gpu(fakegpu, tmp_path):
    scenario = tmp_path / "s"
    scenario.write_text("gpus = 4\ngpu.*.fabric.state = not_supported\ngpu.*.persistence_mode = 0\ngpu.2.processes = 4242:100\n"
                        "gpu.2.ecc.volatile.uncorrected = 3\n")
    done = run(fakegpu, scenario, "--gpu-reset", "-i", "2")
    assert done.returncode == 255
    assert "GPU 00000000:38:00.0: In use by another client" in done.stdout
    assert "Please first kill\nall processes using this device" in done.stdout
    assert nvml(fakegpu, scenario)[0] == "3"


def test_nvidia_smi_reset_fails_recurs_and_nvswitch_grouping(fakegpu, tmp_path):
    scenario = tmp_path / "s"
    scenario.write_text("gpus = 4\ngpu.*.persistence_mode = 0\ngpu.2.ecc.volatile.uncorrected = 3\n")  # default: NVSwitch fabric
    single = run(fakegpu, scenario, "--gpu-reset", "-i", "2")
    assert single.returncode == 255 and "NVSwitch" in single.stdout
    assert run(fakegpu, scenario, "--gpu-reset").returncode == 0  # every GPU at once
    assert nvml(fakegpu, scenario)[0] == "0"
    scenario.write_text("gpus = 4\ngpu.*.fabric.state = not_supported\ngpu.*.persistence_mode = 0\ngpu.2.reset.fails = 1\n")
    failed = run(fakegpu, scenario, "--gpu-reset", "-i", "2")
    assert failed.returncode == 255 and "GPU 00000000:38:00.0: Unknown Error" in failed.stdout
    scenario.write_text("gpus = 4\ngpu.*.fabric.state = not_supported\ngpu.*.persistence_mode = 0\ngpu.2.fault.recurs = 1\n"
                        "gpu.2.ecc.volatile.uncorrected = 3\n")
    assert run(fakegpu, scenario, "--gpu-reset", "-i", "2").returncode == 0
    assert nvml(fakegpu, scenario)[0] == "3"  # the fault is back at once


def test_nvidia_smi_reset_is_refused_while_persistence_mode_is_on_and_pm_0_lifts_it(fakegpu, tmp_path):
    # NVIDIA/NVSentinel#1690 (real): "In use by another client" until `nvidia-smi -pm 0`
    scenario = tmp_path / "s"
    scenario.write_text("gpus = 4\ngpu.*.fabric.state = not_supported\ngpu.2.ecc.volatile.uncorrected = 3\n")
    refused = run(fakegpu, scenario, "--gpu-reset", "-i", "2")
    assert refused.returncode == 255 and "GPU 00000000:38:00.0: In use by another client" in refused.stdout
    off = run(fakegpu, scenario, "-pm", "0", "-i", "2")
    assert (off.returncode, off.stdout) == (0, "All done.\n")
    assert "gpu.2.persistence_mode = 0" in scenario.read_text()
    assert run(fakegpu, scenario, "--gpu-reset", "-i", "2").returncode == 0
    assert nvml(fakegpu, scenario)[0] == "0"
    assert run(fakegpu, scenario, "-pm", "1", "-i", "2").returncode == 0
    assert scenario.read_text().rstrip().endswith("gpu.2.persistence_mode = 1")
