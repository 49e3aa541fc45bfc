"""A drain found at --level deep stays until a pass at that level, on the real test Slurm with
slurmd running our HealthCheckProgram (`--node --act`, level quick) every few seconds; and a
repaired deep fault is validated with the deep tests, not at level full."""

from __future__ import annotations

import json
import time
from typing import Dict, List

import pytest

from tests.lib.fakenode import FIXTURES, history
from tests.lib.gpucluster import GpuCluster, pci, require_slurm, serial
from tests.lib.repair import ledger_file, repair_events

pytestmark = pytest.mark.slurm

# Small fake boards and small bandwidth buffers: the fake runs the deep kernels on the host
# (tests/cli/test_deep_level.py uses the same figures).  Four GPUs, not eight: a deep run on the
# fakes takes half the time (9 s against 18 on a loaded 2-core machine: its peer pairs are 6,
# not 28), and GPU 3 still has three siblings to be judged against.
GPUS = 4
DEEP_SCENARIO = f"gpus = {GPUS}\ngpu.*.memory.total_mib = 24\ngpu.*.fabric.state = not_supported\n"
# duration_s: the sustained load of half a second the CLI tests use (tests/cli/test_deep_level.py);
# the default 30 s per deep run would only wait here.
DEEP_CONFIG = "[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n"
SLOW_HBM = "gpu.3.perf.hbm_gbps = 1500\n"  # half of its siblings' 3000 GB/s
DCGM_DIAG = FIXTURES / "dcgm" / "virtualclient__DCGMIDiag_r2_results.json"
HEALTH = FIXTURES / "dcgm" / "virtualclient__DCGMIHealthCheckResults.json"


def _dcgmi(c: GpuCluster) -> str:
    """A dcgmi printing real `dcgmi diag -r 2 -j` output (one test turned Fail while the file
    dcgm-fails exists) and a real healthy `dcgmi health -c -j`."""
    path = c.wd / "bin" / "dcgmi"
    path.write_text(f'#!/bin/sh\ncase "$1" in\n'
                    f'diag) if [ -e "{c.wd}/dcgm-fails" ]; then\n'
                    f'  sed \'0,/"status" : "Pass"/s//"status" : "Fail"/\' "{DCGM_DIAG}"\n'
                    f'else cat "{DCGM_DIAG}"; fi ;;\n'
                    f'health) cat "{HEALTH}" ;;\nesac\n')
    path.chmod(0o755)
    return str(path)


def _configure(c: GpuCluster, dcgm: bool, repair: bool = False) -> None:
    c.write_config("gpu-a")
    path = c.wd / "config" / "gpu-a.toml"
    extra = (f'[dcgm]\nenabled = "true"\nlevel = 2\n' if dcgm else '[dcgm]\nenabled = "false"\n')
    text = (f'dcgmi = "{_dcgmi(c)}"\nnvidia_smi = "{c.fake / "nvidia-smi"}"\n' + path.read_text()
            + DEEP_CONFIG + extra)
    if repair:
        text += "[repair]\nenabled = true\ncooldown_s = 0\n"
    path.write_text(text)


@pytest.fixture(scope="module")
def hc_cluster(tmp_path_factory, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("resumelevel"), fakegpu, nodes=["gpu-a"],
                   health_check_interval=5, gpus_per_node=GPUS)
    c.scenario("gpu-a").write_text(DEEP_SCENARIO)
    _configure(c, dcgm=False)
    with c.cluster:
        yield c


def _health_checks_after(c: GpuCluster, epoch: float) -> List[Dict]:
    """The HealthCheckProgram's runs (plain `--node --act`: level quick) since `epoch`."""
    return [r for r in history(c.state("gpu-a"))
            if r.get("mode") == "node" and r.get("level") == "quick" and (r.get("epoch") or 0) > epoch]


