"""The CUDA allocation probe's result, judged."""

from __future__ import annotations

from typing import Iterator

from ..model import Action, Finding, GpuSnapshot, NodeSnapshot, ProbeStatus, Severity
from .fabric import fabric_training
from .registry import CheckContext, finding as _f, gpu_check, in_boot_grace, label


@gpu_check("cuda.probe", severity=Severity.FAIL, action=Action.RESET,
           threshold_key="probe.timeout_s")
def check_cuda_probe(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A real CUDA context could not allocate, write and read back memory on the GPU.

    Catches what NVML does not show: a GPU that initialises but cannot allocate
    (ECC_UNCORRECTABLE, OUT_OF_MEMORY from a leaked context), corrupts data, or hangs.
    Fails the GPU; the probe has a deadline and its child is killed past it.  CUDA error 802
    (SYSTEM_NOT_READY) on an NVSwitch node means the fabric is not ready (fabric manager not
    running, registration failed), not that memory is bad: the message says so, and while the
    fabric is still training within `boot_grace_s` it is unknown, never a drain.
    nvidia-smi equivalent: none (dcgmi diag -r 1 comes closest).
    """
    mine = [p for p in node.probes if p.index == gpu.index]
    if not mine or all(p.status is ProbeStatus.OK for p in mine):
        return
    # A MIG-enabled GPU has one probe per MIG device: any failed device is the GPU's fault;
    # devices that could not be probed only make it unknown.
    failed = [p for p in mine if p.status not in (ProbeStatus.OK, ProbeStatus.NOT_RUN)]
    if not failed:
        probe = next(p for p in mine if p.status is ProbeStatus.NOT_RUN)
        yield _f("cuda.probe", Severity.UNKNOWN, gpu, f"{label(gpu)}: CUDA probe not run: "
                 f"{probe.detail}", value=probe.status.value)
        return
    probe = failed[0]
    value = probe.cu_name or probe.status.value
    if probe.cu_result == 802 and fabric_training(gpu) and in_boot_grace(node, ctx):
        yield _f("cuda.probe", Severity.UNKNOWN, gpu,
                 f"{label(gpu)}: CUDA not ready yet (802): the NVSwitch fabric is still "
                 f"training after the driver loaded", value=value, threshold="ok")
        return
    action = Action.REBOOT if probe.cu_result == 802 else (
        Action.RMA if probe.status is ProbeStatus.MISMATCH else Action.RESET)
    if probe.cu_result == 802:
        hint = ("the NVSwitch fabric is not ready (system not yet initialized), not a memory "
                "fault: is nvidia-fabricmanager running? Restart it, or reboot")
    elif probe.status is ProbeStatus.MISMATCH:
        hint = "GPU memory returned wrong data: drain; RMA if it recurs after a reset"
    else:
        hint = "reset the GPU"
    where = f" on MIG device {probe.device}" if probe.device else ""
    yield _f("cuda.probe", Severity.FAIL, gpu,
             f"{label(gpu)}: CUDA probe{where} {probe.status.value}: {probe.detail}; {hint}",
             value=value, threshold="ok", action=action)
