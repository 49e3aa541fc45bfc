"""Xids that are dealt with stay dealt with: acknowledgement points per GPU (pure).

    acks = {"0000:41:00": XidAck(pci="0000:41:00", position=..., acked_at=..., count=1)}
    events = unacknowledged(log.events, acks, after={position_key(pos): events_since_pos})

`--node` reads Xids since boot (or `xid_window_s`): without this, one old Xid 48 keeps draining
a repaired node every HealthCheckInterval until it reboots (Azure/azurehpc#648, DCGM#277,
gpud#1072).  An Xid stops counting once an admin has dealt with it: by resuming the node we
drained, or by `gpu-healthcheck --ack [--gpus LIST]`.  The point is kept per GPU in state_dir
(state.XidAck); a new Xid after it counts again.  A GPU that keeps failing after
`xid_escalate_after` acknowledgements escalates (checks/xid.py): another reset will not do.
"""

from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

from ..logmodel import KernelLogPosition, KernelLogWindow, XidEvent
from ..model import GpuSnapshot, Severity
from ..staterecords import XidAck
from ..pci import kernel_pci
from ..logmodel import BootId, group_key, window_since

PositionKey = Tuple[str, Optional[int], Optional[int], Optional[float], Optional[float], Optional[int]]


def position_key(position: KernelLogPosition) -> PositionKey:
    return (position.source, position.offset, position.inode, position.monotonic_s, position.wallclock,
            position.seq)


def window_after(position: KernelLogPosition, boot_id: Optional[str]) -> KernelLogWindow:
    """The kernel-log window of what came after an acknowledgement (as the epilog's after the
    prolog): by kmsg seq where the position has one of this boot (`boot_id`), by file offset
    where the file is the same, else by time."""
    return window_since(position, boot_id)


def same_boot(ack: XidAck, boot: "BootId") -> bool:
    """Whether the acknowledgement was made in this boot.  By boot_id, which only a reboot
    changes.  An ack without one (written before boot_id was kept) is of an unknown boot: it
    counts only where its btime is this boot's to within 2 s, as the version that wrote it
    meant, and otherwise hides nothing (a stale position could hide a new boot's Xids)."""
    if ack.boot_id is not None and boot.boot_id is not None:
        return ack.boot_id == boot.boot_id
    return ack.boot is not None and boot.btime is not None and abs(ack.boot - boot.btime) < 2.0


def live_acks(acks: Mapping[str, XidAck], boot: "BootId") -> Dict[str, XidAck]:
    """The acknowledgements of this boot: after a reboot the kernel log starts over anyway."""
    return {pci: a for pci, a in acks.items() if same_boot(a, boot)}


def unacknowledged(events: Sequence[XidEvent], acks: Mapping[str, XidAck],
                   after: Mapping[PositionKey, Sequence[XidEvent]]) -> Tuple[XidEvent, ...]:
    """The events that still count: those of GPUs never acknowledged, and for the others what
    the kernel logged after their acknowledgement (`after`, read from each ack's position)."""
    kept = []
    for event in events:
        ack = acks.get(event.pci)
        if ack is None:
            kept.append(event)
            continue
        later = after.get(position_key(ack.position), ())
        key = group_key(event)  # kernlog.aggregate's key: a Fatal 145 is not a Nonfatal 145
        match = next((e for e in later if group_key(e) == key), None)
        if match is not None:
            kept.append(match)  # counted from the acknowledgement on
    return tuple(kept)


def failing(events: Iterable[XidEvent], pci: str) -> bool:
    from ..checks.xid import xid_severity

    return any(e.pci == pci and xid_severity(e)[0] is Severity.FAIL for e in events)


def acknowledge(acks: Mapping[str, XidAck], pcis: Iterable[str], events: Sequence[XidEvent],
                position: KernelLogPosition, boot: "Optional[BootId]", now: float,
                by: str) -> Dict[str, XidAck]:
    """New acknowledgements at `position` for these GPUs.  The count grows only where a failing
    Xid was there to be dealt with (an --ack of a clean GPU proves nothing about it)."""
    result = dict(acks)
    boot = boot or BootId()
    for pci in pcis:
        old = acks.get(pci)
        count = (old.count if old else 0) + (1 if failing(events, pci) else 0)
        result[pci] = XidAck(pci=pci, position=position, acked_at=now, boot=boot.btime, count=count,
                             by=by, boot_id=boot.boot_id)
    return result


def gpu_pcis(gpus: Sequence[GpuSnapshot], events: Sequence[XidEvent] = ()) -> Tuple[str, ...]:
    """Every GPU NVML knows, and every PCI address an Xid names (a GPU NVML lost)."""
    found = [kernel_pci(g.pci_bus_id) for g in gpus if g.pci_bus_id]
    found += [e.pci for e in events]
    return tuple(sorted({p for p in found if p}))


def volatile_ecc(gpus: Sequence[GpuSnapshot]) -> Tuple[Tuple[str, int], ...]:
    """(kernel PCI address, volatile corrected + uncorrected ECC errors) of each GPU with any."""
    found = []
    for gpu in gpus:
        pci = kernel_pci(gpu.pci_bus_id) if gpu.pci_bus_id else None
        total = (gpu.ecc_volatile_corrected or 0) + (gpu.ecc_volatile_uncorrected or 0)
        if pci and total > 0:
            found.append((pci, total))
    return tuple(found)


def counters_started_over(noted: Sequence[Tuple[str, int]],
                          gpus: Sequence[GpuSnapshot]) -> Tuple[str, ...]:
    """The GPUs whose volatile ECC counters are below what we noted at our drain: they started
    over, so the GPU was reset (or its driver reloaded) since (pure)."""
    now = {kernel_pci(g.pci_bus_id): g for g in gpus if g.pci_bus_id}
    reset = []
    for pci, before in noted:
        gpu = now.get(pci)
        if gpu is None or gpu.lost is not None or gpu.ecc_volatile_uncorrected is None:
            continue  # unknown is not "started over"
        if (gpu.ecc_volatile_corrected or 0) + gpu.ecc_volatile_uncorrected < before:
            reset.append(pci)
    return tuple(reset)
