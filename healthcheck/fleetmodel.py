"""The records of fleet memory (`--suspects`, `--replay-failures`): what the accounting reader
fills, what the history gives, and what the suspect rules return.

    Job("4242", "alice", "FAILED", "1:0", start=1796380800.0, end=1796380803.0,
        nodes=("gpu-01", "gpu-02"))
    FleetEvent(time=1796380800.0, node="gpu-01", serial="1650522003802", kind="xid:48")
    Suspect(node="gpu-01", kind="black_hole", score=42.0, evidence={...})

A leaf shared by read/sacct.py and decide/suspects.py (the rooms do not import each other).
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Dict, Iterator, Optional, Tuple

from .records import NamedTuple

# what a --suspects run leaves: in state_dir (for --cluster), and beside metrics_file
SUSPECTS_STATE_FILE = "suspects.json"
SUSPECTS_TEXTFILE = "gpu_healthcheck_suspects.prom"


class Job(NamedTuple):
    """One allocation as Slurm's accounting recorded it (`sacct -X`).  Times are epoch seconds."""

    job_id: str
    user: str
    state: str  # the state's first word: "CANCELLED by 1000" -> "CANCELLED"
    exit_code: str  # "RC:SIGNAL", as sacct prints it
    start: float
    end: float
    nodes: Tuple[str, ...]

    @property
    def failed(self) -> bool:
        """Ended FAILED or NODE_FAIL: the states a node can cause.  CANCELLED, TIMEOUT,
        OUT_OF_MEMORY and PREEMPTED are the user's or the scheduler's."""
        return self.state in FAILED_STATES


FAILED_STATES = frozenset({"FAILED", "NODE_FAIL"})


class Accounting(NamedTuple):
    """What the accounting door read.  `unknown` set: it could not be read (no sacct, slurmdbd
    down, AccountingStorageType=none), and `jobs` is then empty and means nothing: a caller
    must never read it as "no failures"."""

    jobs: Tuple[Job, ...] = ()
    unknown: Optional[str] = None
    notes: Tuple[str, ...] = ()  # lines skipped, pieces truncated: said, never silent


class FleetEvent(NamedTuple):
    """One hardware event or remediation at a node (and GPU serial, where known), from our own
    history or a failure history CSV.  kind: dbe, otb, xid:N, remap, sbe_burst, reset, reboot."""

    time: float
    node: str
    serial: Optional[str]
    kind: str


class CounterSample(NamedTuple):
    """One GPU's error counters as one run of the node check read them, from the history line's
    "gpus" block (act/history.py).  None: NVML did not give that counter.  `load`: the sample
    ends a job that ran on this GPU (an epilog's GPU under test), so what the counters grew by
    since the previous sample grew under load."""

    time: float
    node: str
    serial: str
    gpu: Optional[int]
    load: bool
    sbe: Optional[int]  # corrected ECC errors, aggregate (the board's life)
    retired: Optional[int]  # retired pages, single- and double-bit
    remap_low: Optional[int]  # memory banks with low or no row-remap availability left
    pcie_replay: Optional[int]  # since the driver loaded
    nvlink_replay: Optional[int]  # summed over the links, since the driver loaded


class Suspect(NamedTuple):
    """A node (or a GPU serial at a node) the evidence points at.  `score`: larger is worse;
    for a lemon it is -log10 of the p-value, which `evidence` also holds."""

    node: str
    kind: str  # black_hole, lemon, remediations, serial_remediations, same_xid_after_reboots, xid_repeat,
    # ecc_sbe_rate, remap_headroom, retired_pages, pcie_replay, nvlink_replay
    score: float
    evidence: Dict[str, Any]
    serial: Optional[str] = None

    def as_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"node": self.node, "kind": self.kind, "score": round(self.score, 3),
                               "evidence": self.evidence}
        if self.serial is not None:
            out["serial"] = self.serial
        return out


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector held off while a million records are made or walked.
    Records are tuples that hold no cycles, yet every few hundred allocations the collector
    walks them all again: a quarter of reading and analysing a large cluster's accounting.
    Reference counting still frees everything; the collector runs again on leaving."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
