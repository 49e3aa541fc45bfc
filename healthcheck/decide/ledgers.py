"""The repair ledgers' keys and counts (pure): which ledger a repair is counted in, and which
of its attempts count.

    ref = ledger_of(gpu)          # LedgerRef("1650522003802@0000-38-00.0", legacy="1650522003802", ...)
    finding_ledger(finding, gpus, missing, node)   # the GPU's, a missing GPU's, or the node's
    in_window(attempts, now, window_s)             # the attempts that ran, a future stamp as now

A GPU's ledger is keyed by its serial and PCI address, each escaped injectively, so two GPUs
never share one (act.ledger keeps the files).  A GPU NVML no longer lists keeps the ledger it
had; a fault that names no GPU is counted in the node's own.  A reset that never ran (blocked)
is no attempt.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..logmodel import XidEvent
from ..model import Finding, GpuSnapshot
from ..records import NamedTuple


class Attempt(NamedTuple):
    """One repair in a GPU's ledger (act.ledger keeps them per GPU: ledger_of)."""

    at: float
    action: str  # reset | reboot
    trigger: str  # the finding that called for it, "check=value"
    outcome: str  # started | reset | killed | resumed | passed | still_failing: CHECK | refused: ... | blocked: ... | rma
    node: str
    gpu: int
    pci: str = ""
    serial: str = ""


class LedgerRef(NamedTuple):
    """Where a GPU's ledger is (act.ledger): its key, the key an older version filed it under,
    and the identity that picks its attempts out of that older file (which two GPUs with one
    serial, or serials differing only in bytes that were not UTF-8, shared)."""

    key: str
    legacy: str
    serial: str = ""
    pci: str = ""
    # the GPU's NVML index now; None: a GPU NVML no longer lists (its ledger by serial and
    # address), or the node's own ledger (node_ledger)
    gpu: Optional[int] = None


_KEY_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")
KEY_PART_MAX = 100  # characters of one escaped part: the file name stays far below NAME_MAX


