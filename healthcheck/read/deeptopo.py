"""Which GPU pairs the deep level's peer test copies between, from the topology NVML reports
(read/nvmltopo.py; pure: no NVML, no CUDA).

    pairs = plan_pairs(topology, tested=(0, 1, 2, 3))   # -> (PeerPair, ...)

- GPUs with NVLink links to each other (bridged boards: H100 NVL pairs, a DGX-1's hybrid cube
  mesh): each such pair once, lower index first, over the links of the first to the second;
- GPUs on the NVSwitch fabric (HGX boards): a ring, each to the next, over the source's
  switch links (every pair of such GPUs is one hop through the switches: a ring reaches each
  GPU in both directions with n copies instead of n(n-1)/2);
- GPUs with neither between them that NVML says can copy peer to peer over PCIe: a ring of
  those pairs (only where NVML says so: a copy between GPUs that cannot is staged through the
  host and measures the host).

A pair with no path is not tested: nothing there to judge.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Set, Tuple

from ..deepmodel import Topology
from ..records import NamedTuple


class PeerPair(NamedTuple):
    src: int  # NVML indices
    dst: int
    via: str  # "nvlink", "nvswitch", "pcie"
    links: Tuple[int, ...] = ()  # the source's links that carry the copy


def plan_pairs(topology: Topology, tested: Sequence[int]) -> Tuple[PeerPair, ...]:
    wanted = set(tested)
    gpus = [g for g in topology.gpus if g.index in wanted and g.error is None]
    by_pci = {g.pci: g.index for g in gpus if g.pci}
    direct: Dict[Tuple[int, int], List[int]] = {}
    switch: Dict[int, List[int]] = {}
    for gpu in gpus:
        for end in gpu.ends:
            if end.kind == "gpu" and end.remote in by_pci and by_pci[end.remote] != gpu.index:
                direct.setdefault((gpu.index, by_pci[end.remote]), []).append(end.link)
            elif end.kind == "switch":
                switch.setdefault(gpu.index, []).append(end.link)
    pairs: List[PeerPair] = [PeerPair(a, b, "nvlink", tuple(links)) for (a, b), links in sorted(direct.items())
                             if a < b and (b, a) in direct]
    linked: Set[Tuple[int, int]] = {(p.src, p.dst) for p in pairs}
    pairs.extend(PeerPair(a, b, "nvswitch", tuple(switch[a])) for a, b in _ring(sorted(switch)))
    fabric = set(switch)
    pcie = {(a, b) for a, b in topology.pcie_p2p if a in wanted and b in wanted
            and (a, b) not in linked and not (a in fabric and b in fabric)}
    on_pcie = sorted({i for pair in pcie for i in pair})
    pairs.extend(PeerPair(a, b, "pcie") for a, b in _ring(on_pcie) if (min(a, b), max(a, b)) in pcie)
    return tuple(pairs)


def _ring(indices: Sequence[int]) -> List[Tuple[int, int]]:
    """Each to the next and the last to the first; two GPUs: one copy."""
    n = len(indices)
    if n < 2:
        return []
    return [(indices[i], indices[(i + 1) % n]) for i in range(n if n > 2 else 1)]
