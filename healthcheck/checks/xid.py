"""Xid events from the kernel log, judged against NVIDIA's Xid catalogue.

Every code's bucket comes from one data file, xid_catalogue.csv beside this module: NVIDIA's own
mapping of its Xid catalogue (Xid-Catalog.xlsx, last modified 2025-09-30,
docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, column "Resolution Bucket
(Immediate Action)"), as NVIDIA's NVSentinel ships it (xid_catalogue.SOURCE.md).  Each bucket
becomes a decision through BUCKET_DECISION, the one table below; the few codes where we decide
otherwise are in OVERRIDES, each with its reason.  The file is read on the first Xid judged,
never on the prolog path.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Dict, Iterator, List, Optional, Tuple

from ..logmodel import XidEvent
from ..model import Action, Finding, Mode, NodeSnapshot, Severity
from ..records import NamedTuple
from .registry import CheckContext, finding as _f, gpu_at, label, node_check

INFO, WARN, FAIL = Severity.INFO, Severity.WARN, Severity.FAIL
CATALOGUE_FILE = "xid_catalogue.csv"
CATALOGUE_DATE = "2025-09-30"  # Xid-Catalog.xlsx's last modification, which the file follows

# NVSentinel's names for two of the catalogue's buckets (the second verbatim, typo and all)
BUCKET_ALIASES = {"UNEXPECTED_ERR_REPORT_ISSUE": "CONTACT_SUPPORT",
                  "Follow guidance as it aapplies to another Xid": "XID_154"}

# The catalogue's bucket -> our decision: (severity, action, what it asks for).
BUCKET_DECISION: Dict[str, Tuple[Severity, Action, str]] = {
    # the application's fault (or nothing to do): the job hears of it, the node stays in service;
    # repeated 13 on one GPC/TPC or repeated 31 warn (xid_verdict), as the catalogue advises
    "RESTART_APP": (INFO, Action.NONE, "restart the application; the GPU is not at fault"),
    "IGNORE": (INFO, Action.NONE, "informational, nothing to do"),
    "RESET_GPU": (FAIL, Action.RESET, "reset the GPU"),
    "RESTART_BM": (FAIL, Action.REBOOT, "reboot (power-cycle) the node"),
    "RESTART_VM": (FAIL, Action.REBOOT, "restart the VM (reboot the node)"),
    # the catalogue names no automatic fix: a person must look, so the node is drained
    "CONTACT_SUPPORT": (FAIL, Action.DRAIN, "unexpected: a person must look (NVIDIA: contact "
                                            "support)"),
    "CHECK_MECHANICALS": (FAIL, Action.DRAIN, "a person must check the GPU's seating and "
                                              "connections (auxiliary power)"),
    "UPDATE_SWFW": (FAIL, Action.DRAIN, "a person must update the driver or firmware"),
    # Xid 159: NVIDIA says reset the GPU when UVM is in use.  Every CUDA context opens
    # /dev/nvidia-uvm (libcuda needs the nvidia-uvm module), so on a node that runs GPU jobs
    # UVM is in use whenever an Xid can be logged: we take it as in use.
    "CHECK_UVM": (FAIL, Action.RESET, "CHI non-data error with UVM in use: reset the GPU"),
    # workflows: the line decides (xid_verdict); these are the decisions before it does
    "WORKFLOW_XID_45": (INFO, Action.NONE, "preemptive cleanup after an earlier error"),
    "WORKFLOW_XID_48": (FAIL, Action.RESET, "double-bit ECC error: reset the GPU"),
    "WORKFLOW_NVLINK_ERR": (FAIL, Action.RESET, "NVLink error: reset the GPU, or reboot"),
    # NVSentinel drains and resets a 144-150 line it cannot decode; so do we
    "WORKFLOW_NVLINK5_ERR": (FAIL, Action.RESET, "NVLink5 error whose payload could not be "
                                                 "decoded: reset the GPU"),
    "XID_154": (FAIL, Action.DRAIN, "GPU recovery action changed (new action not in the line): "
                                    "drain and check nvidia-smi -q"),
}

# Our deliberate differences from the catalogue, each with its reason.
OVERRIDES: Dict[int, Tuple[Severity, Action, str]] = {
    # catalogue: RESET_GPU.  A row-remap (or page-retirement) failure is NVIDIA's own RMA
    # criterion (GPU Memory Error Management; CONTRACTS.md section 4): a reset will not fix it.
    64: (FAIL, Action.RMA, "ECC page retirement or row remap failed: RMA the GPU"),
}
# Xid 13 on one (GPC, TPC), or Xid 31 on one GPU, this many times: the catalogue's investigatory
# action is a diagnostic.  Warn until the deep level exists to escalate to.
REPEATS_FOR_DIAGNOSTIC = 2
NVLINK5_XIDS = {144: "SAW", 145: "RLW", 146: "TLW", 147: "TREX", 148: "NVLPW_CTRL", 149: "NETIR",
                150: "MSE"}
FALLEN_OFF_BUS = (FAIL, Action.REBOOT, "GPU has fallen off the bus: power-cycle the node")
UNKNOWN_XID = (WARN, Action.NONE, f"not in NVIDIA's Xid catalogue of {CATALOGUE_DATE}: look it up")
# the catalogue's workflow for 48: "check SRAM Error Threshold flag ... If set RUN_FIELDDIAG"
_SRAM_THRESHOLD = r"\bSRAM\b.*\bthreshold\b.*\bexceeded\b|\bthreshold\b.*\bexceeded\b.*\bSRAM\b"

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
    """What Xid 154's new recovery action asks for, by its code: NVML's
    nvmlDeviceGpuRecoveryAction_t (0 NONE, 1 GPU_RESET, 2 NODE_REBOOT, 3 DRAIN_P2P,
    4 DRAIN_AND_RESET in every nvml.h; past 4 as the installed pynvml names them), the one table
    checks/ecc.py judges NVML's own field with.  The driver's label is only quoted: drivers
    print new words for the same code ("GPU Reset Required", "PF FLR").  A code NVML does not
    define here is for a person (drain), named."""
    from .ecc import recovery_action_name

    label = f"{code:#x}" + (f" ({name})" if name else "")
    if code == 0:
        return INFO, Action.NONE, "recovery action back to None: the earlier action no longer applies", True
    nvml, action = recovery_action_name(code)
    if nvml.startswith("recovery action"):  # a value NVML does not name here
        return FAIL, Action.DRAIN, (f"the driver asks for recovery action {label}, which NVML does not "
                                    f"define here: a person must look (nvidia-smi -q, GPU Recovery Action)"), False
    what = {Action.RESET: "reset the GPU", Action.REBOOT: "reboot the node"}.get(action, "drain the node")
    return FAIL, action, f"the driver asks for recovery action {label}, NVML's {nvml}: {what}", False


class CatalogueError(Exception):
    """The catalogue data file is missing or malformed (a packaging bug, never a GPU fault)."""


@functools.lru_cache(maxsize=1)  # a memo of a file the package ships: read once per process
def catalogue(path: Optional[str] = None) -> Dict[int, Tuple[str, str]]:
    """Code -> (mnemonic, bucket) from the catalogue data file, NVSentinel's names for the
    buckets mapped to the catalogue's (BUCKET_ALIASES).  Lines are "code,mnemonic,bucket,
    FATAL|NONFATAL"; a blank line or one starting with # is skipped."""
    import csv

    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), CATALOGUE_FILE)
    table: Dict[int, Tuple[str, str]] = {}
    try:
        with open(path, encoding="utf-8", newline="") as f:
            for n, row in enumerate(csv.reader(f), 1):
                if not row or row[0].lstrip().startswith("#"):
                    continue
                if len(row) != 4 or not row[0].strip().isdigit():
                    raise CatalogueError(f"{path}: line {n}: expected code,mnemonic,bucket,"
                                         f"FATAL|NONFATAL, got {row!r}")
                bucket = row[2].strip()
                table[int(row[0])] = (row[1].strip(), BUCKET_ALIASES.get(bucket, bucket))
    except OSError as e:
        raise CatalogueError(f"Xid catalogue {path} not readable: {e}") from e
    if not table:
        raise CatalogueError(f"Xid catalogue {path} holds no code")
    return table


