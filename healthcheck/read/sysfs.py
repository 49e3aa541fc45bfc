"""Reader of the NVIDIA PCI functions that sysfs lists (vendor 0x10de, display or 3D class).

A GPU that fell off the bus disappears from NVML but stays in sysfs until the node reboots;
comparing the two counts catches it.

    read_sysfs_nvidia("/sys")  # SysfsNvidia(gpus=("0000:41:00.0", ...), nvswitches=(...), error=None)
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

from ..records import NamedTuple

NVIDIA_VENDOR = "0x10de"
# PCI class 0x0300 VGA-compatible controller, 0x0302 3D controller (data-centre GPUs).
# NVSwitches (0x0680) and audio functions (0x0403) are not GPUs.
GPU_CLASSES = ("0x0300", "0x0302")
# An NVSwitch is an NVIDIA function of class 0x0680 ("other bridge device"), as `lspci` shows
# the six of an HGX A100 baseboard ("Bridge: NVIDIA Corporation Device 1af1").  Unlike NVML's
# fabric state, which only Hopper and later report, the bus shows them on every generation.
NVSWITCH_CLASS = "0x0680"


class SysfsNvidia(NamedTuple):
    gpus: Optional[Tuple[str, ...]]  # PCI addresses; None: the bus could not be listed
    nvswitches: Tuple[str, ...]
    error: Optional[str]


def read_sysfs_nvidia(sysfs_root: str) -> SysfsNvidia:
    """The NVIDIA GPU functions and NVSwitch functions on the PCI bus, in one listing."""
    devices = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(devices))
    except OSError as exc:
        return SysfsNvidia(None, (), f"cannot list {devices}: {exc.strerror or exc}")
    gpus, switches = [], []
    for name in names:
        try:
            with open(os.path.join(devices, name, "vendor")) as handle:
                if handle.read().strip().lower() != NVIDIA_VENDOR:
                    continue
            with open(os.path.join(devices, name, "class")) as handle:
                klass = handle.read().strip().lower()[:6]
        except OSError:
            continue  # a device removed while we list is not ours to judge
        if klass in GPU_CLASSES:
            gpus.append(name)
        elif klass == NVSWITCH_CLASS:
            switches.append(name)
    return SysfsNvidia(tuple(gpus), tuple(switches), None)


def read_unbound(sysfs_root: str, addresses: Tuple[str, ...]) -> Tuple[Tuple[str, str], ...]:
    """The functions among `addresses` not bound to the nvidia driver, with the driver they
    are bound to ("no driver" where none): a GPU passed to a VM (vfio-pci), unbound, or
    excluded with NVreg_ExcludedGpus is not one NVML can see, so it is no lost GPU."""
    devices = os.path.join(sysfs_root, "bus", "pci", "devices")
    unbound = []
    for address in addresses:
        try:
            driver = os.path.basename(os.readlink(os.path.join(devices, address, "driver")))
        except OSError:
            driver = "no driver"
        if driver != "nvidia":
            unbound.append((address, driver))
    return tuple(unbound)


def read_driver_age(proc_root: str) -> Optional[float]:
    """Seconds since the NVIDIA driver loaded, as far as we can tell: the uptime
    (`/proc/uptime`), since the kernel exports no load time for a module.  On a node where the
    driver loads at boot, which is the case the boot grace is for, the two agree; a later
    reload of the driver is not seen (the grace then has already passed).  None: unreadable.
    """
    try:
        with open(os.path.join(proc_root, "uptime"), "rb") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
