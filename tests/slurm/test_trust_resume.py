"""What undoes a drain, on the real test Slurm (munge, slurmctld, slurmd, the real scontrol): a
GPU reset deals only with the Xids logged before it; a drain for a fault the prolog judges
(leaked memory) is repaired for that fault; a probe our own time budget cut short is unknown,
never a hung GPU, in a prolog and in the repair's validation."""

from __future__ import annotations

import json
import shutil
from typing import Dict

import pytest

from tests.lib.gpucluster import HEALTHY, GpuCluster, pci, require_slurm, serial
from tests.lib.repair import enable_repair, ledger_file, repair_events

pytestmark = pytest.mark.slurm

# GPU 2 of the fake is at PCI 00000000:38:00.0 (tests/fakegpu/README.md)
XID48 = "NVRM: Xid (PCI:0000:38:00): 48, pid=4242, name=python, Ch 00000008"
INIT = "NVRM: GPU at PCI:0000:38:00: GPU-00000002-0000-0000-0000-000000000000"
XID119 = ("NVRM: Xid (PCI:0000:38:00): 119, pid=4242, name=python, Timeout after 6s of waiting "
          "for RPC response from GPU2 GSP!")


def _line(stamp: float, text: str) -> str:
    return f"[{stamp:12.6f}] {text}\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("trustresume"), fakegpu, nodes=["gpu-a", "gpu-b"])
    with c.cluster:
        yield c


@pytest.fixture
def c(cluster):
    cluster.scenario("gpu-a").write_text(HEALTHY)
    cluster.write_config("gpu-a")
    shutil.rmtree(cluster.state("gpu-a"), ignore_errors=True)
    (cluster.wd / "kern" / "gpu-a.log").write_text("")
    if cluster.drained("gpu-a"):
        cluster.cluster.resume("gpu-a")
    if cluster.cluster.node_info("gpu-a").get("Comment"):
        cluster.cluster.run(["scontrol", "update", "NodeName=gpu-a", "Comment="], check=True)
    cluster.cluster.wait_node("gpu-a", lambda info: "DRAIN" not in info.get("State", ""), 30)
    return cluster


def _node_act(c: GpuCluster) -> Dict:
    done = c.check("gpu-a", "--node", "--act", "--json")
    return json.loads(done.stdout)


@pytest.mark.parametrize("marker", [True, False], ids=["init_line", "counters_only"])
def test_xid_logged_after_an_admins_reset_still_fails_and_is_not_acknowledged(c, marker):
    """A DBE and Xid 48 drain gpu-a; the admin resets GPU 2 (its volatile counters at 0, the
    driver's init line logged, or only the counters) but does not resume; GPU 2 then logs Xid
    119.  `--node` fails it.  Before, `--node --act` saw the reset, acknowledged every Xid up to
    the log's end, the 119 too, and resumed the node."""
    kern = c.wd / "kern" / "gpu-a.log"
    kern.write_text(_line(1234.5, XID48))
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.2.ecc.volatile.uncorrected = 1\n")
    assert _node_act(c)["action"]["taken"] == "drain"
    reason = c.reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: gpu2 pci={pci(2)} sn={serial(2)} "), reason
    c.scenario("gpu-a").write_text(HEALTHY)  # the admin's reset: the counters start over
    with kern.open("a") as log:
        if marker:
            log.write(_line(1300.0, INIT))
        log.write(_line(1400.0, XID119))
    plain = c.check("gpu-a", "--node", "--json")
    assert plain.returncode == 2
    assert (2, 119) in [(f["gpu"], f["value"]) for f in json.loads(plain.stdout)["findings"]
                        if f["check"] == "xid"]
    for _ in range(2):
        doc = _node_act(c)
        assert doc["action"]["taken"] == "none" and c.drained("gpu-a"), doc["action"]
        # the Xid 48 the reset dealt with no longer counts, the 119 after it does
        [xid] = [f for f in doc["findings"] if f["check"] == "xid"]
        assert (xid["gpu"], xid["value"], xid["severity"]) == (2, 119, "fail")
        assert doc["verdict"] == "fail"
    acks = json.loads((c.state("gpu-a") / "xid-acks.json").read_text()) \
        if (c.state("gpu-a") / "xid-acks.json").exists() else {}
    # every acknowledgement point lies before the 119's line (by file offset: the log is the
    # same file), so the 119 still counts (a text search finds '119' in a clock stamp)
    xid119_at = kern.read_bytes().index(_line(1400.0, XID119).encode())
    assert all(a["position"]["offset"] is not None and a["position"]["offset"] <= xid119_at
               for a in acks.values()), (xid119_at, acks)
    # an admin who deals with the new Xid too (gpu-healthcheck --ack) lets the node resume
    assert c.check("gpu-a", "--ack", "--gpus", "2").returncode == 0
    assert _node_act(c)["action"]["taken"] == "resume"


