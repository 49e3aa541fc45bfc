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
