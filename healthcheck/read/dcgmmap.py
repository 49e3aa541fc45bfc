"""DCGM's entity ids to NVML's indices (pure: the GPUs NVML read, and what dcgmi said).

    read = attribute(read, snapshot.gpus)    # read/node.py, after read_dcgm

DCGM numbers GPUs its own way: its ids equal NVML's indices only where the host engine sees
every GPU of the node in NVML's order (a DCGM in a container given some GPUs, or one that
enumerated before a GPU fell off the bus, does not).  DCGM 4.x lists each entity's serial
number under `entity_groups`; a result is given to the GPU of that serial.  Where DCGM gives no
serial (3.x, `dcgmi health`, boards that report none: "<<<NOT_SUPPORTED>>>") and a result is a
warn or fail, read/dcgm.py asks `dcgmi discovery -l` for each DCGM GPU's UUID and PCI address
(parse_discovery), and the result goes to the GPU of that UUID, else of that address; only
without either is DCGM's id taken as NVML's index.  A result on a GPU this node does not have
(by serial, UUID, address or index) is unknown and names the entity: it is no verdict on any
GPU here, and must never reset the node's GPUs.

`dcgmi discovery -l` (dcgmi/Discovery.cpp; tests/fixtures/dcgm/, DCGM-229):

    | GPU ID | Device Information                                                   |
    | 0      | Name: NVIDIA H100 80GB HBM3                                          |
    |        | PCI Bus ID: 00000000:4C:00.0                                         |
    |        | Device UUID: GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de                |
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..deepmodel import DcgmEntity, DcgmRead, DcgmResult
from ..model import GpuSnapshot
from ..pci import function_form

NO_SERIAL = ("", "n/a", "<<<not_supported>>>", "[n/a]", "not supported")


OTHER_TABLE = re.compile(r"^[0-9]+ (NvSwitch|CPU|Switch)")
ROW = re.compile(r"^\|\s*([0-9]+)?\s*\|\s*(Name|PCI Bus ID|Device UUID):\s*(.*?)\s*\|\s*$")


def usable(serial: Optional[str]) -> bool:
    return bool(serial) and str(serial).strip().lower() not in NO_SERIAL


def needs_discovery(read: DcgmRead) -> bool:
    """Whether a finding (warn, fail, config, ...) is on a DCGM GPU that no serial identifies."""
    serials = {e.entity_id for e in read.entities if e.group == "GPU" and usable(e.serial)}
    return any(r.gpu is not None and r.status not in ("pass", "skip") and r.gpu not in serials
               for r in read.diag + read.health)


def parse_discovery(text: str) -> Tuple[DcgmEntity, ...]:
    """Each GPU `dcgmi discovery -l` lists, with its UUID and PCI address (the GPU table only:
    the NvSwitch table that follows has ids of its own)."""
    found: Dict[int, Dict[str, str]] = {}
    current: Optional[int] = None
    for raw in text.splitlines():
        line = raw.strip()
        if OTHER_TABLE.match(line):
            break  # "0 NvSwitches found.", "2 CPUs found.": their ids are not GPUs
        row = ROW.match(line)
        if row is None:
            continue
        if row.group(1) is not None:
            current = int(row.group(1))
        if current is not None:
            found.setdefault(current, {})[row.group(2)] = row.group(3)
    out: List[DcgmEntity] = []
    for ident, fields in sorted(found.items()):
        try:
            pci: Optional[str] = function_form(fields.get("PCI Bus ID", ""))
        except ValueError:
            pci = None
        uuid = fields.get("Device UUID") or None
        out.append(DcgmEntity("GPU", ident, pci=pci, uuid=uuid if uuid and uuid.startswith("GPU-") else None))
    return tuple(out)


def with_discovery(entities: Tuple[DcgmEntity, ...], found: Tuple[DcgmEntity, ...]) -> Tuple[DcgmEntity, ...]:
    """entity_groups' entities with discovery's UUID and address added (and discovery's GPUs
    that entity_groups lacks)."""
    by_id = {e.entity_id: e for e in found}
    merged = [e._replace(pci=by_id[e.entity_id].pci, uuid=by_id[e.entity_id].uuid)
              if e.group == "GPU" and e.entity_id in by_id else e for e in entities]
    listed = {e.entity_id for e in entities if e.group == "GPU"}
    return tuple(merged) + tuple(e for e in found if e.entity_id not in listed)


def attribute(read: Optional[DcgmRead], gpus: Sequence[GpuSnapshot]) -> Optional[DcgmRead]:
    if read is None or read.attributed:
        return read
    keys: Dict[str, Dict[str, int]] = {"serial": {}, "uuid": {}, "pci": {}}
    for g in gpus:
        if usable(g.serial):
            keys["serial"][str(g.serial).strip()] = g.index
        if g.uuid:
            keys["uuid"][g.uuid] = g.index
        try:
            keys["pci"][function_form(g.pci_bus_id or "")] = g.index
        except ValueError:
            pass
    indices = {g.index for g in gpus}
    entities = {e.entity_id: e for e in read.entities if e.group == "GPU"}
    diag = tuple(_one(r, entities, keys, indices) for r in read.diag)
    health = tuple(_one(r, entities, keys, indices) for r in read.health)
    return read._replace(diag=diag, health=health, attributed=True)


def _one(result: DcgmResult, entities: Dict[int, DcgmEntity], keys: Dict[str, Dict[str, int]],
         indices: Set[int]) -> DcgmResult:
    if result.gpu is None:
        return result
    entity = entities.get(result.gpu)
    if entity is not None:
        given = [(kind, str(value).strip()) for kind, value in (
            ("serial", entity.serial if usable(entity.serial) else None), ("uuid", entity.uuid),
            ("pci", entity.pci)) if value]
        for kind, value in given:
            index = keys[kind].get(value)
            if index is not None:
                return result._replace(gpu=index)
        if given:
            kind, value = given[0]
            words = {"serial": "serial", "uuid": "UUID", "pci": "PCI address"}[kind]
            return _missing(result, f"DCGM's GPU {result.gpu} ({words} {value}), which this node does not have")
    if result.gpu in indices:
        return result
    return _missing(result, f"DCGM's GPU {result.gpu}, which this node does not have")


def _missing(result: DcgmResult, why: str) -> DcgmResult:
    said = f"DCGM said {result.status}" + (f": {result.text}" if result.text else "")
    return result._replace(gpu=None, status="unknown", text=f"{why}; {said}",
                           entity=result.entity or f"GPU{result.gpu}")

