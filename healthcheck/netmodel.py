"""Records of the network: the node's InfiniBand and RoCE ports as /sys/class/infiniband shows
them (filled by healthcheck.read.infiniband, judged by healthcheck.checks.network), and the
fabric tests' outputs: nccl-tests' (NcclRun, filled by read/nccltests.py), perftest's
ib_write_bw's (IbRun, read/perftest.py) and a fabric job's sections (JobSection,
read/internodejob.py), judged by decide/sweep.py, decide/internodejob.py and decide/gang.py; and
what the search for a bad node concludes of each node (NodeOutcome), which the multi-node checks
(checks/internode.py) turn into findings.

    port = IbPort(hca="mlx5_0", port=1, state=4, phys_state=5, rate_gbps=400.0, ...)
    port.name        # "mlx5_0:1", how the config, findings and the drain reason name it

Plain data, no I/O (model.py holds the rest of the records; these live apart to keep each file
small).  None means "not available": the file is absent or says N/A; a file that exists but
cannot be read is named in `unreadable`, which the checks report as unknown, never a drain.
"""

from __future__ import annotations

import enum
from typing import Optional, Tuple

from .records import NamedTuple

# The IBA PortCounters the epilog diffs against the prolog's baseline (ib.errors), as the
# kernel names the files in ports/N/counters/ (and, on some drivers, ports/N/hw_counters/).
ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "local_link_integrity_errors", "excessive_buffer_overrun_errors")
# Their widths in the IBA PortCounters attribute (IBA 1.3 vol. 1, 16.1.3.5): the kernel reads
# them from the PMA and they stop at the top (they saturate, never wrap), so growth past it is
# invisible until someone clears them (`perfquery -R`).
COUNTER_MAX = {"symbol_error": 0xFFFF, "link_error_recovery": 0xFF, "link_downed": 0xFF,
               "port_rcv_errors": 0xFFFF, "local_link_integrity_errors": 0xF,
               "excessive_buffer_overrun_errors": 0xF}
# ib_verbs' port states (include/rdma/ib_verbs.h enum ib_port_state) and the physical states
# the kernel prints in phys_state (drivers/infiniband/core/sysfs.c phys_state_to_str).
STATE_ACTIVE = 4
PHYS_LINK_UP = 5
PHYS_DOWN = {1: "Sleep", 2: "Polling", 3: "Disabled"}  # no link: the port cannot carry traffic


class IbPort(NamedTuple):
    """One port of one RDMA device (/sys/class/infiniband/<hca>/ports/<port>)."""

    hca: str  # mlx5_0
    port: int  # 1-based, as the kernel numbers them
    pci: Optional[str] = None  # the HCA's PCI function, kernel form 0000:3b:00.0 (device link)
    hca_type: Optional[str] = None  # MT4129 ... (absent on some drivers)
    link_layer: Optional[str] = None  # "InfiniBand" | "Ethernet" (RoCE)
    state: Optional[int] = None  # 4 = ACTIVE
    state_name: Optional[str] = None  # as the file says it: "ACTIVE", "DOWN", "INIT", ...
    phys_state: Optional[int] = None  # 5 = LinkUp, 2 = Polling, 3 = Disabled
    phys_state_name: Optional[str] = None
    rate_gbps: Optional[float] = None  # from "100 Gb/sec (4X EDR)"
    rate: Optional[str] = None  # the file's text
    netdev: Optional[str] = None  # RoCE: the Ethernet interface of this port
    operstate: Optional[str] = None  # RoCE: /sys/class/net/<netdev>/operstate ("up", "down")
    symbol_error: Optional[int] = None
    link_error_recovery: Optional[int] = None
    link_downed: Optional[int] = None
    port_rcv_errors: Optional[int] = None
    local_link_integrity_errors: Optional[int] = None
    excessive_buffer_overrun_errors: Optional[int] = None
    unreadable: Tuple[str, ...] = ()  # "path: error" for each file that exists but cannot be read
    gpus: Tuple[str, ...] = ()  # PCI addresses (kernel form) of the GPUs on the same PCIe switch

    @property
    def name(self) -> str:
        return f"{self.hca}:{self.port}"

    @property
    def up(self) -> Optional[bool]:
        """ACTIVE with a physical link; None when the state could not be read."""
        if self.state is None:
            return None
        return self.state == STATE_ACTIVE and self.phys_state not in PHYS_DOWN


class NetworkRead(NamedTuple):
    """What /sys/class/infiniband held.  The snapshot has None instead when it does not exist."""

    ports: Tuple[IbPort, ...] = ()
    error: Optional[str] = None  # /sys/class/infiniband exists but could not be listed
    # the GPUDirect RDMA module that is loaded: "nvidia_peermem", "nv_peer_mem", or None
    peermem: Optional[str] = None


class PortBaseline(NamedTuple):
    """What the prolog recorded of one port, for the epilog (Baseline.ports)."""

    name: str  # mlx5_0:1
    state: Optional[int] = None
    phys_state: Optional[int] = None
    rate_gbps: Optional[float] = None
    symbol_error: Optional[int] = None
    link_error_recovery: Optional[int] = None
    link_downed: Optional[int] = None
    port_rcv_errors: Optional[int] = None
    local_link_integrity_errors: Optional[int] = None
    excessive_buffer_overrun_errors: Optional[int] = None


