"""NVSwitch SXid lines from the kernel log (the nvidia-nvswitch driver on HGX / DGX baseboards).

    nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 sourcetrack timeout error (First)
    nvidia-nvswitch1: SXid (PCI:0000:02:00.0): 22013, Non-fatal, Link 00 Minion Link DLREQ interrupt
    nvidia-nvswitch1: SXid (PCI:0000:02:00.0): 22013, Severity 0 Engine instance 00 Sub-engine instance 00
    nvidia-nvswitch1: SXid (PCI:0000:02:00.0): 22013, Data {0x00000000, ...}

The first line of an error says Fatal or Non-fatal; the driver follows it with detail lines
(Severity, Data) that do not, and that belong to it.  A "Severity N" line states the driver's
own number (open-gpu-kernel-modules, ctrl_dev_nvswitch.h: NVSWITCH_ERROR_SEVERITY_NONFATAL 0,
NVSWITCH_ERROR_SEVERITY_FATAL 1), kept as `severity`.  parse_sxid_lines() returns one SxidEvent
per line, `fatal` None where the line does not say it in words; checks/nvswitch.py (sxid_severities) gives each line the
severity of the error it belongs to.  kernlog.read_kernel_log() calls parse_sxid_lines() on the
same lines it reads for Xids.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, List, Optional, Tuple

from ..logmodel import SxidEvent
from ..pci import function_form

MAX_LINE = 8192


@functools.lru_cache(maxsize=1)
def _pattern() -> "re.Pattern[str]":
    return re.compile(r"nvidia-nvswitch(?P<switch>\d{1,3})?: SXid \(PCI:(?P<pci>[0-9a-fA-F]{4,8}:"
                      r"[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\):\s*(?P<code>\d{1,6}),\s*(?P<rest>.*)$")


_SEVERITY = re.compile(r"severity\s+(\d{1,3})\b", re.IGNORECASE)


def parse_sxid_line(line: str) -> Optional[Tuple[str, Optional[int], int, Optional[bool], str]]:
    """(pci, switch, sxid, fatal, the message from "nvidia-nvswitch") of one line, or None."""
    if "SXid" not in line:
        return None
    m = _pattern().search(line[:MAX_LINE].rstrip("\r\n"))
    if m is None:
        return None
    rest = m["rest"].lstrip()
    fatal: Optional[bool] = None
    if rest.lower().startswith("fatal"):
        fatal = True
    elif rest.lower().startswith(("non-fatal", "nonfatal")):
        fatal = False
    text = line[m.start():][:512]
    message = "".join(ch if ch.isprintable() else "?" for ch in text)
    switch = int(m["switch"]) if m["switch"] is not None else None
    return function_form(m["pci"]), switch, int(m["code"]), fatal, message


def stated_severity(message: str) -> Optional[int]:
    """N of a detail line's "<code>, Severity N ...", or None."""
    m = re.search(r"\): *\d{1,6}, *(.*)$", message)
    if m is None:
        return None
    s = _SEVERITY.match(m.group(1))
    return int(s.group(1)) if s else None


def parse_sxid_lines(stamped: Iterable[Tuple[str, Optional[float], Optional[float], Optional[int]]]) -> List[SxidEvent]:
    """SxidEvents of (message, seconds since boot, epoch seconds, kmsg seq) lines (pure)."""
    events = []
    for msg, mono, wall, seq in stamped:
        parsed = parse_sxid_line(msg)
        if parsed is not None:
            pci, switch, code, fatal, message = parsed
            events.append(SxidEvent(pci=pci, sxid=code, fatal=fatal, message=message,
                                    switch=switch, monotonic_s=mono, wallclock=wall, seq=seq,
                                    severity=stated_severity(message)))
    return events
