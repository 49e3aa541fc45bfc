"""PCI addresses in every form the node shows them, and the one place they are compared (pure).

    NVML     "00000000:41:00.0"   nvidia-smi, `nvidia-smi -q`
    sysfs    "0000:41:00.0"       /sys/bus/pci/devices, CUDA, SXid lines
    kernel   "0000:41:00"         NVRM Xid lines (no function)

Every reader and check that matches a GPU by its address goes through normalise_pci(): an Xid
logged against "0000:41:00" is the GPU NVML calls "00000000:41:00.0".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple


def _parts(address: str) -> Tuple[int, int, int, Optional[int]]:
    parts = address.strip().lower().split(":")
    if len(parts) == 2:  # "41:00.0" without domain
        parts = ["0"] + parts
    if len(parts) != 3:
        raise ValueError(f"not a PCI address: {address!r}")
    device, dot, function = parts[2].partition(".")
    return (int(parts[0], 16), int(parts[1], 16), int(device, 16),
            int(function, 16) if dot and function else None)


def normalise_pci(address: str) -> Tuple[int, int, int]:
    """(domain, bus, device) of "00000000:41:00.0", "0000:41:00.0" or the kernel's "0000:41:00".

    Raises:
        ValueError: not a PCI address.
    """
    domain, bus, device, _ = _parts(address)
    return domain, bus, device


def kernel_form(address: str) -> str:
    """The kernel log's "dddd:bb:dd", lower-case, zero-padded.  Raises ValueError."""
    domain, bus, device = normalise_pci(address)
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def kernel_pci(nvml_bus_id: str) -> Optional[str]:
    """NVML's "00000000:41:00.0" in the kernel log's form "0000:41:00"; None if not an address."""
    try:
        return kernel_form(nvml_bus_id)
    except ValueError:
        return None


def function_form(address: str) -> str:
    """"dddd:bb:dd.f", lower-case, function 0 when the text omits it.  Raises ValueError."""
    domain, bus, device, function = _parts(address)
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function or 0:x}"


def nvml_form(address: str) -> str:
    """NVML's "DDDDDDDD:BB:DD.0" (function 0: a GPU is function 0).  Raises ValueError."""
    domain, bus, device = normalise_pci(address)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


if TYPE_CHECKING:
    from .model import GpuSnapshot


def gpu_by_pci(gpus: "Sequence[GpuSnapshot]", pci: str) -> "Optional[GpuSnapshot]":
    """The GPU at a PCI address given in any of NVML's, CUDA's, sysfs's or the kernel's forms."""
    want = normalise_pci(pci)
    for gpu in gpus:
        if gpu.pci_bus_id and normalise_pci(gpu.pci_bus_id) == want:
            return gpu
    return None