def _prolog(c: GpuCluster, gpus: str, env: Dict[str, str] = {}, timeout: float = 120):  # noqa: B006
    return c.check("gpu-a", "--prolog", "--json", timeout=timeout,
                   env={"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": gpus, "SLURMD_NODENAME": "gpu-a", **env})


def test_memory_leaked_a_prolog_drain_for_leaked_memory_is_repaired_and_resumed(c):
    """The prolog drains for 400 MiB leaked on GPU 4 (a fault the prolog fails and `--node`
    only warns of).  Before, the repair judged `--node`'s findings (nothing drains: no repair)
    while the resume kept the prolog's judgement (the cause is still there): drained for ever.
    Now both judge as the prolog did: GPU 4 is reset, validated and the node resumed."""
    enable_repair(c, "gpu-a", extra="[thresholds]\nmemory_leaked_mib = 256\n")
    with c.scenario("gpu-a").open("a") as scenario:
        # 400 of 1024 MiB: the quick probe (256 MiB) still fits, so only memory.leaked drains
        scenario.write("gpu.4.memory.used_mib = 400\n")
    assert _prolog(c, "4").returncode == 1
    assert c.reason("gpu-a").startswith(
        f"gpu-healthcheck: gpu4 pci={pci(4)} sn={serial(4)} memory.leaked=400 prolog job=4242")
    doc = _node_act(c)
    assert doc["action"]["taken"] == "resume", doc["action"]
    assert not c.drained("gpu-a"), c.reason("gpu-a")
    assert "# fakegpu nvidia-smi --gpu-reset -i 4" in c.scenario("gpu-a").read_text()
    ledger = json.loads(ledger_file(c, "gpu-a", 4).read_text())
    [attempt] = ledger["attempts"]
    assert (attempt["trigger"], attempt["outcome"]) == ("memory.leaked=400", "resumed"), attempt
    assert any("resumed" in e["message"] for e in repair_events(c, "gpu-a"))


# 8 x 80 GiB boards whose read-back takes real time (3 s a GiB: moving, never hung)
BIG_SLOW = "gpu.*.memory.total_mib = 81920\ngpu.*.cuda.readback_s_per_gib = 3\n"


def test_cuda_probe_cut_short_by_the_prologs_deadline_is_unknown_not_a_hung_gpu(c):
    """`--prolog --level full` with a 40 s deadline (the SPANK plugin's) on 8 x 80 GiB: the full
    read-back needs its own 20 s + 80 s, the budget leaves about 25.  Before, the probes' cut
    was judged `cuda.probe=timeout`: exit 1, the node drained and the job requeued."""
    c.scenario("gpu-a").write_text(HEALTHY + BIG_SLOW)
    done = c.check("gpu-a", "--prolog", "--json", "--level", "full", timeout=120,
                   env={"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7",
                        "SLURMD_NODENAME": "gpu-a", "GPU_HEALTHCHECK_DEADLINE_S": "40"})
    doc = json.loads(done.stdout)
    assert done.returncode == 0, (doc["verdict"], doc["findings"])
    assert doc["duration_s"] < 40
    probes = [f for f in doc["findings"] if f["check"] == "cuda.probe"]
    assert sorted(f["gpu"] for f in probes) == list(range(8))
    assert all(f["severity"] == "unknown" and f["value"] == "cut_short" for f in probes), probes
    assert "by the run's time budget" in probes[0]["message"]
    assert doc["action"]["taken"] == "none" and not c.drained("gpu-a")


def test_cuda_probe_cut_short_in_the_repairs_validation_is_not_still_failing_nor_rma(c):
    """A DBE on GPU 2 of 80 GiB boards; [repair] on with max_attempts = 1.  One `--node --act`
    drains, resets GPU 2 and validates at level full, whose read-back the run's 50 s budget
    cuts.  Before, that was "still_failing: ... cuda.probe", the attempt used up the window and
    the node was marked rma for a GPU the reset had fixed.  Now the attempt is "unvalidated",
    the node stays drained and the next `--node --act` (quick, clean counters) resumes it."""
    enable_repair(c, "gpu-a", extra="max_attempts = 1\n")
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write(BIG_SLOW + "gpu.2.ecc.volatile.uncorrected = 1\n")
    done = c.check("gpu-a", "--node", "--act", "--json", timeout=60)
    doc = json.loads(done.stdout)
    assert "# fakegpu nvidia-smi --gpu-reset -i 2" in c.scenario("gpu-a").read_text()
    assert c.drained("gpu-a") and "rma" not in c.reason("gpu-a").split(), c.reason("gpu-a")
    assert doc["action"]["detail"] == "unvalidated: cuda.probe", doc["action"]
    ledger = json.loads(ledger_file(c, "gpu-a", 2).read_text())
    [attempt] = ledger["attempts"]
    assert attempt["outcome"] == "unvalidated: cuda.probe", attempt
    assert any(e["message"].startswith("repair gpu-a: the check after the reset could not judge it")
               for e in repair_events(c, "gpu-a"))
    assert _node_act(c)["action"]["taken"] == "resume" and not c.drained("gpu-a")
