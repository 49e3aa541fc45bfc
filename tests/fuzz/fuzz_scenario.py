#!/usr/bin/env python3
"""atheris target: the fakegpu scenario parser (C, tests/fakegpu/scenario.c), through nvmlInit.

    make -C tests/fakegpu
    python3 tests/fuzz/fuzz_scenario.py -max_total_time=20 tests/fuzz/corpus/scenario

Each input is written to a scenario file and loaded by the fake libraries, in this process
(libFuzzer runs the target in its own child of tests/fuzz/run, so a crash kills only that).
Invariants: nvmlInitWithFlags returns 0 or 999 (or the scenario's own nvml.init_error);
999 comes with exactly one stderr line "fakegpu: PATH:LINE: what" whose LINE is a line of
the file; cuInit agrees (1 for a malformed scenario).  A memory error or signal in the parser
is a crash that libFuzzer reports.
"""

import ctypes
import os
import re
import sys
import tempfile

import _common
import atheris

BUILD = os.path.join(_common.ROOT, "tests", "fakegpu", "build")
TMP = tempfile.mkdtemp(prefix="fuzz-scenario-")
SCENARIO = os.path.join(TMP, "scenario")
ERR = os.path.join(TMP, "stderr")
os.environ["FAKEGPU_SCENARIO"] = SCENARIO  # putenv: the C getenv sees it
os.environ.pop("CUDA_VISIBLE_DEVICES", None)
NVML = ctypes.CDLL(os.path.join(BUILD, "libnvidia-ml.so.1"))
CUDA = ctypes.CDLL(os.path.join(BUILD, "libcuda.so.1"))
MESSAGE = re.compile(r"^fakegpu: %s:(\d+): \S.*$" % re.escape(SCENARIO))


def load(data: bytes):
    """(nvml rc, cuda rc, device count or None, what went to stderr) for this scenario."""
    with open(SCENARIO, "wb") as handle:
        handle.write(data)
    saved = os.dup(2)
    with open(ERR, "wb") as err:
        os.dup2(err.fileno(), 2)  # the library's one message per failed load, kept to check
    try:
        nvml = NVML.nvmlInitWithFlags(0)
        count = None
        if nvml == 0:
            c = ctypes.c_uint(0)
            assert NVML.nvmlDeviceGetCount_v2(ctypes.byref(c)) == 0
            count = c.value
            assert NVML.nvmlShutdown() == 0
        cuda = CUDA.cuInit(0)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    with open(ERR, "rb") as err:
        return nvml, cuda, count, err.read().decode("utf-8", "replace")


def TestOneInput(data: bytes) -> None:
    data = _common.expand(data)
    nvml, cuda, count, err = load(data)
    lines = err.split("\n")[:-1]  # not splitlines(): a quoted key may hold \x1c..\x1e
    if nvml == 999 and err:
        assert len(lines) == 2, err  # once for NVML, once for CUDA
        m = MESSAGE.match(lines[0])
        assert m and lines[1] == lines[0], err
        assert 1 <= int(m.group(1)) <= data.count(b"\n") + 1, err
        assert cuda == 1, cuda
        return
    assert not err, err
    if nvml != 0:  # only a scenario asking for it makes init fail quietly
        assert b"init_error" in data, (nvml, data)
        return
    assert count is not None and 0 <= count <= 256, count
    assert cuda in (0, 100), cuda  # 100: no devices


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