class NcclRow(NamedTuple):
    """One row of the table: out-of-place and in-place figures of one message size."""

    size_bytes: int
    elements: int  # the count column: elements per rank
    dtype: str
    redop: Optional[str]  # None: the older all_gather layout has no redop column
    busbw_out_gbps: float
    busbw_in_gbps: float
    algbw_out_gbps: float
    time_out_us: float
    wrong_out: Optional[int]  # None: the column is N/A or a float error (older layout)
    wrong_in: Optional[int]

    @property
    def busbw_gbps(self) -> float:
        return max(self.busbw_out_gbps, self.busbw_in_gbps)


class NcclRun(NamedTuple):
    rows: Tuple[NcclRow, ...] = ()
    avg_busbw_gbps: Optional[float] = None
    out_of_bounds: Optional[int] = None
    oob_failed: bool = False
    warnings: Tuple[str, ...] = ()
    errors: Tuple[str, ...] = ()
    hosts: Tuple[str, ...] = ()  # in rank order, each host once
    ranks: int = 0  # distinct rank numbers of the "#  Rank N ... on HOST" lines
    rank_lines: int = 0  # those lines: more than `ranks` when several runs each printed rank 0

    @property
    def complete(self) -> bool:
        """The summary line was printed: the run reached its end."""
        return self.avg_busbw_gbps is not None

    @property
    def busbw_gbps(self) -> Optional[float]:
        """Bus bandwidth (GB/s) at the largest message size; None without a row."""
        if not self.rows:
            return None
        largest = max(r.size_bytes for r in self.rows)
        return max(r.busbw_gbps for r in self.rows if r.size_bytes == largest)

    @property
    def wrong(self) -> int:
        """Wrong elements the rows count (out-of-place and in-place), plus the out-of-bounds
        count where the rows cannot say (older layout)."""
        counted = sum((r.wrong_out or 0) + (r.wrong_in or 0) for r in self.rows)
        return max(counted, self.out_of_bounds or 0)


class IbRow(NamedTuple):
    size_bytes: int
    iterations: int
    peak_gbps: float
    avg_gbps: float


class IbRun(NamedTuple):
    rows: Tuple[IbRow, ...] = ()
    device: Optional[str] = None
    link_type: Optional[str] = None  # IB | Ethernet (RoCE)
    unit: Optional[str] = None  # "Gb" or "MB": how the run printed it
    errors: Tuple[str, ...] = ()

    @property
    def avg_gbps(self) -> Optional[float]:
        """The average bandwidth (Gb/s) of the largest message size measured; None: none was."""
        if not self.rows:
            return None
        largest = max(r.size_bytes for r in self.rows)
        return min(r.avg_gbps for r in self.rows if r.size_bytes == largest)

    @property
    def peak_gbps(self) -> Optional[float]:
        if not self.rows:
            return None
        largest = max(r.size_bytes for r in self.rows)
        return min(r.peak_gbps for r in self.rows if r.size_bytes == largest)


# The markers a fabric job's script echoes around each program (decide/internodejob.job_script
# writes them, read/internodejob.py splits the output at them).
MARK = "== gpu-healthcheck"


class JobSection(NamedTuple):
    """One program's part of a fabric job's output (between its `begin` and `rc=` markers)."""

    rc: Optional[int]  # its exit status; None: it never ended (no `rc=` marker)
    missing: Optional[str] = None  # the program slurmstepd or a shell said is not there
    last_line: str = "no output"  # its last line, to quote
    nccl: NcclRun = NcclRun()  # the collective's output read (rails: empty)
    ib: IbRun = IbRun()  # a rail's ib_write_bw output read (the collective: empty)


class Word(str, enum.Enum):
    """An outcome typed in the code and printed as its word at the edges: str(), an f-string
    and JSON give the value ("bad"), as the table, the history, the journal and the metrics'
    labels always printed it."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class NodeVerdict(Word):
    """What the search for a bad node concludes of one node (decide/sweep.py's planner,
    decide/gang.py): bad (drained), transient (history only), unknown (tested first at the next
    sweep), pass, skipped (never ran: no evidence either way)."""

    BAD = "bad"
    TRANSIENT = "transient"
    UNKNOWN = "unknown"
    PASS = "pass"
    SKIPPED = "skipped"


BAD, TRANSIENT, UNKNOWN, PASS, SKIPPED = (NodeVerdict.BAD, NodeVerdict.TRANSIENT, NodeVerdict.UNKNOWN,
                                          NodeVerdict.PASS, NodeVerdict.SKIPPED)


class GangOutcome(Word):
    """What one gang check concludes of its job (decide/gang.py): passed, failed (a node was
    found bad), single (one node: nothing to check), unknown (failed, and no node could be
    named); could_not_run (setup, never a node's fault) is the metrics' word for no result."""

    PASSED = "passed"
    FAILED = "failed"
    SINGLE = "single"
    UNKNOWN = "unknown"
    COULD_NOT_RUN = "could_not_run"


class NodeOutcome(NamedTuple):
    node: str
    outcome: NodeVerdict
    busbw_gbps: Optional[float] = None  # the figure that decided (a bad node's worst)
    partners: Tuple[str, ...] = ()
    why: str = ""  # "busbw=41.2<100", "NCCL WARN ...", "passed with gpu-c,gpu-e"
