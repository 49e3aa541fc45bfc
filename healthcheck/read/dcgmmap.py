"""DCGM's entity ids to NVML's indices (pure: the GPUs NVML read, and what dcgmi said).

    read = attribute(read, snapshot.gpus)    # read/node.py, after read_dcgm

DCGM numbers GPUs its own way: its ids equal NVML's indices only where the host engine sees
every GPU of the node in NVML's order (a DCGM in a container given some GPUs, or one that
enumerated before a GPU fell off the bus, does not).  DCGM 4.x lists each entity's serial
number under `entity_groups`; a result is given to the GPU of that serial.  Where DCGM gives no
serial (3.x, `dcgmi health`, boards that report none) the id is taken as NVML's index.  A
result on a GPU this node does not have, by serial or by index, is unknown and names the
entity: it is no verdict on any GPU here, and must never reset the node's GPUs.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Set

from ..deepmodel import DcgmEntity, DcgmRead, DcgmResult
from ..model import GpuSnapshot

NO_SERIAL = ("", "n/a", "<<<not_supported>>>", "[n/a]", "not supported")


def attribute(read: Optional[DcgmRead], gpus: Sequence[GpuSnapshot]) -> Optional[DcgmRead]:
    if read is None or read.attributed:
        return read
    serials = {g.serial.strip(): g.index for g in gpus if g.serial and g.serial.strip().lower() not in NO_SERIAL}
    indices = {g.index for g in gpus}
    entities = {e.entity_id: e for e in read.entities if e.group == "GPU"}
    diag = tuple(_one(r, entities, serials, indices) for r in read.diag)
    health = tuple(_one(r, {}, serials, indices) for r in read.health)
    return read._replace(diag=diag, health=health, attributed=True)


def _one(result: DcgmResult, entities: Dict[int, DcgmEntity], serials: Dict[str, int],
         indices: Set[int]) -> DcgmResult:
    if result.gpu is None:
        return result
    entity = entities.get(result.gpu)
    serial = entity.serial.strip() if entity is not None and entity.serial else None
    if serial is not None and serial.lower() not in NO_SERIAL:
        index = serials.get(serial)
        if index is not None:
            return result._replace(gpu=index)
        return _missing(result, f"DCGM's GPU {result.gpu} (serial {serial}), which this node does not have")
    if result.gpu in indices:
        return result
    return _missing(result, f"DCGM's GPU {result.gpu}, which this node does not have")


def _missing(result: DcgmResult, why: str) -> DcgmResult:
    said = f"DCGM said {result.status}" + (f": {result.text}" if result.text else "")
    return result._replace(gpu=None, status="unknown", text=f"{why}; {said}",
                           entity=result.entity or f"GPU{result.gpu}")

