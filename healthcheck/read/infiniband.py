"""Reader of the node's RDMA ports: InfiniBand and RoCE, as /sys/class/infiniband shows them.

    hcas = os.listdir("/sys/class/infiniband")          # read/node.py, once
    network = read_infiniband("/sys", hcas, gpu_pcis=("0000:41:00.0", ...), gpudirect=True)

Per port a handful of small reads: state, phys_state, rate, link_layer and the six error
counters of checks/network.py (ports/N/counters/, else ports/N/hw_counters/); per HCA its
hca_type, its PCI function (the `device` link) and, for RoCE, the netdev's operstate.  The
formats are the kernel's (drivers/infiniband/core/sysfs.c): `4: ACTIVE`, `5: LinkUp`,
`100 Gb/sec (4X EDR)`, `InfiniBand` / `Ethernet`, a counter as a decimal number or
`N/A (no PMA)` where the device has no performance-management agent.

A file that is absent or says N/A is None (not available: no finding); a file that exists but
cannot be read is named in IbPort.unreadable (the checks report unknown, never a drain).  The
module imports nothing beyond os: a node with RDMA devices pays it, a node without pays only
read/node.py's one failed listdir.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

from ..netmodel import ERROR_COUNTERS, IbPort, NetworkRead

# Kernel modules that give the NVIDIA driver GPUDirect RDMA with an RDMA NIC: nvidia-peermem
# (in the driver since R465) and Mellanox's older nv_peer_mem; loaded, each has /sys/module/<name>.
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
_COUNTER_DIRS = ("counters", "hw_counters")


def _read(path: str, unreadable: List[str]) -> Optional[str]:
    """The file's text stripped; None when absent, or unreadable (then noted)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(256).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        unreadable.append(f"{path}: {exc.strerror or exc}")
        return None


def parse_state(text: Optional[str]) -> Tuple[Optional[int], Optional[str]]:
    """"4: ACTIVE" -> (4, "ACTIVE"); "5: LinkUp" -> (5, "LinkUp"); anything else (None, None)."""
    if not text:
        return None, None
    number, colon, name = text.partition(":")
    # isascii: str.isdigit() also accepts "²" and other digits int() refuses (hypothesis found it)
    if not colon or not (number.strip().isascii() and number.strip().isdigit()):
        return None, None
    return int(number), name.strip() or None


def parse_rate(text: Optional[str]) -> Optional[float]:
    """"100 Gb/sec (4X EDR)" -> 100.0, "2.5 Gb/sec (1X SDR)" -> 2.5; anything else None."""
    if not text:
        return None
    number, _, rest = text.partition(" ")
    if not rest.startswith("Gb/sec"):
        return None
    try:
        value = float(number)
    except ValueError:
        return None
    return value if value >= 0 and value == value and value != float("inf") else None


def parse_counter(text: Optional[str]) -> Optional[int]:
    """A counter file's decimal value; None for "N/A (no PMA)" and anything not a number."""
    if not text or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def pci_path(link: str) -> Tuple[str, ...]:
    """The PCI functions from the root complex down to this device, from a resolved sysfs path
    (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0)."""
    found = []
    for part in link.split("/"):
        if len(part) == 12 and part[4] == ":" and part[7] == ":" and part[10] == ".":
            found.append(part.lower())
    return tuple(found)


def same_switch(a: Tuple[str, ...], b: Tuple[str, ...]) -> bool:
    """Whether two devices sit below the same PCIe switch: their paths share the root port and
    the switch's upstream port (two functions or more), the layout GPUDirect RDMA is fast on."""
    if len(a) < 3 or len(b) < 3:
        return False
    common = 0
    for x, y in zip(a[:-1], b[:-1]):
        if x != y:
            break
        common += 1
    return common >= 2


def _gpu_paths(sysfs_root: str, gpu_pcis: Sequence[str]) -> Dict[str, Tuple[str, ...]]:
    paths = {}
    for pci in gpu_pcis:
        path = pci_path(os.path.realpath(os.path.join(sysfs_root, "bus", "pci", "devices", pci)))
        if path:
            paths[pci] = path
    return paths


