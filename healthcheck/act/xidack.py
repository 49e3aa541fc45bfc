"""Recording that Xids are dealt with, in state_dir (what decide.xidack decides, written down).

    snapshot = acknowledge_xids(snapshot, config, store, events, gpus=None, by="resume")

An acknowledgement is made by an admin's `--ack` (commands/ack.py), by the admin's resume of our drain, or by a
GPU reset seen since our drain (its volatile ECC counters started over).  Each one is logged
(kind "resume", outcome acknowledged): it changes what every later run judges.
"""

from __future__ import annotations

import time
from typing import List, Optional, Sequence, Tuple

from ..config import Config
from ..decide.xidack import (acknowledge, counters_started_over, gpu_pcis, position_key, unacknowledged,
                             window_after)
from ..logmodel import KernelLogPosition, XidEvent
from ..model import ERR, NOTICE, WARNING, LogEvent, NodeSnapshot, Outcome
from ..staterecords import XidAck
from ..pci import kernel_pci
from ..logmodel import group_key
from ..read.kernlog import current_boot, position_now, read_kernel_log
from .state import StateStore, read_acks, read_our_drain, write_acks, write_our_drain


def xid_list(events: Sequence[XidEvent]) -> str:
    return ", ".join(f"{e.pci} Xid {e.xid if e.xid is not None else 'off-bus'} x{e.occurrences}"
                     for e in events)


def acknowledge_xids(snapshot: NodeSnapshot, config: Config, store: StateStore,
                     events: List[LogEvent], gpus: Optional[Tuple[int, ...]], by: str,
                     upto: Optional[KernelLogPosition] = None) -> NodeSnapshot:
    """Record that the Xids in the snapshot's kernel log, on these GPUs (None: all), are dealt
    with; returns the snapshot without them.  `by`: "ack" (--ack), "resume" or "reset".
    `upto`: dealt with up to this position only (a resume: what was logged while the node was
    drained), and what came after it still counts; None: up to the end of this run's read."""
    log = snapshot.kernel_log
    if gpus is None:
        pcis = gpu_pcis(snapshot.gpus, log.events)
    else:
        pcis = tuple(p for p in (kernel_pci(g.pci_bus_id) for g in snapshot.gpus
                                 if g.index in gpus and g.pci_bus_id) if p)
    stored, _ = read_acks(store)
    mine = [e for e in log.events if e.pci in pcis]
    kept = tuple(e for e in log.events if e.pci not in pcis)
    boot = current_boot()
    if upto is not None:
        # what the kernel logged after `upto` still counts, as after any acknowledgement
        later = read_kernel_log(config.kernel_log, window_after(upto, boot.boot_id)).events
        marks = {p: XidAck(pci=p, position=upto, acked_at=0.0) for p in pcis}
        kept = unacknowledged(log.events, marks, {position_key(upto): later})
        mine = [e for e in mine if not any(group_key(k) == group_key(e) and k.occurrences >= e.occurrences
                                           for k in kept)]
    acks = acknowledge(stored, pcis, mine, upto or log.end or position_now(config.kernel_log),
                       boot, time.time(), by)
    try:
        write_acks(store, acks)
    except OSError as exc:
        events.append(LogEvent("error", ERR, f"cannot record the Xid acknowledgement in "
                                             f"{store.state_dir}: {exc}; the Xids still count"))
        return snapshot
    if mine:
        events.append(LogEvent("resume", NOTICE, "Xids acknowledged (" + by + "): " + xid_list(mine),
                               {}, Outcome.ACKNOWLEDGED))
    return snapshot._replace(kernel_log=log._replace(events=kept),
                             xid_ack_counts=tuple(sorted((p, a.count) for p, a in acks.items())))


def acknowledge_resets(snapshot: NodeSnapshot, config: Config, store: StateStore, node: str,
                       events: List[LogEvent],
                       reset_at: Optional[KernelLogPosition] = None) -> NodeSnapshot:
    """GPUs reset since our drain (their volatile ECC counters started over): the Xids logged
    before the reset are dealt with, never those after it (a GSP timeout, Xid 119, right after
    an admin's reset must still fail).  Where the reset's own marker is in the kernel log (the
    driver's init line of that GPU), what came before it is gone from the read already
    (kernlog.aggregate) and everything left came after it: nothing more is acknowledged.
    Without a marker: up to `reset_at` (our own reset: the log's end once nvidia-smi returned),
    else up to our drain (an admin's reset: only what was logged before the drain is surely
    older than it).  The note then holds the counters as they are now, so one reset
    acknowledges once and a later Xid still counts."""
    ours = read_our_drain(store)
    if ours is None or ours.node != node or not ours.volatile_ecc:
        return snapshot
    reset = counters_started_over(ours.volatile_ecc, snapshot.gpus)
    if not reset:
        return snapshot
    marked = [p for p in reset if p in snapshot.kernel_log.reinit]
    unmarked = [p for p in reset if p not in marked]
    if marked:
        later = [e for e in snapshot.kernel_log.events if e.pci in marked]
        events.append(LogEvent("resume", NOTICE, f"GPU(s) {', '.join(marked)} were reset since our "
                                                 f"drain (their init line is in the kernel log): the "
                                                 f"Xids before it are dealt with"
                                                 + (f"; {xid_list(later)} came after it and still "
                                                    f"count" if later else ""),
                               {}, Outcome.ACKNOWLEDGED))
    upto = reset_at or ours.drain_position or ours.position
    if unmarked and upto is not None:
        indices = tuple(g.index for g in snapshot.gpus
                        if g.pci_bus_id and kernel_pci(g.pci_bus_id) in unmarked)
        events.append(LogEvent("resume", NOTICE, f"GPU(s) {', '.join(unmarked)} were reset since our "
                                                 f"drain (volatile ECC counters started over): their "
                                                 f"Xids up to {'the reset' if reset_at else 'our drain'} "
                                                 f"count as dealt with, later ones count",
                               {}, Outcome.ACKNOWLEDGED))
        snapshot = acknowledge_xids(snapshot, config, store, events, indices, by="reset", upto=upto)
    now = {kernel_pci(g.pci_bus_id): (g.ecc_volatile_corrected or 0) + (g.ecc_volatile_uncorrected or 0)
           for g in snapshot.gpus if g.pci_bus_id}
    try:
        write_our_drain(store, ours._replace(volatile_ecc=tuple(
            (p, now.get(p, 0) if p in reset else n) for p, n in ours.volatile_ecc)))
    except OSError as exc:  # the next run acknowledges the same reset again: harmless, but said
        events.append(LogEvent("error", WARNING, f"cannot update the note of our drain in "
                                                 f"{store.state_dir}: {exc}; the next run "
                                                 f"acknowledges the same reset again"))
    return snapshot