def escape_key_part(text: str) -> str:
    """`text` as file-name characters, injectively: letters, digits, '.' and '-' stay, every
    other character becomes '_' and two hex digits per UTF-8 byte ('_' itself is '_5F'), so two
    different texts never share a name.  A long one keeps its head and a SHA-256 of the whole,
    after a '~' that no escaped text contains."""
    import hashlib

    out = "".join(ch if ch in _KEY_SAFE else "".join(f"_{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
                  for ch in text)
    if len(out) <= KEY_PART_MAX:
        return out
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{out[:KEY_PART_MAX - 33]}~{digest}"


def ledger_of(gpu: GpuSnapshot) -> LedgerRef:
    """A GPU's ledger: keyed by its serial (its UUID where the serial is unknown, its NVML
    index where NVML knows neither) and its PCI address, each escaped (escape_key_part):
    `1650522003802@0000-38-00.0`, `~uuid-GPU-..@...`, `~index3@~nopci`."""
    from ..pci import function_form

    if gpu.serial:
        who = escape_key_part(gpu.serial)
    elif gpu.uuid:
        who = "~uuid-" + escape_key_part(gpu.uuid)
    else:
        who = f"~index{gpu.index}"
    try:
        where = function_form(gpu.pci_bus_id).replace(":", "-") if gpu.pci_bus_id else "~nopci"
    except ValueError:
        where = "~pci-" + escape_key_part(gpu.pci_bus_id or "")
    legacy = re.sub(r"[^A-Za-z0-9._-]", "_", gpu.serial or gpu.uuid or f"index{gpu.index}")[:96]
    return LedgerRef(f"{who}@{where}", legacy, gpu.serial or "", gpu.pci_bus_id or "", gpu.index)


def missing_ledger(gone: GpuSnapshot) -> LedgerRef:
    """The ledger of a GPU NVML no longer lists (NodeSnapshot.missing_gpus): the one it had
    when it was listed, by serial and address, tied to no NVML index now."""
    return ledger_of(gone)._replace(gpu=None)


NODE_LEDGER = "~node-"


def node_ledger(node: str) -> LedgerRef:
    """The node's own ledger: the reboots for a fault that names no GPU (the driver, a GPU
    gone from the bus that no earlier run had listed)."""
    key = NODE_LEDGER + escape_key_part(node)
    return LedgerRef(key, key)


def names(finding: Finding, ref: LedgerRef) -> bool:
    """Whether `finding` is about the GPU (or the node) whose ledger `ref` is."""
    if ref.gpu is not None:
        return finding.gpu == ref.gpu
    if finding.gpu is not None or finding.port is not None:
        return False
    if ref.key.startswith(NODE_LEDGER):
        return not finding.pci
    return finding.pci is not None and same_pci(finding.pci, ref.pci)


def finding_ledger(finding: Finding, gpus: Sequence[GpuSnapshot], missing: Sequence[GpuSnapshot],
                   node: str) -> LedgerRef:
    """The ledger a repair for `finding` is counted in: its GPU's, the GPU at the address it
    names (a lost GPU named by that address: name_unseen), the missing GPU's it names
    (gpu.count), else the node's own.  A lost GPU that nothing names (no serial, UUID or
    address) is counted in the node's own too: after the boot it is at no index, and the
    gpu.count that stands for it then names no GPU either, so both count in one ledger."""
    gpu = next((g for g in gpus if g.index == finding.gpu), None) if finding.gpu is not None else None
    if gpu is not None:
        return ledger_of(gpu) if (gpu.serial or gpu.uuid or gpu.pci_bus_id) else node_ledger(node)
    pci = finding.pci
    if finding.gpu is None and finding.port is None and pci:
        here = next((g for g in gpus if g.pci_bus_id and same_pci(g.pci_bus_id, pci)), None)
        if here is not None:
            return ledger_of(here)
        gone = next((m for m in missing if m.pci_bus_id and same_pci(m.pci_bus_id, pci)), None)
        return missing_ledger(gone or GpuSnapshot(index=-1, serial=finding.serial, pci_bus_id=pci))
    return node_ledger(node)


class Naming(NamedTuple):
    """How a lost GPU that no run had listed is named (name_unseen), for the ledger, the RMA
    and the evidence: its NVML index, the address the driver logged for it, its device file
    in the gres layout, and in words what named it; or why nothing did (then it is "node")."""

    gpu: int  # its NVML index
    pci: str = ""  # NVML's form, "00000000:48:00.0"; "" when nothing gives it
    device: str = ""  # "/dev/nvidia3"; "" when the layout does not tell
    named_by: Tuple[str, ...] = ()
    why_node: str = ""  # why the repair counts and marks the node, not a GPU

    def as_json(self) -> Dict[str, object]:
        return {"index": self.gpu, "pci": self.pci, "device": self.device,
                "named_by": list(self.named_by), "why_node": self.why_node}


# The Xids whose kernel-log line is the driver losing a GPU: 79 ("GPU has fallen off the bus";
# NOTES.md), and the bus messages that carry no Xid number (XidEvent.xid None)
OFF_THE_BUS_XIDS = (79, None)


def name_unseen(gpus: Sequence[GpuSnapshot], xids: Sequence[XidEvent],
                gres_files: Sequence[str]) -> Optional[Naming]:
    """The one lost GPU NVML can name by nothing (no serial, UUID or address: lost before any
    run listed it), named by what the node still knows (pure): the address of a GPU lost from
    the bus that the driver logged (Xid 79), which no GPU NVML lists has; and the gres
    layout's device file (gres.conf File=/dev/nvidiaN) that no listed GPU has.  None when no
    GPU is nameless; with nothing to name it, a Naming whose why_node says so."""
    from ..pci import nvml_form

    nameless = [g for g in gpus if g.lost is not None and not (g.serial or g.uuid or g.pci_bus_id)]
    if not nameless:
        return None
    if len(nameless) > 1:
        return Naming(nameless[0].index, why_node=f"{len(nameless)} GPUs are lost without a serial, "
                                                  f"UUID or address: no address can be told to be one's")
    lost = nameless[0]
    present = [g.pci_bus_id for g in gpus if g.pci_bus_id]
    logged = sorted({e.pci for e in xids if e.xid in OFF_THE_BUS_XIDS
                     and not any(same_pci(p, e.pci) for p in present)})
    listed = {g.minor_number for g in gpus if g.minor_number is not None and g is not lost}
    devices = [f for f in gres_files if _minor(f) is not None and _minor(f) not in listed]
    if lost.minor_number is not None:  # NVML still gives its device number
        devices = [f for f in devices if _minor(f) == lost.minor_number]
    named_by, pci, device = [], "", ""
    if len(logged) == 1:
        try:
            pci = nvml_form(logged[0])
            named_by.append(f"the driver's Xid 79 line names PCI:{logged[0]}, the address of no GPU NVML lists")
        except ValueError:
            pass
    # the device file alone names no board (the driver numbers them at each boot), but it
    # agrees or not with the address: said in the evidence
    if len(devices) == 1 and len(gres_files) == len(gpus):
        device = devices[0]
        named_by.append(f"gres.conf lists {device}, which no GPU NVML lists has")
    why = "" if pci else (
        "no address: " + (f"the driver logged {len(logged)} lost addresses ({', '.join(logged)})"
                          if logged else "no Xid 79 line names one")
        + " and NVML knows no serial, UUID or address for it; the node's reboots are counted in "
          "the node's ledger, and its RMA names the node")
    return Naming(lost.index, pci, device, tuple(named_by), why)


def _minor(path: str) -> Optional[int]:
    m = re.fullmatch(r"nvidia(\d+)", path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def ledgers_to_read(gpus: Sequence[GpuSnapshot], missing: Sequence[GpuSnapshot], node: str) -> List[LedgerRef]:
    """Every ledger a decision on this node reads: each GPU's, each missing GPU's, the node's."""
    return [ledger_of(g) for g in gpus] + [missing_ledger(m) for m in missing] + [node_ledger(node)]


def ledger_key(gpu: GpuSnapshot) -> str:
    """A GPU's ledger file name (ledger_of(gpu).key)."""
    return ledger_of(gpu).key


def same_pci(a: str, b: str) -> bool:
    from ..pci import normalise_pci

    try:
        return normalise_pci(a) == normalise_pci(b)
    except ValueError:
        return a == b


def legacy_attempts(attempts: Sequence["Attempt"], ref: LedgerRef) -> List["Attempt"]:
    """This GPU's attempts in a ledger file an older version keyed by serial alone: those
    recorded with its serial (or none) at its PCI address (or none)."""
    return [a for a in attempts
            if (not a.serial or not ref.serial or a.serial == ref.serial)
            and (not a.pci or not ref.pci or same_pci(a.pci, ref.pci))]


BLOCKED = "blocked"  # an attempt's outcome when the reset never ran (nvidia-smi missing, GPU held)
# A stamp later than this past the run's clock is from before a clock step back (NTP, a wrong
# RTC at boot): it counts as now, or the node would sit in cooldown, and its attempts in the
# window, until the clock caught up (30 days for a 30-day step)
FUTURE_SLACK_S = 60.0


def counted(attempt: Attempt) -> bool:
    """A repair that ran: a reset nvidia-smi never carried out (blocked) is no attempt."""
    return not attempt.outcome.startswith(BLOCKED)


def stamped_at(attempt: Attempt, now: float) -> float:
    """When the attempt counts as made: its stamp, or now for one dated in the future."""
    return min(attempt.at, now)


def from_the_future(attempts: Sequence[Attempt], now: float) -> List[int]:
    """The positions of the attempts stamped more than FUTURE_SLACK_S after `now`."""
    return [i for i, a in enumerate(attempts) if a.at > now + FUTURE_SLACK_S]


def in_window(attempts: Sequence[Attempt], now: float, window_s: float) -> List[Attempt]:
    """The attempts that ran within the last `window_s` (one dated in the future counts as now)."""
    return [a for a in attempts if counted(a) and now - stamped_at(a, now) <= window_s]


def ledger_words(ref: LedgerRef) -> str:
    """How a message names the GPU (or node) of a ledger."""
    if ref.gpu is not None:
        return f"GPU {ref.gpu}"
    if ref.key.startswith(NODE_LEDGER):
        return "the node"
    return f"the GPU at {ref.pci}" + (f" (SN {ref.serial})" if ref.serial else "")


def still_failing(findings: Sequence[Finding], refs: Sequence[LedgerRef]) -> Dict[str, Finding]:
    """ledger key -> the first draining finding of the check after a repair that names that
    ledger's GPU (or node): the GPUs the repair did not fix.  A GPU with none passed its own
    check, whatever else fails: it is never the one sent to RMA."""
    out: Dict[str, Finding] = {}
    for ref in refs:
        hit = next((f for f in findings if f.drains and names(f, ref)), None)
        if hit is not None:
            out[ref.key] = hit
    return out