def _netdev(device_dir: str, port: int, unreadable: List[str]) -> Optional[str]:
    """The Ethernet interface of a RoCE port: the function's one netdev, else the one whose
    dev_port (0-based) is this port."""
    try:
        names = sorted(os.listdir(os.path.join(device_dir, "net")))
    except OSError:
        return None
    if len(names) == 1:
        return names[0]
    for name in names:
        dev_port = _read(os.path.join(device_dir, "net", name, "dev_port"), unreadable)
        if dev_port is not None and dev_port.isdigit() and int(dev_port) == port - 1:
            return name
    return None


def read_port(hca_dir: str, hca: str, port: int, pci: Optional[str], hca_type: Optional[str],
              gpus: Tuple[str, ...]) -> IbPort:
    unreadable: List[str] = []
    base = os.path.join(hca_dir, "ports", str(port))
    state, state_name = parse_state(_read(os.path.join(base, "state"), unreadable))
    phys, phys_name = parse_state(_read(os.path.join(base, "phys_state"), unreadable))
    rate = _read(os.path.join(base, "rate"), unreadable)
    link_layer = _read(os.path.join(base, "link_layer"), unreadable) or None
    counters: Dict[str, Optional[int]] = {}
    for name in ERROR_COUNTERS:
        text = None
        for sub in _COUNTER_DIRS:
            text = _read(os.path.join(base, sub, name), unreadable)
            if text is not None:
                break
        counters[name] = parse_counter(text)
    netdev = operstate = None
    if link_layer == "Ethernet":
        device_dir = os.path.join(hca_dir, "device")
        netdev = _netdev(device_dir, port, unreadable)
        if netdev:
            operstate = _read(os.path.join(device_dir, "net", netdev, "operstate"), unreadable)
    return IbPort(hca=hca, port=port, pci=pci, hca_type=hca_type, link_layer=link_layer,
                  state=state, state_name=state_name, phys_state=phys, phys_state_name=phys_name,
                  rate_gbps=parse_rate(rate), rate=rate, netdev=netdev, operstate=operstate,
                  unreadable=tuple(unreadable), gpus=gpus, **counters)


def read_infiniband(sysfs_root: str, hcas: Sequence[str], gpu_pcis: Sequence[str] = (),
                    gpudirect: bool = True) -> NetworkRead:
    """Every port of every RDMA device listed in <sysfs_root>/class/infiniband (`hcas`, the
    caller's listing).  `gpu_pcis`: the GPUs' PCI functions (0000:41:00.0), linked to the
    ports on their PCIe switch; `gpudirect`: look for the peer-memory module."""
    root = os.path.join(sysfs_root, "class", "infiniband")
    gpu_paths = _gpu_paths(sysfs_root, gpu_pcis) if gpu_pcis else {}
    ports: List[IbPort] = []
    errors: List[str] = []
    for hca in sorted(hcas):
        hca_dir = os.path.join(root, hca)
        try:
            numbers = sorted(int(n) for n in os.listdir(os.path.join(hca_dir, "ports")) if n.isdigit())
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):
                errors.append(f"{os.path.join(hca_dir, 'ports')}: {exc.strerror or exc}")
            continue  # a device without ports (being removed) is none of ours to judge
        unreadable: List[str] = []
        hca_type = _read(os.path.join(hca_dir, "hca_type"), unreadable) or None
        device = os.path.join(hca_dir, "device")
        path = pci_path(os.path.realpath(device)) if os.path.islink(device) else ()
        pci = path[-1] if path else None
        near = tuple(g for g, p in gpu_paths.items() if path and same_switch(path, p))
        for number in numbers:
            port = read_port(hca_dir, hca, number, pci, hca_type, near)
            if unreadable:
                port = port._replace(unreadable=tuple(unreadable) + port.unreadable)
            ports.append(port)
    peermem = None
    if gpudirect and ports:
        peermem = next((m for m in PEERMEM_MODULES
                        if os.path.isdir(os.path.join(sysfs_root, "module", m))), None)
    return NetworkRead(ports=tuple(ports), error="; ".join(errors) or None, peermem=peermem)
