"""What gpu-healthcheck keeps in state_dir between runs (act/state.py stores and reads them):
plain records, like model.py's, but what one run leaves to the next rather than what flows
through a run: our drain, a drain pending until a job ends, the Xids acknowledged, the GPUs known."""

from __future__ import annotations

from typing import Optional, Tuple

from .logmodel import KernelLogPosition
from .records import NamedTuple


class PendingDrain(NamedTuple):
    reason: str
    node: str
    mode: str
    job_id: Optional[str]
    created_at: float
    admin_comment_job: Optional[str] = None
    level: str = "quick"  # decide.levels.found_at of the run that could not drain
    checks: Tuple[str, ...] = ()


class XidAck(NamedTuple):
    """Up to where one GPU's Xids are dealt with (an admin's --ack, or the resume of our drain).

    Xids logged after `position` count again.  `boot_id` is the boot it belongs to
    (/proc/sys/kernel/random/boot_id): after a reboot the kernel log starts over and the ack no
    longer applies.  `boot` (btime) is all that files from before boot_id hold.  `count` is how many
    acknowledgements dealt with a failing Xid on this GPU, over its life: past
    `xid_escalate_after` a new one escalates instead of asking for another reset."""

    pci: str  # kernel form dddd:bb:dd
    position: KernelLogPosition
    acked_at: float
    boot: Optional[float] = None
    count: int = 0  # type: ignore[assignment]  # tuple.count is never used here
    by: str = "ack"  # "ack" (gpu-healthcheck --ack) | "resume" (an admin resumed our drain)
    boot_id: Optional[str] = None


class OurDrain(NamedTuple):
    """The drain we applied to this node, so that a later run can tell the admin resumed it."""

    node: str
    reason: str
    drained_at: float
    # (kernel PCI address, volatile ECC errors corrected + uncorrected) of each GPU that had any
    # when we drained: a GPU reset (or driver reload) starts these counters over, which deals
    # with that GPU's Xids even where the kernel log shows no init line
    volatile_ecc: Tuple[Tuple[str, int], ...] = ()
    # where the kernel log stood the last time a run saw the node drained by us (the drain's
    # own run first): an admin's resume deals with the Xids up to here, never with later ones
    position: Optional[KernelLogPosition] = None
    # the level that found the fault (decide.levels.found_at: deep for the deep tests and dcgmi
    # diag, full for the full probe) and the checks that drained: only a pass at that level
    # that judged them, or the repair's validation at it, resumes the node
    level: str = "quick"
    checks: Tuple[str, ...] = ()
    # where the kernel log stood at the drain itself (never moved on): a GPU reset that no
    # kernel line marks deals with the Xids up to here only, for only these surely came before it
    drain_position: Optional[KernelLogPosition] = None


class KnownGpu(NamedTuple):
    """A GPU this node listed, as the last run that saw it left it (state_dir/known-gpus.json):
    how a GPU that later vanishes from NVML, or answers nothing but GPU_IS_LOST, is still
    named by its serial and PCI address."""

    index: int  # type: ignore[assignment]  # the NVML index then; tuple.index is never used here
    pci: str  # NVML form
    serial: str = ""
    uuid: str = ""
    seen_at: float = 0.0
