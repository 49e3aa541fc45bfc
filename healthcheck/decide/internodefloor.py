"""Per-GPU-model bus-bandwidth floors of the fabric sweep and the gang check (pure; the
entries are validated by configsections.internode_floors_problem at load time).

    floors = parse_floors(("h100:busbw_gbps=360", "a100:busbw_gbps=150"))  # {"h100": 360.0, ...}
    gpu_types("gpu:h100:8(S:0-1),shard:h100:64")   # ("h100",)
    per_node = node_floors({"gpu-a": "gpu:h100:8", "gpu-b": "gpu:a100:8"}, floors, 100.0)
    Thresholds(100.0, node_floors=per_node).floor_for(("gpu-a", "gpu-b"))   # 150.0

A node's model is the type of its GPU gres as slurmctld shows it (`Gres=gpu:h100:8` in
`scontrol show nodes`, the `Type=` of gres.conf), matched without regard to case.  A node's
floor is the lowest floor of its GPU types; a type without an entry, and a node whose gres names
no type, take `[internode] busbw_floor_gbps` (0: no floor).  A job over several nodes is held to
the lowest floor among them, so a pair of an H100 and an A100 node is judged as A100 (the
slower fabric sets what the pair can reach): a floor only ever drops for a mixed job, and
never drains a node for missing a figure its partner's model could not reach.  The median rule
holds the same promise: each model has its own median (decide/sweep.py's Medians), and a mixed
job is held to the lower of its models' medians.

No floor is built in: a pair's bus bandwidth is set by the nodes' NICs and switches more than by
their GPUs (cluster-health-scanner holds the same H100 to 60 GB/s over GPUDirect-TCPX and 90 over
TCPXO), so the site sets the figure it measured (docs/network.md).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

_PARENS_RE = re.compile(r"\([^)]*\)")
_COUNT_RE = re.compile(r"[0-9]+[KMGTP]?")  # a gres count, with slurm.conf's suffixes


def parse_floors(entries: Iterable[str]) -> Dict[str, float]:
    """{gres type, lower case: floor GB/s} from validated `[internode] floors` entries."""
    floors: Dict[str, float] = {}
    for entry in entries:
        model, _, rest = entry.partition(":")
        floors[model.strip().lower()] = float(rest.partition("=")[2])
    return floors


def gpu_types(gres: Optional[str]) -> Tuple[str, ...]:
    """The GPU types of a node's gres string (`scontrol show nodes`' Gres=), lower case, in
    order: "gpu:h100:8(S:0-1)" -> ("h100",); "gpu:8" -> (); "gpu:a100:4(S:0),gpu:v100:2(S:1)"
    -> ("a100", "v100"); "gpu:tesla:no_consume:2" -> ("tesla",).  Other gres (shard, mps,
    bandwidth) are not GPUs."""
    if not gres or gres == "(null)":
        return ()
    types: List[str] = []
    for part in _PARENS_RE.sub("", gres).split(","):
        name, *fields = part.strip().split(":")
        if name != "gpu":
            continue
        fields = [f for f in fields if f and f != "no_consume"]
        if fields and _COUNT_RE.fullmatch(fields[-1]):
            fields = fields[:-1]  # the count
        if fields and fields[0].lower() not in types:
            types.append(fields[0].lower())
    return tuple(types)


def node_floor(gres: Optional[str], floors: Mapping[str, float], default: float) -> float:
    """A node's floor: the lowest of its GPU types' floors, a type without one taking the default."""
    types = gpu_types(gres)
    if not types:
        return default
    return min(floors.get(t, default) for t in types)


def node_floors(gres_of: Mapping[str, Optional[str]], floors: Mapping[str, float],
                default: float) -> Tuple[Tuple[str, float], ...]:
    """(node, floor) for every node whose floor is not the default, in name order (a tuple, so
    that decide/sweep.py's Thresholds stays an immutable record)."""
    if not floors:
        return ()
    pairs = ((name, node_floor(gres, floors, default)) for name, gres in sorted(gres_of.items()))
    return tuple((name, value) for name, value in pairs if value != default)


def node_models(gres_of: Mapping[str, Optional[str]]) -> Tuple[Tuple[str, str], ...]:
    """(node, its GPU model) for every node whose gres names a GPU type, in name order; a node of
    several types is the model "a100,h100" (its types, sorted).  The fabric sweep's median is
    each model's own (decide/sweep.py's Medians): a node without a type is of the model ""."""
    pairs = ((name, ",".join(sorted(gpu_types(gres)))) for name, gres in sorted(gres_of.items()))
    return tuple((name, model) for name, model in pairs if model)


def floor_for(nodes: Iterable[str], per_node: Iterable[Tuple[str, float]], default: float) -> float:
    """The floor of a job over `nodes`: the lowest of its nodes' floors (0 = no floor)."""
    known = dict(per_node)
    values = [known.get(n, default) for n in nodes]
    return min(values) if values else default
