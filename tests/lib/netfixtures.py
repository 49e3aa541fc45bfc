"""MADE sysfs trees of RDMA ports (/sys/class/infiniband) for the network checks' tests.

These trees are made here, not captured: the real captures in
tests/fixtures/sysfs-infiniband/ (node_exporter's and procfs's, see the README there) have no
PCI topology (no `device` links), no RoCE netdev, no GPUs, no down or polling port and no
counter that grows.  The file formats are the kernel's (drivers/infiniband/core/sysfs.c) and
match those captures byte for byte: `4: ACTIVE`, `5: LinkUp`, `400 Gb/sec (4X NDR)`,
`InfiniBand`, counters as decimal lines.

The layout is an 8-GPU HGX board's: four PCIe switches, each with two GPUs (at the fake GPU
library's default addresses, tests/gpucluster.pci) and two HCAs, so port i serves GPUs 2*(i//2)
and 2*(i//2)+1 when there are 8 HCAs.

    root = make_ib_tree(tmp_path / "sys", hcas=8, ports=1)
    set_port(root, "mlx5_0:1", state="1: DOWN", phys_state="2: Polling")
    set_port(root, "mlx5_0:1", link_downed=3)            # a counter file
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors",
            "port_xmit_discards", "port_rcv_data", "port_xmit_data", "VL15_dropped")
HW_COUNTERS = ("out_of_buffer", "out_of_sequence", "local_ack_timeout_err", "rnr_nak_retry_err")


def _gpu_bus(index: int) -> int:
    return 0x18 + index * 0x10  # tests/gpucluster.pci: the fake's default bus of GPU `index`


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def _device(root: Path, switch: int, slot: int, bus: int) -> Path:
    """A PCI function below switch `switch`'s downstream port `slot`."""
    upstream = 0x10 + 0x20 * switch
    path = (root / "devices" / "pci0000:00" / f"0000:00:{1 + switch:02x}.0" / f"0000:{upstream:02x}:00.0"
            / f"0000:{upstream + 1:02x}:{slot:02x}.0" / f"0000:{bus:02x}:00.0")
    path.mkdir(parents=True, exist_ok=True)
    return path


def make_ib_tree(root: Path, hcas: int = 8, ports: int = 1, gpus: int = 8,
                 link_layer: str = "InfiniBand", rate: str = "400 Gb/sec (4X NDR)",
                 hca_type: str = "MT4129", peermem: bool = True) -> Path:
    """A sysfs root with `gpus` NVIDIA GPUs and `hcas` HCAs of `ports` ports each, all up."""
    pci_dir = root / "bus" / "pci" / "devices"
    pci_dir.mkdir(parents=True, exist_ok=True)
    for index in range(gpus):
        dev = _device(root, index // 2, index % 2, _gpu_bus(index))
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
        _link(pci_dir / dev.name, dev)
    for index in range(hcas):
        dev = _device(root, (index // 2) % 4, 2 + index % 2, 0x1a + 0x10 * index)
        (dev / "vendor").write_text("0x15b3\n")
        (dev / "class").write_text("0x020700\n")
        _link(pci_dir / dev.name, dev)
        hca = root / "class" / "infiniband" / f"mlx5_{index}"
        hca.mkdir(parents=True)
        _link(hca / "device", dev)
        (hca / "hca_type").write_text(hca_type + "\n")
        (hca / "fw_ver").write_text("28.39.1002\n")
        (hca / "board_id").write_text("MT_0000000838\n")
        for number in range(1, ports + 1):
            port = hca / "ports" / str(number)
            (port / "counters").mkdir(parents=True)
            (port / "hw_counters").mkdir()
            (port / "state").write_text("4: ACTIVE\n")
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "rate").write_text(rate + "\n")
            (port / "link_layer").write_text(link_layer + "\n")
            for name in COUNTERS:
                (port / "counters" / name).write_text("0\n")
            for name in HW_COUNTERS:
                (port / "hw_counters" / name).write_text("0\n")
            if link_layer == "Ethernet":
                net = dev / "net" / f"ens{index}np{number - 1}"
                net.mkdir(parents=True)
                (net / "operstate").write_text("up\n")
                (net / "dev_port").write_text(f"{number - 1}\n")
    if peermem:
        (root / "module" / "nvidia_peermem").mkdir(parents=True)
    return root


def set_port(root: Path, name: str, **files: Union[str, int]) -> None:
    """Rewrite files of port `hca:port`: state=, phys_state=, rate=, link_layer=, or a counter
    by its name (link_downed=3); operstate= writes the RoCE netdev's."""
    hca, _, number = name.partition(":")
    port = root / "class" / "infiniband" / hca / "ports" / number
    for key, value in files.items():
        if key == "operstate":
            nets = sorted((root / "class" / "infiniband" / hca / "device" / "net").iterdir())
            (nets[int(number) - 1] / "operstate").write_text(f"{value}\n")
        elif key in COUNTERS:
            (port / "counters" / key).write_text(f"{value}\n")
        else:
            (port / key).write_text(f"{value}\n")
