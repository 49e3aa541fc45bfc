"""The SRAM field-diagnostics threshold on the fake GPUs, through the real CLI: its own check
fails rma, and an Xid 48 on that GPU goes to field diagnostics (rma), not to a reset, as
NVIDIA's Xid catalogue's workflow for 48 says."""

from __future__ import annotations

XID48 = ("[  100.000000] NVRM: Xid (PCI:0000:{bus}:00): 48, pid=1234, "
         "name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the "
         "framebuffer at partition 0, subpartition 0.\n")


def _bus(node, index: int) -> str:
    done = node.run("--node", "--json")
    gpu = next(g for g in done.json["gpus"] if g["index"] == index)
    return gpu["pci_bus_id"].split(":")[1].lower()


def test_ecc_sram_threshold_fails_rma_naming_the_gpu(node):
    done = node.run("--node", "--json", scenario="gpus = 4\ngpu.3.sram.threshold_exceeded = 1\n"
                                                 "gpu.3.sram.aggregate.uncorrected_secded = 7\n")
    assert done.rc == 2, done.stdout + done.stderr
    [finding] = [f for f in done.json["findings"] if f["check"] == "ecc.sram_threshold"]
    assert (finding["severity"], finding["action"], finding["gpu"]) == ("fail", "rma", 3)
    assert "field diagnostics" in finding["message"] and "7 uncorrectable SRAM" in finding["message"]


def test_ecc_sram_threshold_healthy_node_passes(node):
    done = node.run("--node", "--json", scenario="gpus = 4\n")
    assert done.rc == 0, done.stdout + done.stderr
    assert "ecc.sram_threshold" not in done.checks()


def test_xid_48_with_the_nvml_sram_threshold_flag_goes_to_rma_not_reset(node):
    node.scenario.write_text("gpus = 4\n")
    bus = _bus(node, 2)
    node.kernel_log.write_text(XID48.format(bus=bus))
    done = node.run("--node", "--json")
    [xid] = [f for f in done.json["findings"] if f["check"] == "xid"]
    assert xid["action"] == "reset", xid  # without the flag: NVIDIA's bucket, a reset
    done = node.run("--node", "--json", scenario="gpus = 4\ngpu.2.sram.threshold_exceeded = 1\n")
    [xid] = [f for f in done.json["findings"] if f["check"] == "xid"]
    assert (xid["severity"], xid["action"], xid["gpu"]) == ("fail", "rma", 2), xid
    assert "SRAM error threshold exceeded (NVML)" in xid["message"]


def test_ecc_sram_threshold_real_535_dump_replays_the_flag_and_its_gpus_pass(node):
    # Real: gpud's 8x H100 `nvidia-smi -q` (driver 535.161.08) shows "SRAM Threshold Exceeded: No"
    # on every GPU; the replay carries the flag, and a "Yes" in its place fails that GPU
    from tests.cli.test_replay_excerpts import H100_DUMP, convert

    text = H100_DUMP.read_text()
    scenario = convert(text)
    assert scenario.count("sram.threshold_exceeded = 0") == 8, scenario
    done = node.run("--node", "--json", scenario=scenario)
    assert "ecc.sram_threshold" not in done.checks(), done.stdout
    lines = text.splitlines()
    fourth = [i for i, line in enumerate(lines) if "SRAM Threshold Exceeded" in line][3]
    lines[fourth] = lines[fourth].replace(": No", ": Yes")
    done = node.run("--node", "--json", scenario=convert("\n".join(lines) + "\n"))
    [finding] = [f for f in done.json["findings"] if f["check"] == "ecc.sram_threshold"]
    assert (finding["gpu"], finding["action"]) == (3, "rma"), finding