def decision(code: int) -> Optional[Tuple[Severity, Action, str]]:
    """The decision for an Xid code before its line is read: our override, else its bucket's;
    None when the catalogue does not list it (or lists it under a bucket with no decision,
    which tests/unit/test_xid_catalogue.py forbids)."""
    if code in OVERRIDES:
        return OVERRIDES[code]
    entry = catalogue().get(code)
    if entry is None or entry[1] not in BUCKET_DECISION:
        return None
    severity, action, what = BUCKET_DECISION[entry[1]]
    return severity, action, f"{entry[0] or 'unnamed'}: {what}"


def xid_verdict(event: XidEvent) -> XidVerdict:
    """Severity, action and meaning of one Xid event (one line, or the lines kernlog.aggregate
    merged), from the catalogue's bucket and the line's payload."""
    if event.xid is None:
        return XidVerdict(*FALLEN_OFF_BUS)
    code, text = event.xid, event.message
    if code in NVLINK5_XIDS:
        m = re.search(_NVLINK5, text, re.IGNORECASE)
        if m is None:
            return XidVerdict(FAIL, Action.RESET, f"NVLink5 {NVLINK5_XIDS[code]} error whose "
                                                  f"payload could not be decoded: reset the GPU "
                                                  f"(NVIDIA's NVSentinel drains it too)")
        where = f"{m['unit']} link {m['link']} (intrinfo {m['intr']}, error status {m['status']})"
        if m["sev"].lower() == "fatal":
            return XidVerdict(FAIL, Action.RESET, f"fatal NVLink5 error in {where}: reset the GPU")
        return XidVerdict(WARN, Action.NONE, f"non-fatal NVLink5 error in {where}: any action "
                                             f"follows from an Xid 154")
    if code == 154:
        # aggregated: the last line of this GPU's Xid 154s carries the action that holds now
        m = re.search(_XID154, event.last_message or text, re.IGNORECASE)
        if m is None:
            return XidVerdict(*BUCKET_DECISION["XID_154"])
        return XidVerdict(*recovery_action_from_154(int(m["to"], 0), (m["to_name"] or "").strip()))
    if code == 45:
        m = re.search(_CAUSED_BY, text, re.IGNORECASE)
        if m:
            return XidVerdict(INFO, Action.NONE, f"preemptive cleanup caused by the earlier Xid "
                                                 f"{m['xid']}, which is judged on its own")
    if code == 48 and any(re.search(_SRAM_THRESHOLD, line, re.IGNORECASE)
                          for line in (text, *event.samples, event.last_message or "")):
        return XidVerdict(FAIL, Action.RMA, "uncorrectable SRAM error with the SRAM error threshold "
                                            "exceeded: run field diagnostics, RMA the GPU")
    found = decision(code)
    if found is None:
        return XidVerdict(*UNKNOWN_XID)
    severity, action, meaning = found
    if severity is INFO and code == 13:
        repeated = [(unit, n) for unit, n in event.units if n >= REPEATS_FOR_DIAGNOSTIC]
        if repeated:
            unit, n = max(repeated, key=lambda u: u[1])
            return XidVerdict(WARN, Action.NONE, f"{meaning}; but repeated on {unit} ({n} times): "
                                                 f"a diagnostic is advised")
    if severity is INFO and code == 31 and event.occurrences >= REPEATS_FOR_DIAGNOSTIC:
        return XidVerdict(WARN, Action.NONE, f"{meaning}; but repeated on this GPU "
                                             f"({event.occurrences} times): a diagnostic is advised")
    return XidVerdict(severity, action, meaning)


