"""What the deep level measured (read/deep.py writes these, checks/deep.py judges them).

A leaf beside model.py: records only, so checks/ may import it without importing a reader.
"""

from __future__ import annotations

from typing import Optional, Tuple

from .logmodel import XidEvent
from .records import NamedTuple

# The GpuSnapshot fields NVML is read again for after the deep tests (read/deepafter.py), and
# their words in a finding (checks/deepload.py: deep.after).
AFTER_FIELDS = (("ecc_volatile_uncorrected", "volatile uncorrected ECC errors"),
                ("ecc_aggregate_uncorrected", "aggregate uncorrected ECC errors"),
                ("ecc_volatile_corrected", "volatile corrected ECC errors"),
                ("retired_dbe", "pages retired for DBEs"), ("retired_sbe", "pages retired for SBEs"),
                ("retired_pending", "page retirement pending"),
                ("remap_uncorrectable", "rows remapped for uncorrectable errors"),
                ("remap_correctable", "rows remapped for correctable errors"),
                ("remap_pending", "row remap pending"), ("remap_failure", "row remap failure"),
                ("sram_aggregate_uncorrected", "SRAM uncorrectable errors"),
                ("recovery_action", "NVML recovery action"), ("lost", "GPU lost"))


class MemError(NamedTuple):
    """One failing 64-bit word of the memory test, as the device reported it."""

    offset: int  # byte offset of the word in the tested buffer
    address: int  # its device address
    expected: int
    actual: int


class LoadSample(NamedTuple):
    """One NVML reading while the compute kernels ran (every deep.SAMPLE_S, 100 ms)."""

    t: float  # seconds since the load began (host clock)
    sm_mhz: Optional[int] = None
    power_mw: Optional[int] = None
    temperature_c: Optional[int] = None
    reasons: Optional[int] = None  # clocks event reasons


class DeepGpu(NamedTuple):
    """The deep tests of one GPU.  A figure is None when its test did not run."""

    index: int  # type: ignore[assignment]  # NVML index
    status: str  # "ok", "error" (a CUDA call failed), "timeout", "crashed", "not_run"
    detail: str = ""
    cu_result: Optional[int] = None
    cu_name: Optional[str] = None
    mem_bytes: int = 0  # bytes the memory test covered
    mem_errors: int = 0  # failing words in the first pass that failed
    mem_pass: Optional[str] = None  # that pass
    mem_records: Tuple[MemError, ...] = ()  # the first few failing words
    hbm_read_gbps: Optional[float] = None
    hbm_copy_gbps: Optional[float] = None  # bytes read + bytes written, per second
    h2d_gbps: Optional[float] = None  # pinned host memory to the GPU
    d2h_gbps: Optional[float] = None
    gflops: Optional[float] = None  # FP32 FMA
    sm_clock_mhz: Optional[int] = None  # the lowest SM clock NVML gave while the FMA ran
    sm_clock_max_mhz: Optional[int] = None
    load_reasons: Optional[int] = None  # clocks event reasons seen while the FMA ran (OR)
    host_numa: Optional[int] = None  # the NUMA node the host copies ran bound to (None: unbound)
    mem_passes: int = 0  # passes of the memory test that ran
    tensor_gflops: Optional[float] = None  # BF16/FP16 mma.sync (sm_80 and newer)
    load_s: float = 0.0  # device seconds of compute launches (the sustained load)
    launches: int = 0  # compute launches, each output checked
    wrong_elements: int = 0  # output elements that differed from the closed form, all launches
    wrong_launches: int = 0  # launches with a wrong element
    wrong_most: int = 0  # the most wrong elements in one launch
    wrong_kernels: Tuple[str, ...] = ()  # the kernels whose output was wrong
    sm_clock_sustained_mhz: Optional[int] = None  # median SM clock over the load's second half
    power_max_mw: Optional[int] = None
    temperature_max_c: Optional[int] = None
    reasons_first_s: Tuple[Tuple[int, float], ...] = ()  # (reason bit, seconds into the load)
    trace: Tuple[LoadSample, ...] = ()
    times: Tuple[Tuple[str, float], ...] = ()  # (test, seconds on the device)
    duration_s: float = 0.0  # wall time of the child


