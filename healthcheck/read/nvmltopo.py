"""The GPUs' NVLink far ends and PCIe peer-to-peer status, from NVML (--level deep only: 2
calls per active link, one per GPU pair, none of them on the prolog's path).

    topo = read_topology(gpus, timeout_s=10.0)   # -> deepmodel.Topology

For each active link of each GPU (read/nvml.py found the link count and the inactive links):
`nvmlDeviceGetNvLinkRemotePciInfo_v2` gives the far end's PCI address, and
`nvmlDeviceGetNvLinkRemoteDeviceType` (drivers since R460; where it is missing, a far end that
is one of the node's GPUs is a GPU and any other is taken for an NVSwitch) says whether it is
a GPU, an NVSwitch or a CPU; `nvmlDeviceGetNvLinkVersion` gives the links' version (the
per-link rate of a model checks/floors.py does not list).  For each pair of GPUs without NVLink between them,
`nvmlDeviceGetP2PStatus(..., NVML_P2P_CAPS_INDEX_READ)` says whether they can copy peer to
peer over PCIe.  NVML runs in a thread with a deadline, as read/nvml.py runs it; a call that
fails leaves that GPU's links unread (`error`), never a guess.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..deepmodel import GpuLinks, LinkEnd, Topology
from ..model import GpuSnapshot
from ..pci import nvml_form

KINDS = {0: "gpu", 1: "cpu", 2: "switch"}  # nvmlIntNvLinkDeviceType_t; 0xFF and others: unknown
P2P_CAPS_INDEX_READ = 0  # NVML_P2P_CAPS_INDEX_READ (pynvml spells it as a tuple)
P2P_STATUS_OK = 0


def _pci(value: Any) -> Optional[str]:
    text = value.decode() if isinstance(value, bytes) else str(value or "")
    try:
        return nvml_form(text)
    except ValueError:
        return None


def read_topology(gpus: Sequence[GpuSnapshot], timeout_s: float = 10.0) -> Topology:
    """The topology of these GPUs (their NVML indices), read within timeout_s."""
    out: Dict[str, Any] = {}

    def work() -> None:
        try:
            out["topology"] = _read(gpus)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            out["bug"] = exc

    thread = threading.Thread(target=work, name="nvml-topology", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout_s))
    if thread.is_alive():
        return Topology(error=f"NVML's NVLink topology not read within {timeout_s:g} s")
    if "bug" in out:
        raise out["bug"]
    return out["topology"]


def _read(gpus: Sequence[GpuSnapshot]) -> Topology:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Topology(error=f"nvmlInit: {exc}")
    try:
        own = {g.index: _pci(g.pci_bus_id) for g in gpus}
        handles: Dict[int, Any] = {}
        read: List[GpuLinks] = []
        for gpu in gpus:
            try:
                handles[gpu.index] = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
            except pynvml.NVMLError as exc:
                read.append(GpuLinks(gpu.index, own[gpu.index], error=f"handle: {exc}"))
                continue
            read.append(_links(pynvml, handles[gpu.index], gpu, own))
        return Topology(gpus=tuple(read), pcie_p2p=_pcie_pairs(pynvml, handles, read))
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _links(pynvml: Any, handle: Any, gpu: GpuSnapshot, own: Dict[int, Optional[str]]) -> GpuLinks:
    ends: List[LinkEnd] = []
    down = set(gpu.nvlink_down or ())
    node_pcis = {p for p in own.values() if p}
    typed = hasattr(pynvml, "nvmlDeviceGetNvLinkRemoteDeviceType")
    for link in range(gpu.nvlink_links or 0):
        if link in down:
            continue
        try:
            remote = _pci(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except pynvml.NVMLError as exc:
            return GpuLinks(gpu.index, own[gpu.index], tuple(ends), f"link {link}: {exc}")
        kind = "gpu" if remote in node_pcis else "switch"
        if typed:
            try:
                kind = KINDS.get(int(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)), "unknown")
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    return GpuLinks(gpu.index, own[gpu.index], tuple(ends), f"link {link} type: {exc}")
                typed = False
        ends.append(LinkEnd(link, remote, kind))
    version = None
    if ends:
        try:
            version = int(pynvml.nvmlDeviceGetNvLinkVersion(handle, ends[0].link))
        except pynvml.NVMLError:
            version = None  # the per-link rate then comes from the model's floor alone
    return GpuLinks(gpu.index, own[gpu.index], tuple(ends), link_version=version)


def _pcie_pairs(pynvml: Any, handles: Dict[int, Any], read: Sequence[GpuLinks]) -> Tuple[Tuple[int, int], ...]:
    """Pairs with no NVLink between them that NVML says can read each other over PCIe."""
    by_pci = {g.pci: g.index for g in read if g.pci}
    linked = {(g.index, by_pci[e.remote]) for g in read for e in g.ends if e.kind == "gpu" and e.remote in by_pci}
    on_fabric = {g.index for g in read if any(e.kind == "switch" for e in g.ends)}
    pairs: List[Tuple[int, int]] = []
    indices = sorted(handles)
    for i, a in enumerate(indices):
        for b in indices[i + 1:]:
            if (a, b) in linked or (b, a) in linked or (a in on_fabric and b in on_fabric):
                continue
            try:
                status = pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], P2P_CAPS_INDEX_READ)
            except pynvml.NVMLError:
                continue  # not known: not tested, never a failure
            if int(status) == P2P_STATUS_OK:
                pairs.append((a, b))
    return tuple(pairs)
