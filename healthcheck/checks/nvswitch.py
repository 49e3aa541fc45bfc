"""NVSwitch errors (SXids) from the kernel log: the switches of an HGX / DGX baseboard."""

from __future__ import annotations

from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from ..logmodel import SxidEvent
from ..model import Action, Finding, Mode, NodeSnapshot, Severity
from .registry import CheckContext, finding as _f, node_check


def sxid_verdict(fatal: Optional[bool]) -> Tuple[Severity, Action]:
    """Fatal: fail, reboot (an NVSwitch fatal error needs the baseboard reset, which on HGX
    means a reboot); non-fatal, or not stated: warn."""
    if fatal:
        return Severity.FAIL, Action.REBOOT
    return Severity.WARN, Action.NONE


# The nvswitch driver's severity numbers (open-gpu-kernel-modules, ctrl_dev_nvswitch.h):
# NVSWITCH_ERROR_SEVERITY_NONFATAL = 0, NVSWITCH_ERROR_SEVERITY_FATAL = 1.
SEVERITY_FATALITY = {0: False, 1: True}


def sxid_severities(events: Iterable[SxidEvent]) -> List[Tuple[SxidEvent, Optional[bool]]]:
    """Each event with the fatality of the error it belongs to: its own word, else that of the
    latest header line of the same switch and code before it, else the number of its own
    "Severity N" (1 fatal, 0 non-fatal) when no header said it, else None (not stated)."""
    last: Dict[Tuple[str, int], bool] = {}
    out: List[Tuple[SxidEvent, Optional[bool]]] = []
    for event in events:
        key = (event.pci, event.sxid)
        if event.fatal is not None:
            last[key] = event.fatal
            out.append((event, event.fatal))
        elif key in last:
            out.append((event, last[key]))
        else:
            out.append((event, SEVERITY_FATALITY.get(event.severity) if event.severity is not None
                        else None))
    return out


@node_check("sxid", severity=Severity.FAIL, action=Action.REBOOT, threshold_key="xid_window_s")
def check_sxid(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """NVSwitch SXid errors in the window, one finding per switch and SXid code.

    The driver marks each error Fatal or Non-fatal.  A fatal SXid fails the node with action
    reboot: NVIDIA's Fabric Manager User Guide ("NVSwitch SXid errors": fatal and always-fatal
    SXids) has the NVSwitches and GPUs reset, which on an HGX baseboard is a reboot.  A
    non-fatal SXid warns (the switch corrected it; watch for repeats); detail lines (Severity,
    Data) count with the error they follow.  Where no header line says it, a detail line's
    "Severity 1" is fatal and "Severity 0" non-fatal (the driver's NVSWITCH_ERROR_SEVERITY_FATAL
    and _NONFATAL, ctrl_dev_nvswitch.h); an SXid whose lines state no severity warns.
    The finding and the drain reason name the NVSwitch by its PCI address.
    nvidia-smi equivalent: `dmesg | grep SXid`.
    """
    if ctx.mode is Mode.PROLOG:
        return
    if node.kernel_log.error:
        return  # the xid check already reports the unreadable log
    groups: Dict[Tuple[str, int], List[Tuple[SxidEvent, Optional[bool]]]] = {}
    for event, fatal in sxid_severities(node.kernel_log.sxids):
        groups.setdefault((event.pci, event.sxid), []).append((event, fatal))
    for (pci, code), items in groups.items():
        fatal = True if any(f for _, f in items) else (False if any(f is False for _, f in items) else None)
        severity, action = sxid_verdict(fatal)
        first = next((e for e, f in items if f is fatal), items[0][0])
        switch = f"nvidia-nvswitch{first.switch}" if first.switch is not None else "NVSwitch"
        kind = {True: "fatal", False: "non-fatal", None: "severity not stated"}[fatal]
        todo = ("reboot the node to reset the NVSwitch baseboard" if fatal
                else "watch for repeats")
        yield _f("sxid", severity, None,
                 f"{switch} at PCI {pci}: SXid {code} ({kind}, {len(items)} line(s)); {todo}. "
                 f"Log: {first.message[:160]}", value=f"{code}@{pci}", action=action)
