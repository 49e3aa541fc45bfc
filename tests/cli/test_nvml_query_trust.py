"""Issue 22 item 3: a GPU whose NVML read breaks must not pass silently.  The real CLI on the
fake GPUs (tests/fakegpu: `gpu.N.failing` makes named queries return an NVML error; a name or
serial with bytes that are not UTF-8, as 555.x drivers have given: pynvml#53, nvitop#127,
gpustat#170)."""

from __future__ import annotations

from typing import Dict, List


def _of(doc: Dict, check: str) -> List[Dict]:
    return [f for f in doc["findings"] if f["check"] == check]


def test_nvml_query_a_non_utf8_serial_still_gets_the_gpu_read_and_judged(node):
    """Before: pynvml raised UnicodeDecodeError on the serial, the reader kept the fields read
    so far, and ECC, remap, memory and processes stayed None: the DBE below passed."""
    node.scenario.write_bytes(b"gpus = 2\ngpu.1.name = NVIDIA H100 \xff\xfe80GB\ngpu.1.serial = 16\xe9\n"
                              b"gpu.1.ecc.volatile.uncorrected = 2\n")
    result = node.run("--node", "--json")
    doc = result.json
    [ecc] = [f for f in doc["findings"] if f["check"] == "ecc.volatile_uncorrected"]
    assert (ecc["gpu"], ecc["severity"]) == (1, "fail"), result.stdout
    assert _of(doc, "nvml.query") == [] and result.rc == 2  # --node: 2 = fail


def test_nvml_query_an_error_on_a_health_query_is_unknown_naming_gpu_query_and_error(node):
    """Before: an NVML error other than NOT_SUPPORTED or the GPU-lost codes became None in
    query_errors, which nothing read, and the GPU passed."""
    result = node.run("--node", "--json", scenario="gpus = 2\ngpu.0.failing = RemappedRows\ngpu.0.failing.error = 10\n")
    [finding] = _of(result.json, "nvml.query")
    assert (finding["gpu"], finding["severity"]) == (0, "unknown")
    assert "RemappedRows" in finding["message"] and "TIMEOUT" in finding["message"]


def test_nvml_query_corrupted_inforom_is_a_fault_of_its_own(node):
    """NVML_ERROR_CORRUPTED_INFOROM (nvml.h: "infoROM is corrupted"): a person must reflash
    the InfoROM or RMA the board; the GPU fails and the node drains (--act)."""
    result = node.run("--node", "--json", scenario="gpus = 2\ngpu.1.failing = EccMode\ngpu.1.failing.error = 14\n")
    [finding] = _of(result.json, "nvml.query")
    assert (finding["gpu"], finding["severity"], finding["action"]) == (1, "fail", "drain")
    assert "CORRUPTED_INFOROM" in finding["message"] and "EccMode" in finding["message"]
    assert result.rc == 2  # --node: 2 = fail
