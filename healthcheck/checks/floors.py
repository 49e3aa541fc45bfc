"""Per-model floors of the deep level, each with its published source (pure data and lookups;
checks/deep.py judges the figures against them, checks/deeptopo.py the NVLink pairs and names
a model with none).  Imported only where a deep run is judged, never on the prolog's path.

Two sources:
- NVIDIA's datasheet peaks: HBM bandwidth, FP32 (non-tensor) throughput, and NVLink as links x
  per-link rate per direction (NVLink 2, 3 and 4 carry 25 GB/s per link per direction, NVLink
  5 carries 50; a board's links to one peer are read from NVML).  The floor is
  `deep.floor_fraction` (0.6) of the peak: a simple kernel reaches 80-90 % of it on a healthy GPU.
- DCGM 4.6.0's `nvvs/diag-skus.yaml.in` (NVIDIA/DCGM, Apache-2.0): the `memory_bandwidth`
  plugin's `minimum_bandwidth` (MB/s) per PCI device id, DCGM's own pass line for a copy
  kernel.  Where DCGM lists one for the model it is the HBM floor; DCGM values that cannot be a
  bandwidth floor (2333 MB/s for the H200 SXM 2335, 137500 for the A100-SXM4-40GB 20b0) are
  left out, and the datasheet floor applies.

Models are NVML's names; a name matches its entry exactly, else the longest entry that is a
prefix of it followed by a blank ("NVIDIA GH200 480GB" takes "NVIDIA GH200").  A site adds or
overrides a peak with `deep.floors = ["MODEL:METRIC=VALUE"]` (hbm_gbps, gflops, nvlink_gbps,
nvlink_link_gbps).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..records import NamedTuple

NVLINK4 = 25.0  # GB/s per link per direction: NVLink 2 (Volta), 3 (Ampere), 4 (Hopper)
NVLINK5 = 50.0  # NVLink 5 (Blackwell): 1.8 TB/s over 18 links, both directions
DCGM_SKUS = "DCGM 4.6.0 nvvs/diag-skus.yaml.in"


class Floor(NamedTuple):
    hbm_gbps: Optional[float]  # datasheet peak
    gflops: Optional[float]  # FP32, non-tensor
    link_gbps: Optional[float]  # NVLink per link per direction; None: no NVLink
    links: Optional[int]  # NVLink links of the board
    dcgm_sku: Optional[str]  # the PCI device id DCGM keys its SKU by
    dcgm_min_hbm_gbps: Optional[float]  # DCGM's memory_bandwidth.minimum_bandwidth / 1000
    source: str

    @property
    def nvlink_gbps(self) -> Optional[float]:
        return self.link_gbps * self.links if self.link_gbps and self.links else None


def _ds(name: str, hbm: str, fp32: str, link: str = "") -> str:
    return f"NVIDIA {name} datasheet ({hbm}, FP32 {fp32}" + (f", NVLink {link}" if link else "") + ")"


FLOORS: Dict[str, Floor] = {
    "Tesla V100-SXM2-16GB": Floor(900.0, 15700.0, NVLINK4, 6, "1db1", 607.5,
                                  _ds("Tesla V100", "SXM2: 900 GB/s", "15.7 TFLOPS", "300 GB/s")),
    "Tesla V100-SXM2-32GB": Floor(900.0, 15700.0, NVLINK4, 6, "1db5", 607.5,
                                  _ds("Tesla V100", "SXM2: 900 GB/s", "15.7 TFLOPS", "300 GB/s")),
    "Tesla V100-PCIE-16GB": Floor(900.0, 14000.0, None, None, "1db4", 607.5,
                                  _ds("Tesla V100", "PCIe: 900 GB/s", "14 TFLOPS")),
    "Tesla V100-PCIE-32GB": Floor(900.0, 14000.0, None, None, "1db6", 607.5,
                                  _ds("Tesla V100", "PCIe: 900 GB/s", "14 TFLOPS")),
    "Tesla V100S-PCIE-32GB": Floor(1134.0, 16400.0, None, None, "1df6", 675.0,
                                   _ds("Tesla V100S", "1,134 GB/s", "16.4 TFLOPS")),
    "NVIDIA A100-PCIE-40GB": Floor(1555.0, 19500.0, NVLINK4, 12, "20f1", 969.75,
                                   _ds("A100", "40GB PCIe: 1,555 GB/s", "19.5 TFLOPS", "bridge 600 GB/s")),
    "NVIDIA A100 80GB PCIe": Floor(1935.0, 19500.0, NVLINK4, 12, "20b5", 1121.25,
                                   _ds("A100", "80GB PCIe: 1,935 GB/s", "19.5 TFLOPS", "bridge 600 GB/s")),
    "NVIDIA A100-SXM4-40GB": Floor(1555.0, 19500.0, NVLINK4, 12, "20b0", None,
                                   _ds("A100", "40GB SXM: 1,555 GB/s", "19.5 TFLOPS", "600 GB/s")),
    "NVIDIA A100-SXM4-80GB": Floor(2039.0, 19500.0, NVLINK4, 12, "20b2", 1173.0,
                                   _ds("A100", "80GB SXM: 2,039 GB/s", "19.5 TFLOPS", "600 GB/s")),
    "NVIDIA A10": Floor(600.0, 31200.0, None, None, None, None, _ds("A10", "600 GB/s GDDR6", "31.2 TFLOPS")),
    "NVIDIA A30": Floor(933.0, 10300.0, NVLINK4, 4, "20b7", 585.0,
                        _ds("A30", "933 GB/s", "10.3 TFLOPS", "bridge 200 GB/s")),
    "NVIDIA A40": Floor(696.0, 37400.0, 14.0625, 4, "2235", 423.675,
                        _ds("A40", "696 GB/s GDDR6", "37.4 TFLOPS", "bridge 112.5 GB/s")),
    "NVIDIA L4": Floor(300.0, 30300.0, None, None, "27b8", 198.5, _ds("L4", "300 GB/s GDDR6", "30.3 TFLOPS")),
    "NVIDIA L40S": Floor(864.0, 91600.0, None, None, "26b9", 525.0,
                         _ds("L40S", "864 GB/s GDDR6", "91.6 TFLOPS")),
    "NVIDIA H100 PCIe": Floor(2000.0, 51000.0, NVLINK4, 12, "2331", 1230.0,
                              _ds("H100", "PCIe: 2 TB/s", "51 TFLOPS", "bridge 600 GB/s")),
    "NVIDIA H100 80GB HBM3": Floor(3350.0, 67000.0, NVLINK4, 18, "2330", 1905.0,
                                   _ds("H100", "SXM: 3.35 TB/s", "67 TFLOPS", "900 GB/s")),
    "NVIDIA H100 NVL": Floor(3900.0, 60000.0, NVLINK4, 12, "2321", 2043.0,
                             _ds("H100", "NVL: 3.9 TB/s", "60 TFLOPS", "bridge 600 GB/s")),
    "NVIDIA H200": Floor(4800.0, 67000.0, NVLINK4, 18, "2335", None,
                         _ds("H200", "SXM: 4.8 TB/s", "67 TFLOPS", "900 GB/s")),
    "NVIDIA H200 NVL": Floor(4800.0, 60000.0, NVLINK4, 18, "233b", 2212.5,
                             _ds("H200", "NVL: 4.8 TB/s", "60 TFLOPS", "bridge 900 GB/s")),
    "NVIDIA H800": Floor(3350.0, 67000.0, NVLINK4, 8, "2324", 1920.0,
                         _ds("H800", "SXM: 3.35 TB/s", "67 TFLOPS", "400 GB/s")),
    "NVIDIA H800 PCIe": Floor(2000.0, 51000.0, NVLINK4, 8, "2322", 1245.0,
                              _ds("H800", "PCIe: 2 TB/s", "51 TFLOPS", "bridge 400 GB/s")),
    "NVIDIA GH200": Floor(4000.0, 67000.0, NVLINK4, 18, "2342", 2130.0,
                          _ds("GH200 Grace Hopper Superchip", "96 GB HBM3: 4 TB/s", "67 TFLOPS", "900 GB/s")),
    "NVIDIA GH200 144G HBM3e": Floor(4900.0, 67000.0, NVLINK4, 18, "2348", 2340.0,
                                     _ds("GH200 Grace Hopper Superchip", "144 GB HBM3e: 4.9 TB/s",
                                         "67 TFLOPS", "900 GB/s")),
    "NVIDIA B200": Floor(8000.0, 75000.0, NVLINK5, 18, "2901", 4072.5,
                         _ds("HGX B200", "8 TB/s per GPU", "600 TFLOPS per 8 GPUs", "1.8 TB/s per GPU")),
    "NVIDIA GB200": Floor(8000.0, 80000.0, NVLINK5, 18, None, None,
                          _ds("GB200 NVL72", "8 TB/s per GPU", "5,760 TFLOPS per 72 GPUs", "1.8 TB/s per GPU")),
    "NVIDIA B300": Floor(8000.0, 75000.0, NVLINK5, 18, "3182", 4623.36,
                         _ds("HGX B300", "8 TB/s per GPU", "600 TFLOPS per 8 GPUs", "1.8 TB/s per GPU")),
    "NVIDIA GB300": Floor(8000.0, 80000.0, NVLINK5, 18, "31c2", 4522.5,
                          _ds("GB300 NVL72", "8 TB/s per GPU", "5,760 TFLOPS per 72 GPUs", "1.8 TB/s per GPU")),
}
METRICS = ("hbm_gbps", "gflops", "nvlink_gbps", "nvlink_link_gbps")


def floor_of(model: Optional[str]) -> Optional[Floor]:
    """The model's entry: exact, else the longest entry that prefixes the name before a blank."""
    if not model:
        return None
    if model in FLOORS:
        return FLOORS[model]
    best = max((k for k in FLOORS if model.startswith(k + " ")), key=len, default=None)
    return FLOORS[best] if best else None