def xid_severity(event: XidEvent) -> Tuple[Severity, Action, str]:
    v = xid_verdict(event)
    return v.severity, v.action, v.meaning


@node_check("xid", severity=Severity.FAIL, action=Action.RESET,
            threshold_key="xid_window_s")
def check_xid(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Every Xid the kernel logged in the window, with its severity from NVIDIA's catalogue.

    Each code's decision follows its bucket in NVIDIA's catalogue (BUCKET_DECISION): RESTART_APP
    and IGNORE are info (the job's fault, or nothing to do), RESET_GPU and CHECK_UVM (159) fail
    with a reset, RESTART_BM and RESTART_VM with a reboot, CONTACT_SUPPORT, CHECK_MECHANICALS
    (54) and UPDATE_SWFW (78) with a drain: a person must look.  Xid 64 goes to RMA (OVERRIDES).
    Workflows read the line: 45 "caused by previous Xid N" points at N; 48 with the SRAM error
    threshold exceeded goes to RMA, else resets; 144-150 are fatal or non-fatal by their decoded
    payload and reset when it cannot be decoded; 154 acts on the new recovery action by its
    NVML code (1 GPU_RESET and 4 DRAIN_AND_RESET reset, 2 NODE_REBOOT reboots, 3 DRAIN_P2P
    drains; a code NVML does not define drains for a person), never by the driver's label, the
    GPU's latest 154 deciding: back to 0 (None) clears it.  Xid 13 repeated
    on one GPC/TPC and Xid 31 repeated on one GPU warn: a diagnostic is advised.  A code the
    catalogue does not list warns.  The window is the job's (epilog) or since boot
    (by hand), so an old Xid does not keep a node drained until the log rotates; by hand, Xids
    an admin acknowledged (--ack, or resuming our drain) no longer count, and a GPU failing
    again after `xid_escalate_after` acknowledgements escalates to RMA.  A kernel Xid line we
    cannot attribute (a redacted PCI address) is an info finding, "unparsed kernel line".
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
        if event.xid == 48 and action is Action.RESET and gpu is not None and gpu.sram_threshold_exceeded:
            # the catalogue's workflow for 48 reads NVML's flag (ecc.sram_threshold says it too)
            action = Action.RMA
            meaning = ("uncorrectable SRAM error with the SRAM error threshold exceeded (NVML): "
                       "run field diagnostics, RMA the GPU")
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
    if log.unparsed_lines:
        # a line we cannot attribute is shown, never dropped: a person can read what we cannot
        yield _f("xid", Severity.INFO, None,
                 f"kernel log: {log.unparsed_lines} unparsed kernel line(s): an NVRM Xid line "
                 f"naming no GPU or code we can read (e.g. a redacted PCI address), not judged; "
                 f"read it yourself. Log: {log.unparsed[0][:160] if log.unparsed else ''}",
                 value=log.unparsed_lines)
    if log.lost_seqs:
        first, last = log.lost_seqs
        # a fatal Xid may be among them: said, never taken as none; the volatile ECC counters
        # (ecc.volatile_*), which the driver keeps whatever its log holds, still judge the job
        yield _f("xid", Severity.WARN, None,
                 f"kernel log: records seq {first}-{last} ({last - first + 1}) were overwritten "
                 f"before they were read (the kernel ring buffer wrapped past the prolog's "
                 f"marker); an Xid among them is not judged. A larger log_buf_len keeps more",
                 value=last - first + 1)
    if log.ignored_lines:
        yield _f("xid", Severity.INFO, None,
                 f"kernel log: {log.ignored_lines} NVRM line(s) not written by the kernel were "
                 f"ignored (a program, e.g. `logger`, wrote them)", value=log.ignored_lines)
