"""The CUDA allocation probe's result, judged."""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

from ..model import (Action, Finding, GpuSnapshot, NodeSnapshot, ProbeResult, ProbeStatus, Severity,
                     co_tenant_mib, is_mps_daemon, not_a_co_tenant)
from .fabric import fabric_training
from .registry import CheckContext, finding as _f, gpu_check, in_boot_grace, label


@gpu_check("cuda.probe", severity=Severity.FAIL, action=Action.RESET,
           threshold_key="probe.timeout_s")
def check_cuda_probe(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A real CUDA context could not allocate, write and read back memory on the GPU.

    Catches what NVML does not show: a GPU that initialises but cannot allocate
    (ECC_UNCORRECTABLE, OUT_OF_MEMORY from a leaked context), corrupts data, or hangs.
    Fails the GPU; the probe has a deadline and its child is killed past it.  A probe the
    run's own time budget cut short while it was still reading memory back (the SPANK
    plugin's deadline, act_budget_s: shorter than the probe's own deadline, which allows 1 s
    per GiB at --level full) is unknown: not checked, never a hung GPU.  A GPU that is
    busy or closed by its configuration is not failed (`busy_not_faulty`): a context refused
    (CUDA_ERROR_DEVICE_UNAVAILABLE, 46) under compute mode EXCLUSIVE_PROCESS (unknown) or
    PROHIBITED (info), out of memory while live co-tenants of a shared GPU (gres/shard,
    gres/mps) hold its memory, or an MPS server in the way (unknown); never a reset.  CUDA error 802
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
    failed = [p for p in mine if p.status not in (ProbeStatus.OK, ProbeStatus.NOT_RUN) and not p.budget_cut]
    if not failed:
        probe = next(p for p in mine if p.status is ProbeStatus.NOT_RUN or p.budget_cut)
        if probe.budget_cut:
            yield _f("cuda.probe", Severity.UNKNOWN, gpu, f"{label(gpu)}: CUDA probe not finished: "
                     f"{probe.detail}; not checked, not a fault of the GPU (give the run more "
                     f"time, or probe at --level quick)", value="cut_short")
            return
        yield _f("cuda.probe", Severity.UNKNOWN, gpu, f"{label(gpu)}: CUDA probe not run: "
                 f"{probe.detail}", value=probe.status.value)
        return
    faults = [p for p in failed if busy_not_faulty(p, gpu, node) is None]
    if not faults:
        severity, why = busy_not_faulty(failed[0], gpu, node) or (Severity.UNKNOWN, "")
        where = f" on MIG device {failed[0].device}" if failed[0].device else ""
        yield _f("cuda.probe", severity, gpu,
                 f"{label(gpu)}: CUDA probe{where} {failed[0].status.value}: {failed[0].detail}; {why}",
                 value=failed[0].cu_name or failed[0].status.value, threshold="ok")
        return
    probe = faults[0]
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


COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}  # nvml.h
CU_OUT_OF_MEMORY = 2
# cuda.h: DEVICE_UNAVAILABLE (46) "Devices are often unavailable due to use of
# CU_COMPUTEMODE_EXCLUSIVE_PROCESS or CU_COMPUTEMODE_PROHIBITED"; CONTEXT_ALREADY_IN_USE (216)
# is EXCLUSIVE_THREAD's
CU_REFUSED = (46, 216)
# cuda.h: CUDA_ERROR_MPS_CONNECTION_FAILED 805, _RPC_FAILURE 806, _SERVER_NOT_READY 807,
# _MAX_CLIENTS_REACHED 808, _MAX_CONNECTIONS_REACHED 809, _CLIENT_TERMINATED 810
CU_MPS = range(805, 811)
NOT_A_FAULT = "not a fault of the GPU: do not reset it"


def busy_not_faulty(probe: ProbeResult, gpu: GpuSnapshot,
                    node: NodeSnapshot) -> Optional[Tuple[Severity, str]]:
    """Why a failed probe is the GPU's configuration or its co-tenants' use, not a fault (pure):
    (severity, the words), or None when it may be a fault.  Data that reads back wrong is
    always a fault; so is OUT_OF_MEMORY with nothing live holding the memory (a leaked context).
    - a context refused (46, 216) under compute mode PROHIBITED: info, the admin closed it
      (`nvidia-smi -c PROHIBITED`); under EXCLUSIVE_PROCESS (or a mode NVML did not give):
      unknown, another process holds the one context;
    - an MPS server on the GPU or a probe run as an MPS client: its errors (805-810), a refused
      context, out of memory or a probe queued past its deadline are unknown;
    - OUT_OF_MEMORY while live co-tenants of a shared GPU hold memory there: unknown."""
    if probe.status not in (ProbeStatus.INIT_ERROR, ProbeStatus.ALLOC_ERROR, ProbeStatus.TIMEOUT):
        return None
    code, procs = probe.cu_result, gpu.processes or ()
    mode = COMPUTE_MODES.get(gpu.compute_mode, f"{gpu.compute_mode}") if gpu.compute_mode is not None \
        else "unknown (NVML did not say)"
    this_job = node.job.job_id if node.job else None
    tenants = [p for p in procs if not is_mps_daemon(p)
               and not_a_co_tenant(p, gpu.index, node.shared_gres, this_job) is None]
    jobs = sorted({p.job_id for p in tenants if p.job_id})
    servers = [p for p in procs if is_mps_daemon(p)]
    mps = (f"the MPS server (pid {servers[0].pid}) runs on it" if servers else
           f"the probe ran as an MPS client (CUDA_MPS_PIPE_DIRECTORY={probe.mps_pipe})"
           if probe.mps_pipe else None)
    if code in CU_REFUSED:
        if gpu.compute_mode == 2:
            return Severity.INFO, ("compute mode PROHIBITED (set with nvidia-smi -c): no process may "
                                   f"open a CUDA context on it, so it was not probed; {NOT_A_FAULT}")
        if gpu.compute_mode in (1, 3) or gpu.compute_mode is None or mps:
            others = [p for p in procs if p.job_id is None or p.job_id != this_job]
            holder = (f"live job(s) {', '.join(jobs)}" if jobs else mps if mps else
                      f"pid {others[0].pid}" if others else "a process not visible here")
            return Severity.UNKNOWN, (f"compute mode {mode}: the GPU's context is taken ({holder}), "
                                      f"so it was not probed; {NOT_A_FAULT}")
        return None
    if mps and (code in CU_MPS or code == CU_OUT_OF_MEMORY or probe.status is ProbeStatus.TIMEOUT):
        return Severity.UNKNOWN, (f"{mps} (compute mode {mode}) and the probe waited or was "
                                  f"refused behind it; not probed, {NOT_A_FAULT}")
    held = co_tenant_mib(gpu, node)  # the MPS server's share: judged above
    if code == CU_OUT_OF_MEMORY and held > 0:
        total = f" of {gpu.memory_total_mib} MiB" if gpu.memory_total_mib else ""
        return Severity.UNKNOWN, (
            f"live job(s) {', '.join(jobs) or '?'} hold {held} MiB{total} of this shared GPU "
            f"(gres/{' or gres/'.join(node.shared_gres)}; compute mode {mode}): their memory, "
            f"not free for the probe; not probed, {NOT_A_FAULT}")
    return None