def site_value(model: Optional[str], metric: str, floors: Tuple[str, ...]) -> Optional[float]:
    for entry in floors:
        name, _, rest = entry.rpartition(":")
        key, _, value = rest.partition("=")
        if name.strip() == model and key.strip() == metric:
            return float(value)
    return None


def peak(model: Optional[str], metric: str, floors: Tuple[str, ...]) -> Tuple[Optional[float], str]:
    """The datasheet peak of a model's metric and its source; a site's deep.floors wins."""
    site = site_value(model, metric, floors)
    if site is not None:
        return site, "site config deep.floors"
    row = floor_of(model)
    if row is None:
        return None, ""
    value = {"hbm_gbps": row.hbm_gbps, "gflops": row.gflops, "nvlink_gbps": row.nvlink_gbps,
             "nvlink_link_gbps": row.link_gbps}[metric]
    return value, row.source


def has_floor(model: Optional[str], floors: Tuple[str, ...]) -> bool:
    return floor_of(model) is not None or any(site_value(model, m, floors) is not None for m in METRICS)


def hbm_floor(model: Optional[str], share: float, floors: Tuple[str, ...]) -> Tuple[Optional[float], str]:
    """The HBM floor in GB/s and its words: a site's peak x share, else DCGM's minimum for the
    SKU, else the datasheet peak x share."""
    site = site_value(model, "hbm_gbps", floors)
    row = floor_of(model)
    if site is None and row is not None and row.dcgm_min_hbm_gbps:
        return row.dcgm_min_hbm_gbps, (f"DCGM's memory_bandwidth minimum for SKU {row.dcgm_sku}, "
                                       f"{DCGM_SKUS}")
    value, source = peak(model, "hbm_gbps", floors)
    if value is None:
        return None, ""
    return share * value, f"{share:.0%} of the peak {value:,.0f}, {source}".replace("%", " %")


def models() -> Tuple[str, ...]:
    return tuple(sorted(FLOORS))

