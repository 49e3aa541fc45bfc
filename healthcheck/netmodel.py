"""Records of the node's RDMA network: InfiniBand and RoCE ports as /sys/class/infiniband
shows them (filled by healthcheck.read.infiniband, judged by healthcheck.checks.network).

    port = IbPort(hca="mlx5_0", port=1, state=4, phys_state=5, rate_gbps=400.0, ...)
    port.name        # "mlx5_0:1", how the config, findings and the drain reason name it

Plain data, no I/O (model.py holds the rest of the records; these live apart to keep each file
small).  None means "not available": the file is absent or says N/A; a file that exists but
cannot be read is named in `unreadable`, which the checks report as unknown, never a drain.
"""

from __future__ import annotations

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
