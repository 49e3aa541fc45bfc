"""`--check-config --gres`: this node's job-GPU -> device -> NVML map, as the prolog computes it.

    doc = gres_map(config, os.environ)      # {"gres_conf", "node", "error", "rows": [...]}
    write_gres_map(doc, sys.stdout)

Each row is one gres index (what SLURM_JOB_GPUS holds): its device file and number from
gres.conf (read/gres.py, Includes followed, slurm.conf's counts applied), and the GPU NVML
lists with that number (decide/gpumap.py), or why it is unknown (the prolog then probes
nothing for it and never drains for it).  Reads gres.conf, slurm.conf and NVML; changes nothing.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, TextIO

from ..config import Config


def gres_map(config: Config, environ: Mapping[str, str]) -> Dict[str, Any]:
    from ..decide.gpumap import device_order
    from ..model import file_minors
    from ..read.gres import gres_conf_path, read_layout
    from ..read.nvml import read_nvml

    node = config.node_name or environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    path = gres_conf_path(config.gres_conf, dict(environ))
    layout = read_layout(path, node)
    doc: Dict[str, Any] = {"gres_conf": path, "node": node, "autodetect": layout.autodetect,
                           "error": layout.error or (f"{layout.source}: {layout.uncertain}" if layout.uncertain else None),
                           "note": layout.note, "rows": []}
    nvml = read_nvml(config.nvml_timeout_s)
    if nvml.error:
        doc["nvml_error"] = nvml.error
    if layout.error:
        return doc
    gpus = {g.index: g for g in nvml.gpus}
    order, why = device_order(layout, nvml.gpus) if not layout.uncertain else ([], None)
    doc["why_unknown"] = why
    minors = file_minors(layout)
    rows: List[Dict[str, Any]] = []
    for position in range(max(len(layout.files), len(order))):
        index = order[position] if position < len(order) and not layout.uncertain else None
        gpu = gpus.get(index) if index is not None else None
        rows.append({"gres_index": position,
                     "file": layout.files[position] if position < len(layout.files) else None,
                     "minor": minors[position] if position < len(minors) else None,
                     "nvml_index": index, "uuid": gpu.uuid if gpu else None,
                     "pci_bus_id": gpu.pci_bus_id if gpu else None})
    doc["rows"] = rows
    return doc


def write_gres_map(doc: Dict[str, Any], out: TextIO) -> None:
    out.write(f"\ngres map for node {doc['node']} from {doc['gres_conf']}"
              f"{' (AutoDetect=' + doc['autodetect'] + ')' if doc['autodetect'] else ''}:\n")
    for key in ("error", "nvml_error", "note", "why_unknown"):
        if doc.get(key):
            out.write(f"  {key.replace('_', ' ')}: {doc[key]}\n")
    if not doc["rows"]:
        out.write("  no gres index on this node\n" if not doc.get("error") else
                  "  every gres index is unknown: the prolog probes none and never drains for them\n")
        return
    table = [("GRES INDEX", "DEVICE FILE", "MINOR", "NVML INDEX", "UUID", "PCI BUS")]
    for row in doc["rows"]:
        table.append((str(row["gres_index"]), row["file"] or "-",
                      "-" if row["minor"] is None else str(row["minor"]),
                      "unknown" if row["nvml_index"] is None else str(row["nvml_index"]),
                      row["uuid"] or "-", row["pci_bus_id"] or "-"))
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    for r in table:
        out.write("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5] + "\n")
