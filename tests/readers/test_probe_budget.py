"""The CUDA probe against the fake libcuda when the run's time budget cuts its deadline: a child
still reading memory back (gpu.N.cuda.readback_s_per_gib) is cut short, not hung; a child stuck
in the driver (gpu.N.cuda.hang_s) is a hang whatever cut its deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.lib.fakenode import ROOT

BUILD = ROOT / "tests" / "fakegpu" / "build"
PROBE = """
import json
from healthcheck.read.cudaprobe import ProbeSize, ProbeTarget, run_probes
targets = [ProbeTarget(i, "GPU-fa4e0000-0000-4000-8000-%012x" % i) for i in range(2)]
results = run_probes(targets, ProbeSize(full_fraction=0.9), timeout_s={timeout}, own_timeout_s={own})
print(json.dumps([[r.status.value, r.budget_cut, r.detail] for r in results]))
"""


def probe(tmp_path, scenario: str, timeout: float, own: float):
    path = tmp_path / "scenario"
    path.write_text("gpus = 2\ngpu.*.memory.total_mib = 4096\n" + scenario)
    env = {**os.environ, "LD_LIBRARY_PATH": str(BUILD), "FAKEGPU_SCENARIO": str(path),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE.format(timeout=timeout, own=own))],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_cuda_probe_still_reading_back_when_the_budget_ends_it_is_cut_short(tmp_path):
    # 3.6 GiB at 10 s a GiB: ~36 s of read-back, cut at 8 s by a budget below its own 60 s (8 s:
    # a loaded host's children have long been reading back by then)
    results = probe(tmp_path, "gpu.*.cuda.readback_s_per_gib = 10\n", timeout=8, own=60)
    assert [(s, cut) for s, cut, _ in results] == [("timeout", True)] * 2, results
    assert all("cut short at 8.0 s by the run's time budget" in d and "own deadline is 60.0 s" in d
               for _, _, d in results)


def test_cuda_probe_stuck_in_the_driver_is_a_hang_even_under_a_budget(tmp_path):
    # small boards: GPU 0 reads back in well under the 8 s, even on a loaded host; GPU 1 never
    # gets a context
    results = probe(tmp_path, "gpu.*.memory.total_mib = 64\ngpu.1.cuda.hang_s = 30\n", timeout=8, own=20)
    assert results[0][:2] == ["ok", False]
    assert results[1][:2] == ["timeout", False] and "did not finish within 8 s" in results[1][2]


def test_cuda_probe_past_its_own_deadline_is_a_timeout_however_it_moved(tmp_path):
    results = probe(tmp_path, "gpu.*.cuda.readback_s_per_gib = 2\n", timeout=2, own=2)
    assert [(s, cut) for s, cut, _ in results] == [("timeout", False)] * 2, results
