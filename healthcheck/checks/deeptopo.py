"""--level deep, the peer copies between GPU pairs (read/deeptopo.py plans them from NVML's
topology), judged pair by pair, and a GPU slow with every peer judged as that GPU; and a model
with no published floor (checks/floors.py), named (pure).

A pair is slow when its copy runs below its floor, or below `deep.sibling_ratio_fail` (0.7) of
the median of the node's other pairs of the same kind (same path, same number of links):
- over NVLink (links to each other, or through the NVSwitches): `deep.floor_fraction` (0.6) of
  the links that carry it x the per-link rate per direction (checks/floors.py: 25 GB/s for
  NVLink 2-4, 50 for NVLink 5), so a DGX-1's one-link and two-link pairs each meet their own;
- over PCIe peer to peer: `deep.pcie_fraction` (0.4) of the slower side's link rate.
A slow pair warns, naming both GPUs and the links (a bridge or a link between them, not one
GPU, is the suspect).  Only a GPU slow with every peer it was tested with (two or more) fails,
with action reset: then the GPU is the common factor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Set, Tuple

from ..model import Action, Finding, GpuSnapshot, NodeSnapshot, Severity
from .deep import PCIE_LANE_GBPS
from .deepshared import shared
from .registry import CheckContext, finding as _f, gpu_check, label, node_check

if TYPE_CHECKING:
    from ..deepmodel import DeepPeer


def links_text(links: Tuple[int, ...]) -> str:
    """"0-11", "0, 2, 4-5": the links, runs joined."""
    runs: List[List[int]] = []
    for link in sorted(links):
        if runs and link == runs[-1][-1] + 1:
            runs[-1].append(link)
        else:
            runs.append([link])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def path_text(peer: "DeepPeer") -> str:
    if peer.via == "nvlink":
        return f"over NVLink links {links_text(peer.links)}"
    if peer.via == "nvswitch":
        return f"through the NVSwitches (links {links_text(peer.links)})"
    return "over PCIe peer to peer"


# GB/s per link per direction by nvmlNvlinkVersion_t: 1.0 (Pascal) 20; 2.0 to 4.0 (Volta,
# Ampere, Hopper) 25; 5.0 (Blackwell) 50 (NVIDIA's NVLink generations; checks/floors.py)
NVLINK_VERSION_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0}
NVLINK_VERSION_NAME = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0"}


def nvml_link_rate(node: NodeSnapshot, index: int) -> Tuple[Optional[float], str]:
    """The per-link rate of GPU `index`'s NVLink version as NVML reported it, for a model the
    floors table does not list."""
    topology = node.deep.topology if node.deep is not None else None
    gpu = next((g for g in topology.gpus if g.index == index), None) if topology is not None else None
    version = gpu.link_version if gpu is not None else None
    if version not in NVLINK_VERSION_GBPS:
        return None, ""
    return NVLINK_VERSION_GBPS[version], f"NVML reports NVLink {NVLINK_VERSION_NAME[version]}"


def pair_floor(peer: "DeepPeer", node: NodeSnapshot, ctx: CheckContext) -> Tuple[Optional[float], str]:
    a, b = node.gpu(peer.src), node.gpu(peer.dst)
    known = a or b
    if known is None:
        return None, ""
    cfg = ctx.config.deep
    if peer.via in ("nvlink", "nvswitch"):
        from .floors import peak

        rate, source = peak(known.name, "nvlink_link_gbps", cfg.floors)
        if not rate:
            rate, source = nvml_link_rate(node, peer.src)
        if not rate or not peer.links:
            return None, ""
        n = len(peer.links)
        return (cfg.floor_fraction * n * rate,
                f"{cfg.floor_fraction:.0%} of {n} links x {rate:g} GB/s, {source}".replace("%", " %"))
    if a is None or b is None:
        return None, ""
    rates = [PCIE_LANE_GBPS.get(g.pcie_gen_current or 0, 0.0) * (g.pcie_width_current or 0) for g in (a, b)]
    if not all(rates):
        return None, ""
    rate = min(rates)
    return (cfg.pcie_fraction * rate,
            f"{cfg.pcie_fraction:.0%} of the slower side's PCIe link, {rate:,.0f} GB/s".replace("%", " %"))


def judged(node: NodeSnapshot, ctx: CheckContext) -> Dict[Tuple[int, int], Tuple["DeepPeer", str]]:
    """The slow pairs: (src, dst) -> (the copy, why it is slow)."""
    if node.deep is None:
        return {}
    measured = [p for p in node.deep.peers if p.gbps is not None and p.via]
    slow: Dict[Tuple[int, int], Tuple["DeepPeer", str]] = {}
    for peer in measured:
        assert peer.gbps is not None
        why = []
        floor, words = pair_floor(peer, node, ctx)
        if floor is not None and peer.gbps < floor:
            why.append(f"below its floor {floor:,.0f} GB/s ({words})")
        like = [p.gbps for p in measured if p is not peer and p.via == peer.via
                and len(p.links) == len(peer.links) and p.gbps is not None]
        if like:
            import statistics  # here, not at the top: checks/ is imported on the prolog's path

            median = statistics.median(like)
            limit = ctx.config.deep.sibling_ratio_fail
            if median > 0 and peer.gbps / median < limit:
                why.append(f"{peer.gbps / median:.0%} of the median {median:,.0f} GB/s of the node's "
                           f"{len(like)} like pairs (limit {limit:.0%})".replace("%", " %"))
        if why:
            slow[(peer.src, peer.dst)] = (peer, "; ".join(why))
    return slow


def blamed(node: NodeSnapshot, slow: Dict[Tuple[int, int], Tuple["DeepPeer", str]]) -> Set[int]:
    """GPUs slow with every peer they were tested with, two peers or more."""
    if node.deep is None:
        return set()
    tested: Dict[int, Set[Tuple[int, int]]] = {}
    for p in node.deep.peers:
        if p.gbps is not None and p.via:
            for g in (p.src, p.dst):
                tested.setdefault(g, set()).add((p.src, p.dst))
    return {g for g, pairs in tested.items() if len(pairs) >= 2 and pairs <= set(slow)}


def _who(node: NodeSnapshot, index: int) -> str:
    gpu = node.gpu(index)
    return label(gpu) if gpu is not None else f"GPU {index}"


@node_check("deep.nvlink_pair", severity=Severity.WARN, threshold_key="deep.floor_fraction")
def check_deep_nvlink_pair(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A GPU pair whose peer copy is slow, named with its links: the bridge or links between them.

    Copies over NVLink between bridged GPUs, a ring through the NVSwitches, and PCIe peer to
    peer where NVML says it works (read/deeptopo.py).  Floors and the like-pair median: the
    module docstring.  Warns: the path between two GPUs is the suspect, not either GPU, unless
    one GPU is slow with every peer (deep.nvlink_peer fails that GPU).  A pair that could not
    be measured is unknown.
    nvidia-smi equivalent: none (`nvidia-smi topo -m` shows the paths; `nvidia-smi nvlink -s`
    the link speeds, not a copy).
    """
    if node.deep is None:
        return
    slow = judged(node, ctx)
    out = blamed(node, slow)
    for peer in node.deep.peers:
        if not peer.via:
            continue
        pair = f"GPU {peer.src} -> GPU {peer.dst} {path_text(peer)}"
        if peer.gbps is None:
            yield _f("deep.nvlink_pair", Severity.UNKNOWN, None, f"peer copy {pair} not measured: {peer.detail}",
                     value=None, threshold="measured")
            continue
        if (peer.src, peer.dst) not in slow or peer.src in out or peer.dst in out:
            continue
        why = slow[(peer.src, peer.dst)][1]
        yield _f("deep.nvlink_pair", Severity.WARN, None,
                 f"peer copy {pair}: {peer.gbps:,.0f} GB/s, {why}; {_who(node, peer.src)} and "
                 f"{_who(node, peer.dst)} are not slow with their other peers: check the bridge or "
                 f"links between them", value=round(peer.gbps, 1), threshold=why)


