"""Xid events from the kernel log, judged against NVIDIA's Xid catalogue.

Source of every severity and action below: NVIDIA, "Xid Errors", "Analyzing Xid Errors with the
Xid Catalog" (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), the catalogue's
"Resolution Bucket (Immediate Action)" column and its "XID 144-150 Decode" sheet:
RESTART_APP / IGNORE -> info (the application's fault, or nothing to do), RESET_GPU -> fail,
reset the GPU, RESTART_BM -> fail, reboot (power-cycle) the node, RESTART_VM -> fail, reboot.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Tuple

from ..model import Action, Finding, Mode, NodeSnapshot, Severity, XidEvent
from ..records import NamedTuple
from .registry import CheckContext, finding as _f, gpu_at, label, node_check

INFO, WARN, FAIL = Severity.INFO, Severity.WARN, Severity.FAIL
_APP = (INFO, Action.NONE)
_RESET = (FAIL, Action.RESET)

# (severity, action, what it means), from the catalogue's immediate action
XID_CATALOGUE: Dict[int, Tuple[Severity, Action, str]] = {
    8: (*_APP, "GPU stopped processing: restart the application"),
    13: (*_APP, "graphics engine exception, usually the application"),
    31: (*_APP, "GPU memory page fault, usually the application"),
    32: (*_APP, "invalid or corrupted push buffer stream, usually the application"),
    43: (*_APP, "GPU stopped processing, usually the application"),
    45: (*_APP, "preemptive cleanup after an earlier error"),
    46: (*_RESET, "GPU stopped processing: reset the GPU"),
    48: (*_RESET, "double-bit ECC error: reset the GPU"),
    62: (*_RESET, "internal micro-controller halt: reset the GPU"),
    63: (WARN, Action.NONE, "ECC page retirement or row remap recorded: watch"),
    # the catalogue says RESET_GPU; CONTRACTS §4 makes a remap failure an RMA criterion
    64: (FAIL, Action.RMA, "ECC page retirement or row remap failed: RMA the GPU"),
    68: (*_APP, "video processor exception, usually the application"),
    69: (*_APP, "graphics engine class error, usually the application"),
    74: (*_RESET, "NVLink error: reset the GPU, or reboot"),
    79: (FAIL, Action.REBOOT, "GPU has fallen off the bus: power-cycle the node"),
    92: (WARN, Action.NONE, "high single-bit ECC error rate: watch"),
    94: (WARN, Action.NONE, "contained ECC error: the application restarts, the GPU stays usable"),
    95: (*_RESET, "uncontained ECC error: reset the GPU"),
    109: (*_RESET, "context switch timeout: reset the GPU"),
    110: (*_RESET, "security fault: reset the GPU"),
    119: (*_RESET, "GSP RPC timeout: reset the GPU"),
    120: (*_RESET, "GSP error: reset the GPU"),
    121: (INFO, Action.NONE, "C2C link error, corrected"),
    136: (*_RESET, "link training failed: reset the GPU"),
    137: (INFO, Action.NONE, "NVLink privilege error"),
    140: (*_RESET, "unrecovered ECC error: reset the GPU"),
    143: (*_RESET, "GPU initialisation failure: reset the GPU"),
    151: (FAIL, Action.REBOOT, "key rotation error: restart the VM"),
    155: (*_RESET, "NVLink software-defined error: reset the GPU"),
    156: (*_RESET, "resource retirement event: reset the GPU"),
    157: (WARN, Action.NONE, "resource retirement failure: contact support if it recurs"),
    158: (*_RESET, "GPU fatal timeout: reset the GPU"),
    159: (WARN, Action.NONE, "CHI non-data error: check UVM"),
    160: (INFO, Action.NONE, "channel retirement event"),
    161: (INFO, Action.NONE, "channel retirement failure"),
}
NVLINK5_XIDS = {144: "SAW", 145: "RLW", 146: "TLW", 147: "TREX", 148: "NVLPW_CTRL", 149: "NETIR",
                150: "MSE"}
FALLEN_OFF_BUS = (FAIL, Action.REBOOT, "GPU has fallen off the bus: power-cycle the node")
UNKNOWN_XID = (WARN, Action.NONE, "not in NVIDIA's Xid catalogue as we know it: look it up")

# "<UNIT> Fatal|Nonfatal XC<n> i<n> Link <L> (<intrinfo> <errorstatus> ...)" (driver 550+)
# Patterns as text, compiled by re on first use (its cache): the prolog reads no kernel log.
_NVLINK5 = (r"(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Non-?fatal)\s+XC\d+\s+i\d+\s+"
            r"Link\s+(?P<link>-?\d+)\s+\((?P<intr>0x[0-9a-fA-F]+)\s+(?P<status>0x[0-9a-fA-F]+)")
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
_XID154 = (r"recovery action changed from\s+(?P<from>0x[0-9a-fA-F]+|\d+)\s*(?:\((?P<from_name>[^)]*)\))?"
           r"\s+to\s+(?P<to>0x[0-9a-fA-F]+|\d+)\s*(?:\((?P<to_name>[^)]*)\))?")
_CAUSED_BY = r"caused by previous Xid (?P<xid>\d+)"


class XidVerdict(NamedTuple):
    severity: Severity
    action: Action
    meaning: str
    clears: bool = False  # Xid 154 back to None: the earlier recovery action no longer holds


def recovery_action_from_154(code: int, name: str) -> Tuple[Severity, Action, str, bool]:
    """What Xid 154's new recovery action asks for: by the driver's own words, which say what
    to do whatever the number (0x0 None, 0x1 GPU Reset Required, 0x2 Node Reboot Required,
    0x3 Drain P2P, 0x4 Drain and Reset in nvml.h's nvmlDeviceGpuRecoveryAction_t)."""
    words = name.lower()
    if code == 0 or words == "none":
        return INFO, Action.NONE, "recovery action back to None: the earlier action no longer applies", True
    if "reboot" in words:
        return FAIL, Action.REBOOT, f"the driver asks for recovery action {name}: reboot the node", False
    if "reset" in words:
        return FAIL, Action.RESET, f"the driver asks for recovery action {name}: reset the GPU", False
    if "drain" in words:
        return FAIL, Action.DRAIN, f"the driver asks for recovery action {name}: drain the node", False
    return FAIL, Action.DRAIN, f"the driver asks for recovery action {code:#x} ({name or 'unnamed'})", False


def xid_verdict(event: XidEvent) -> XidVerdict:
    """Severity, action and meaning of one Xid line, from the catalogue and its payload."""
    if event.xid is None:
        return XidVerdict(*FALLEN_OFF_BUS)
    code, text = event.xid, event.message
    if code in NVLINK5_XIDS:
        m = re.search(_NVLINK5, text, re.IGNORECASE)
        if m is None:
            return XidVerdict(WARN, Action.NONE, f"NVLink5 {NVLINK5_XIDS[code]} error whose payload "
                                                 f"could not be decoded: look it up")
        where = f"{m['unit']} link {m['link']} (intrinfo {m['intr']}, error status {m['status']})"
        if m["sev"].lower() == "fatal":
            return XidVerdict(FAIL, Action.RESET, f"fatal NVLink5 error in {where}: reset the GPU")
        return XidVerdict(WARN, Action.NONE, f"non-fatal NVLink5 error in {where}: any action "
                                             f"follows from an Xid 154")
    if code == 154:
        # aggregated: the last line of this GPU's Xid 154s carries the action that holds now
        m = re.search(_XID154, event.last_message or text, re.IGNORECASE)
        if m is None:
            return XidVerdict(FAIL, Action.DRAIN, "GPU recovery action changed (new action not in "
                                                  "the line): drain and check nvidia-smi -q")
        return XidVerdict(*recovery_action_from_154(int(m["to"], 0), (m["to_name"] or "").strip()))
    if code == 45:
        m = re.search(_CAUSED_BY, text, re.IGNORECASE)
        if m:
            return XidVerdict(INFO, Action.NONE, f"preemptive cleanup caused by the earlier Xid "
                                                 f"{m['xid']}, which is judged on its own")
    return XidVerdict(*XID_CATALOGUE.get(code, UNKNOWN_XID))


def xid_severity(event: XidEvent) -> Tuple[Severity, Action, str]:
    v = xid_verdict(event)
    return v.severity, v.action, v.meaning


@node_check("xid", severity=Severity.FAIL, action=Action.RESET,
            threshold_key="xid_window_s")
def check_xid(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Every Xid the kernel logged in the window, with its severity from NVIDIA's catalogue.

    Application Xids (8, 13, 31, 32, 43, 45, 68, 69) are info: the job's fault, not the GPU's;
    45 "caused by previous Xid N" points at N, judged on its own.  RESET_GPU Xids (46, 48, 62,
    74, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158) fail with a reset, 79 with a
    reboot, 64 with RMA.  94 (contained ECC) warns, 95 (uncontained) fails.  NVLink5 Xids
    144-150 are fatal or non-fatal by their decoded payload.  Xid 154 acts on the new recovery
    action (reset, reboot, drain P2P), the GPU's latest 154 deciding: back to None clears it.
    An Xid the catalogue does not list warns.  The window is the job's (epilog) or since boot
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
        verdict = xid_verdict(event)
        gpu = gpu_at(node, event.pci)
        who = label(gpu) if gpu else f"GPU at PCI {event.pci} (not known to NVML)"
        code = "fallen off the bus" if event.xid is None else f"Xid {event.xid}"
        times = f" ({event.occurrences} times)" if event.occurrences > 1 else ""
        severity, action, meaning = verdict.severity, verdict.action, verdict.meaning
        acked = dict(node.xid_ack_counts).get(event.pci, 0)
        limit = ctx.config.xid_escalate_after
        if severity is Severity.FAIL and ctx.mode is Mode.NODE and acked >= limit:
            # gpud escalates after N reboots the same way: the fix that was tried did not hold
            action = Action.RMA
            meaning = (f"fails again after {acked} acknowledgements (xid_escalate_after = "
                       f"{limit}): escalate, RMA or replace the GPU; another reset will not do")
        # Xid 154: the driver's newest recovery action is the one that holds
        line = (event.last_message or event.message) if event.xid == 154 else event.message
        yield _f("xid", severity, gpu, f"{who}: {code}{times}: {meaning}. Log: {line[:160]}",
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