class DeepPeer(NamedTuple):
    """One peer copy between two GPUs (NVML indices)."""

    src: int
    dst: int
    gbps: Optional[float] = None
    detail: str = ""
    via: str = ""  # "nvlink" (links to each other), "nvswitch", "pcie" (PCIe peer to peer); "": the ring
    links: Tuple[int, ...] = ()  # the source's links that carry it (direct: to dst; nvswitch: to switches)


class LinkEnd(NamedTuple):
    """One active NVLink's far end, as NVML reports it."""

    link: int
    remote: Optional[str]  # the far end's PCI address, normalised; None where NVML gave none
    kind: str  # "gpu", "switch", "cpu", "unknown" (nvmlDeviceGetNvLinkRemoteDeviceType)


class GpuLinks(NamedTuple):
    index: int  # type: ignore[assignment]  # NVML index
    pci: Optional[str]  # its own PCI address, normalised
    ends: Tuple[LinkEnd, ...] = ()
    error: Optional[str] = None  # why its links could not be read
    link_version: Optional[int] = None  # nvmlDeviceGetNvLinkVersion of its first active link


class Topology(NamedTuple):
    """The GPUs' NVLink far ends and PCIe peer-to-peer status (read/nvmltopo.py)."""

    gpus: Tuple[GpuLinks, ...] = ()
    pcie_p2p: Tuple[Tuple[int, int], ...] = ()  # pairs NVML says can copy peer to peer over PCIe
    error: Optional[str] = None


class GpuCounters(NamedTuple):
    """A GPU's error counters before the deep tests (AFTER_FIELDS' values, in order)."""

    index: int  # type: ignore[assignment]
    uuid: str
    values: Tuple[object, ...] = ()


class DeepRun(NamedTuple):
    gpus: Tuple[DeepGpu, ...] = ()
    peers: Tuple[DeepPeer, ...] = ()
    peer_detail: Optional[str] = None  # why the peer test did not run, where it did not
    topology: Optional[Topology] = None  # what the peer pairs were chosen from
    # read/deepafter.py: the counters before the tests (the snapshot's GPUs hold them after),
    # the Xids the kernel logged while they ran, and why the re-read failed where it did
    before: Tuple[GpuCounters, ...] = ()
    during_xids: Tuple[XidEvent, ...] = ()
    after_error: Optional[str] = None
    after_ran: bool = False


class DcgmResult(NamedTuple):
    """One result dcgmi reported: a diagnostic test on a GPU, or a health watch's incident."""

    gpu: Optional[int]  # NVML's index once attributed (dcgmmap.attribute); None: not one GPU
    test: str  # "Memory", "PCIe", "Diagnostic", or the health system ("NVLink", "Memory", ...)
    # "pass", "warn", "fail", "skip"; "unknown": on an entity this node lacks; a fail DCGM graded
    # "config" (DCGM_ERROR_CONFIG), "internal" (DCGM's own error: the test did not run) or
    # "ungraded" (DCGM_ERROR_UNKNOWN), read/dcgm4.py
    status: str
    text: str = ""  # DCGM's own words
    entity: str = ""  # DCGM's own name of the entity ("GPU3": DCGM's id, "CPU0"), where it gave one


class DcgmEntity(NamedTuple):
    """One entity a DCGM 4.x diagnostic lists under `entity_groups`."""

    group: str  # "GPU", "CPU", "Switch", ...
    entity_id: int  # DCGM's id, not necessarily NVML's index
    serial: Optional[str] = None  # absent, or "<<<NOT_SUPPORTED>>>", where the board has none
    device_id: Optional[str] = None  # the PCI device id, "2330": the SKU, not the bus address
    pci: Optional[str] = None  # the bus address, from `dcgmi discovery -l` (read/dcgmmap.py)
    uuid: Optional[str] = None  # likewise


class DcgmRead(NamedTuple):
    """What `dcgmi diag` and `dcgmi health` said this run (read/dcgm.py)."""

    diag: Tuple[DcgmResult, ...] = ()
    health: Tuple[DcgmResult, ...] = ()
    diag_error: Optional[str] = None  # dcgmi diag missing, hung, failed or unreadable: unknown
    health_error: Optional[str] = None
    diag_ran: bool = False
    health_ran: bool = False
    entities: Tuple[DcgmEntity, ...] = ()  # DCGM 4.x's entity_groups, to map its ids to NVML's
    attributed: bool = False  # results carry NVML indices (read/dcgmmap.py ran)