@gpu_check("deep.nvlink_peer", severity=Severity.FAIL, action=Action.RESET, threshold_key="deep.floor_fraction")
def check_deep_nvlink_peer(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A GPU whose peer copies are slow with every peer it was tested with (two or more).

    The GPU is then the common factor (a slow pair alone is deep.nvlink_pair's warn): fails with
    action reset, naming each peer, path and figure.  Floors: the module docstring.
    nvidia-smi equivalent: none (`nvidia-smi nvlink -s` gives the link speed, not the copy).
    """
    slow = judged(node, ctx)
    if gpu.index not in blamed(node, slow):
        return
    mine = [v for k, v in sorted(slow.items()) if gpu.index in k]
    words = "; ".join(f"GPU {p.src} -> GPU {p.dst} {path_text(p)} {p.gbps:,.0f} GB/s, {why}" for p, why in mine)
    yield from shared([_f("deep.nvlink_peer", Severity.FAIL, gpu,
                          f"{label(gpu)}: peer copies slow with all {len(mine)} of its peers: {words}; "
                          f"reset the GPU and rerun --level deep, RMA if it stays slow",
                          value=min(p.gbps or 0.0 for p, _ in mine),
                          threshold=ctx.config.deep.floor_fraction, action=Action.RESET)], gpu, node)


@node_check("deep.floors", severity=Severity.INFO)
def check_deep_floors(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A GPU model the deep tests ran on that has no published floor here, named.

    Info, never a drain: its figures are judged against its same-model siblings only, so a
    single GPU, or a node whose GPUs are all equally slow, is not caught.  A site gives the
    model a floor with `deep.floors = ["MODEL:METRIC=VALUE"]`; `--check-config` lists the
    models that have one.
    nvidia-smi equivalent: none.
    """
    if node.deep is None:
        return
    from . import floors

    ran = {d.index for d in node.deep.gpus if d.status == "ok"}
    by_model: Dict[str, List[int]] = {}
    for gpu in node.gpus:
        if gpu.index in ran and not floors.has_floor(gpu.name, ctx.config.deep.floors):
            by_model.setdefault(gpu.name or "unknown model", []).append(gpu.index)
    for model, indices in sorted(by_model.items()):
        gpus = ", ".join(str(i) for i in indices)
        yield _f("deep.floors", Severity.INFO, None,
                 f"no floor for {model} (GPU {gpus}): its deep figures are judged against its "
                 f"siblings only; give it one with deep.floors = [\"{model}:hbm_gbps=PEAK\"]",
                 value=model, threshold="a floor for the model")
