"""Xid events from the kernel log, judged against NVIDIA's Xid catalogue."""

from __future__ import annotations

from typing import Iterator, Dict, Tuple

from ..model import Action, Finding, Mode, NodeSnapshot, Severity, XidEvent
from .registry import CheckContext, finding as _f, gpu_at, label, node_check


# NVIDIA's Xid catalogue, immediate actions: (severity, action, what it means)
XID_CATALOGUE: Dict[int, Tuple[Severity, Action, str]] = {
    13: (Severity.INFO, Action.NONE, "graphics engine exception, usually the application"),
    31: (Severity.INFO, Action.NONE, "GPU memory page fault, usually the application"),
    43: (Severity.INFO, Action.NONE, "GPU stopped processing, usually the application"),
    45: (Severity.INFO, Action.NONE, "preemptive cleanup after an earlier error"),
    68: (Severity.INFO, Action.NONE, "video processor exception, usually the application"),
    48: (Severity.FAIL, Action.RESET, "double-bit ECC error: reset the GPU"),
    62: (Severity.FAIL, Action.RESET, "internal micro-controller halt: reset the GPU"),
    63: (Severity.WARN, Action.NONE, "ECC page retirement or row remap recorded: watch"),
    64: (Severity.FAIL, Action.RMA, "ECC page retirement or row remap failed: RMA the GPU"),
    74: (Severity.FAIL, Action.RESET, "NVLink error: reset the GPU, or reboot"),
    79: (Severity.FAIL, Action.REBOOT, "GPU has fallen off the bus: power-cycle the node"),
    92: (Severity.WARN, Action.NONE, "high single-bit ECC error rate: watch"),
    94: (Severity.WARN, Action.NONE, "contained ECC error: the GPU stays usable"),
    95: (Severity.FAIL, Action.RESET, "uncontained ECC error: reset the GPU"),
    109: (Severity.FAIL, Action.RESET, "context switch timeout: reset the GPU"),
    119: (Severity.FAIL, Action.RESET, "GSP RPC timeout: reset the GPU"),
    120: (Severity.FAIL, Action.RESET, "GSP error: reset the GPU"),
    136: (Severity.FAIL, Action.RESET, "link training failed: reset the GPU"),
    140: (Severity.FAIL, Action.RESET, "unrecovered ECC error: reset the GPU"),
    143: (Severity.FAIL, Action.RESET, "GPU initialisation failure: reset the GPU"),
}
FALLEN_OFF_BUS = (Severity.FAIL, Action.REBOOT, "GPU has fallen off the bus: power-cycle the node")


def xid_severity(event: XidEvent) -> Tuple[Severity, Action, str]:
    if event.xid is None:
        return FALLEN_OFF_BUS
    return XID_CATALOGUE.get(event.xid, (Severity.WARN, Action.NONE,
                                         "not in our catalogue: look it up in NVIDIA's Xid list"))


@node_check("xid", severity=Severity.FAIL, action=Action.RESET,
            threshold_key="xid_window_s")
def check_xid(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Every Xid the kernel logged in the window, with its severity from NVIDIA's catalogue.

    Application Xids (13, 31, 43, 45, 68) are info: the job's fault, not the GPU's.  Hardware
    Xids (48, 62, 64, 74, 79, 95, 109, 119, 120, 136, 140, 143) fail with NVIDIA's immediate
    action; 63, 92, 94 and unknown codes warn.  The window is the job's (epilog) or since boot
    (by hand), so an old Xid does not keep a node drained until the log rotates; by hand, Xids
    an admin acknowledged (--ack, or resuming our drain) no longer count, and a GPU failing
    again after `xid_escalate_after` acknowledgements escalates to RMA.
    nvidia-smi equivalent: `dmesg | grep 'NVRM: Xid'`.
    """
    if ctx.mode is Mode.PROLOG:
        return  # Xids belong to the job that ran when they happened: the epilog judges them
    log = node.kernel_log
    if log.error:
        yield _f("xid", Severity.UNKNOWN, None, f"Xid events not checked: {log.error}")
        return
    for event in log.events:  # one per GPU and Xid, however many lines (kernlog.aggregate)
        severity, action, meaning = xid_severity(event)
        gpu = gpu_at(node, event.pci)
        who = label(gpu) if gpu else f"GPU at PCI {event.pci} (not known to NVML)"
        code = "fallen off the bus" if event.xid is None else f"Xid {event.xid}"
        times = f" ({event.occurrences} times)" if event.occurrences > 1 else ""
        acked = dict(node.xid_ack_counts).get(event.pci, 0)
        limit = ctx.config.xid_escalate_after
        if severity is Severity.FAIL and ctx.mode is Mode.NODE and acked >= limit:
            # gpud escalates after N reboots the same way: the fix that was tried did not hold
            action = Action.RMA
            meaning = (f"fails again after {acked} acknowledgements (xid_escalate_after = "
                       f"{limit}): escalate, RMA or replace the GPU; another reset will not do")
        yield _f("xid", severity, gpu, f"{who}: {code}{times}: {meaning}. Log: {event.message[:160]}",
                 value=event.xid if event.xid is not None else "fallen_off_bus", action=action)
    if log.skipped_bytes or log.dropped_events:
        yield _f("xid", Severity.WARN, None,
                 f"kernel log: only the newest part was checked ({log.skipped_bytes} bytes of the "
                 f"window not read, {log.dropped_events} events of further GPU/Xid pairs not kept); "
                 f"the work is bounded so that a flood of log lines cannot stall the check")
    if log.ignored_lines:
        yield _f("xid", Severity.INFO, None,
                 f"kernel log: {log.ignored_lines} NVRM line(s) not written by the kernel were "
                 f"ignored (a program, e.g. `logger`, wrote them)", value=log.ignored_lines)