def _wait_health_checks(c: GpuCluster, epoch: float, count: int, timeout: float = 120) -> List[Dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = _health_checks_after(c, epoch)
        if len(runs) >= count:
            return runs
        time.sleep(0.2)
    raise AssertionError(f"slurmd ran HealthCheckProgram {len(_health_checks_after(c, epoch))} times "
                         f"in {timeout} s, wanted {count}")


def _deep_act(c: GpuCluster) -> Dict:
    done = c.check("gpu-a", "--node", "--act", "--level", "deep", "--json", timeout=300)
    return json.loads(done.stdout)


@pytest.mark.parametrize("fault,check", [("hbm", "deep.hbm"), ("dcgm", "dcgm.diag")])
def test_deep_drain_is_not_undone_by_the_health_check_programs_quick_pass(hc_cluster, fault, check):
    """`--node --act --level deep` drains for deep.hbm (GPU 3 at 1500 GB/s, siblings 3000) or
    dcgm.diag; slurmd's next HealthCheckProgram runs (`--node --act`, quick) pass, and before
    they resumed the node with the fault still there.  Now the note of our drain says level deep:
    they keep it drained, and a pass at --level deep once the fault is gone resumes it."""
    c = hc_cluster
    (c.wd / "dcgm-fails").unlink(missing_ok=True)
    _configure(c, dcgm=fault == "dcgm")
    c.scenario("gpu-a").write_text(DEEP_SCENARIO + (SLOW_HBM if fault == "hbm" else ""))
    if fault == "dcgm":
        (c.wd / "dcgm-fails").touch()
    doc = _deep_act(c)
    assert doc["action"]["taken"] == "drain", (doc["action"], doc["findings"])
    reason = c.reason("gpu-a")
    assert f" {check}=" in reason and reason.startswith("gpu-healthcheck: "), reason
    if fault == "hbm":
        assert reason.startswith(f"gpu-healthcheck: gpu3 pci={pci(3)} sn={serial(3)} deep.hbm=")
    drained_at = time.time()
    runs = _wait_health_checks(c, drained_at, 2)
    assert c.drained("gpu-a") and c.reason("gpu-a") == reason
    note = json.loads((c.state("gpu-a") / "our-drain.json").read_text())
    assert note["level"] == "deep" and check in note["checks"], note
    for run in runs:
        assert run["verdict"] == "pass" and run["action"]["taken"] == "none", run["action"]
        assert f"drained at level deep ({check}" in run["action"]["detail"], run["action"]
    # the fault is gone, but only a pass at --level deep says so
    c.scenario("gpu-a").write_text(DEEP_SCENARIO)
    (c.wd / "dcgm-fails").unlink(missing_ok=True)
    _wait_health_checks(c, time.time(), 1)
    assert c.drained("gpu-a")
    doc = _deep_act(c)
    # a warn (a figure near its sibling's ratio on a loaded machine) resumes as a pass does
    assert doc["verdict"] in ("pass", "warn") and doc["action"]["taken"] == "resume", (doc["action"], doc["findings"])
    assert not c.drained("gpu-a")


def test_deep_drain_is_kept_when_the_deep_run_did_not_test_what_drained_it(hc_cluster):
    """A --level deep run with dcgmi diag disabled has not looked at a dcgm.diag drain."""
    c = hc_cluster
    _configure(c, dcgm=True)
    c.scenario("gpu-a").write_text(DEEP_SCENARIO)
    (c.wd / "dcgm-fails").touch()
    assert _deep_act(c)["action"]["taken"] == "drain"
    assert " dcgm.diag=" in c.reason("gpu-a")
    (c.wd / "dcgm-fails").unlink()
    _configure(c, dcgm=False)
    doc = _deep_act(c)
    assert doc["action"]["taken"] == "none" and c.drained("gpu-a"), doc["action"]
    assert "drained for dcgm.diag, which this run did not test" in doc["action"]["detail"]
    _configure(c, dcgm=True)
    assert _deep_act(c)["action"]["taken"] == "resume" and not c.drained("gpu-a")


def test_repair_of_a_deep_fault_is_validated_with_the_deep_tests(hc_cluster):
    """[repair] on: a --level deep run drains for deep.hbm on GPU 3 and resets it; the reset does
    not make its HBM faster.  Before, the validation ran at level full, passed, and resumed the
    node with GPU 3 as slow as before.  Now it runs the deep tests again: still failing, drained."""
    c = hc_cluster
    _configure(c, dcgm=False, repair=True)
    c.scenario("gpu-a").write_text(DEEP_SCENARIO + SLOW_HBM)
    doc = _deep_act(c)
    assert c.drained("gpu-a"), doc["action"]
    assert doc["level"] == "deep" and " deep.hbm=" in c.reason("gpu-a"), c.reason("gpu-a")
    assert "# fakegpu nvidia-smi --gpu-reset -i 3" in c.scenario("gpu-a").read_text()
    steps = [e["message"] for e in repair_events(c, "gpu-a")]
    assert any("reset GPU(s) 3" in m and "--level deep" in m for m in steps), steps
    assert any("did not fix it (still_failing: deep.hbm)" in m for m in steps), steps
    ledger = json.loads(ledger_file(c, "gpu-a", 3).read_text())
    assert ledger["attempts"][-1]["outcome"] == "still_failing: deep.hbm"
    # the HealthCheckProgram's quick passes do not resume it either
    _wait_health_checks(c, time.time(), 1)
    assert c.drained("gpu-a")
    c.scenario("gpu-a").write_text(DEEP_SCENARIO)  # the board is replaced
    _configure(c, dcgm=False)
    assert _deep_act(c)["action"]["taken"] == "resume"
