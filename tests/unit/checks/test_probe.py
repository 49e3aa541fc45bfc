"""healthcheck/checks/probe.py, pure: the CUDA probe's results judged, on snapshot records."""

from __future__ import annotations

from healthcheck.model import Mode, Severity
from tests.lib.snapshots import NODE, catalogue_cases, found, gpu

FAIL, WARN, INFO, UNKNOWN = Severity.FAIL, Severity.WARN, Severity.INFO, Severity.UNKNOWN


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("probe"))


def test_cuda_probe_802_says_fabric_not_ready_not_bad_memory():
    from healthcheck.model import ProbeResult, ProbeStatus

    probe = (ProbeResult(0, ProbeStatus.INIT_ERROR, 802, "CUDA_ERROR_SYSTEM_NOT_READY", detail="cuInit"),)
    [f] = found(NODE._replace(probes=probe), Mode.PROLOG, "cuda.probe")
    assert f.severity is FAIL and "fabric is not ready" in f.message and "not a memory" in f.message
    training = gpu(fabric_state=2)._replace(probes=probe, driver_age_s=10.0)
    [f] = found(training, Mode.PROLOG, "cuda.probe")
    assert f.severity is UNKNOWN and not f.drains


# --- a GPU busy or closed, not faulty (issue 22, item 7) ---------------------------------------

def _busy(code, status="alloc_error", mode=0, procs=(), shared=("shard",), mps_pipe=None, job="42"):
    from healthcheck.model import JobContext, ProbeResult, ProbeStatus

    name = {2: "CUDA_ERROR_OUT_OF_MEMORY", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE"}.get(code)
    probe = ProbeResult(0, ProbeStatus(status), code, name, detail=f"cuMemAlloc_v2 returned {name} ({code})",
                        mps_pipe=mps_pipe)
    node = gpu(compute_mode=mode, processes=tuple(procs), memory_total_mib=81920, memory_used_mib=81920)
    return node._replace(probes=(probe,), shared_gres=shared, job=JobContext(job_id=job, gpu_ids=("0",)))


def _tenant(job_id="77", live=True, mib=81000, command="python train.py"):
    from healthcheck.model import GpuProcess

    return GpuProcess(4242, mib, "alice", command, job_id=job_id, job_live=live)


def test_cuda_probe_out_of_memory_behind_a_live_co_tenant_is_unknown_and_a_leak_still_fails():
    [f] = found(_busy(2, procs=[_tenant()]), Mode.PROLOG, "cuda.probe")
    assert f.severity is UNKNOWN and not f.drains and "reset the GPU" not in f.message
    assert "live job(s) 77 hold 81000 MiB of 81920 MiB" in f.message and "gres/shard" in f.message
    [f] = found(_busy(2), Mode.PROLOG, "cuda.probe")  # nothing live holds it: a leaked context
    assert f.severity is FAIL and "reset the GPU" in f.message
    # a stale job cgroup, or a node that shares no GPU: its memory is a leftover's, the GPU fails
    assert found(_busy(2, procs=[_tenant(live=False)]), Mode.PROLOG, "cuda.probe")[0].severity is FAIL
    assert found(_busy(2, procs=[_tenant()], shared=()), Mode.PROLOG, "cuda.probe")[0].severity is FAIL


def test_cuda_probe_a_context_refused_by_the_compute_mode_is_never_a_fail():
    [f] = found(_busy(46, "init_error", mode=2), Mode.PROLOG, "cuda.probe")
    assert f.severity is INFO and "compute mode PROHIBITED" in f.message
    [f] = found(_busy(46, "init_error", mode=3, procs=[_tenant(mib=1000)]), Mode.PROLOG, "cuda.probe")
    assert f.severity is UNKNOWN and "compute mode EXCLUSIVE_PROCESS" in f.message and "live job(s) 77" in f.message
    [f] = found(_busy(46, "init_error", mode=None), Mode.NODE, "cuda.probe")
    assert f.severity is UNKNOWN and "compute mode unknown" in f.message
    # 46 on a DEFAULT-mode GPU with no MPS is not explained by its configuration
    assert found(_busy(46, "init_error", mode=0), Mode.NODE, "cuda.probe")[0].severity is FAIL


def test_cuda_probe_an_mps_server_in_the_way_is_unknown_but_wrong_data_still_fails():
    from healthcheck.model import ProbeResult, ProbeStatus

    server = _tenant(job_id=None, live=None, mib=300, command="nvidia-cuda-mps-server")
    [f] = found(_busy(None, "timeout", procs=[server], shared=("mps",)), Mode.PROLOG, "cuda.probe")
    assert f.severity is UNKNOWN and "the MPS server (pid 4242)" in f.message
    [f] = found(_busy(805, "init_error", mps_pipe="/tmp/mps", shared=()), Mode.NODE, "cuda.probe")
    assert f.severity is UNKNOWN and "MPS client (CUDA_MPS_PIPE_DIRECTORY=/tmp/mps)" in f.message
    bad = _busy(None, procs=[server], shared=("mps",))._replace(
        probes=(ProbeResult(0, ProbeStatus.MISMATCH, detail="read back differs"),))
    assert found(bad, Mode.PROLOG, "cuda.probe")[0].severity is FAIL
    # without MPS a probe past its deadline is a hang: still a fault
    assert found(_busy(None, "timeout"), Mode.PROLOG, "cuda.probe")[0].severity is FAIL


def test_cuda_probe_sizes_below_what_live_co_tenants_leave():
    from healthcheck.read.cudaprobe import MIB, ProbeSize, probe_bytes
    from healthcheck.model import co_tenant_mib

    total = 81920 * MIB
    quick, full = ProbeSize(256), ProbeSize(256, 0.9)
    # alone on the GPU: quick_mib even when free memory is short (a leak must fail)
    assert probe_bytes(quick, 100 * MIB, total) == 256 * MIB
    # a co-tenant holds all but 120 MiB: half of what it leaves
    held = 81800
    assert probe_bytes(quick, 120 * MIB, total, held) == 60 * MIB
    assert probe_bytes(full, 120 * MIB, total, held) == 108 * MIB
    # memory NVML says it holds is not free even where the driver's free count lags behind
    assert probe_bytes(full, 40000 * MIB, total, held) == 108 * MIB
    node = _busy(2, procs=[_tenant(mib=held), _tenant(job_id="5", live=False, mib=50)])
    assert co_tenant_mib(node.gpus[0], node) == held  # the stale job's process is no co-tenant
    assert co_tenant_mib(node.gpus[0], node._replace(shared_gres=())) == 0


def test_cuda_probe_cut_short_by_the_runs_budget_is_unknown_and_a_hang_still_fails():
    from healthcheck.model import ProbeResult, ProbeStatus

    cut = ProbeResult(0, ProbeStatus.TIMEOUT, budget_cut=True,
                      detail="cut short at 25.0 s by the run's time budget, still reading memory back")
    [f] = found(NODE._replace(probes=(cut,)), Mode.PROLOG, "cuda.probe")
    assert f.severity is UNKNOWN and not f.drains and f.value == "cut_short"
    assert "not a fault of the GPU" in f.message and "cut short at 25.0 s" in f.message
    hung = cut._replace(budget_cut=False, detail="CUDA probe did not finish within 20 s; killed")
    [f] = found(NODE._replace(probes=(hung,)), Mode.PROLOG, "cuda.probe")
    assert f.severity is FAIL and f.value == "timeout"
