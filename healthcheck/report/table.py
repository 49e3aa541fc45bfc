"""Report writers: a compact table for a person, or one JSON document (CONTRACTS §3).

    GPU  PCI               SERIAL         VERDICT  WORST FINDING
    0    00000000:18:00.0  1650522003800  pass
    2    00000000:38:00.0  1650522003802  FAIL     ecc.volatile_uncorrected=3: GPU 2 (...) ...
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, TextIO

from ..model import Severity

_RANK = {"fail": 3, "unknown": 2, "warn": 1, "info": 0}
_COLOUR = {"fail": "\033[31m", "unknown": "\033[35m", "warn": "\033[33m", "pass": "\033[32m"}
_RESET = "\033[0m"


def write_json(report: Dict[str, Any], out: TextIO) -> None:
    json.dump(report, out, indent=2, sort_keys=False, default=str)
    out.write("\n")


def _paint(text: str, level: str, colour: bool) -> str:
    return f"{_COLOUR[level]}{text}{_RESET}" if colour and level in _COLOUR else text


def _worst(findings: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    ranked = [f for f in findings if f["severity"] != Severity.INFO.value]
    if not ranked:
        return None
    return max(ranked, key=lambda f: _RANK[f["severity"]])


def write_table(report: Dict[str, Any], out: TextIO, colour: bool = False) -> None:
    findings = report["findings"]
    head = (f"gpu-healthcheck {report['tool_version']}  {report['mode']} on {report['node']}"
            + (f"  job {report['job_id']}" if report.get("job_id") else "")
            + (f"  driver {report['driver_version']}" if report.get("driver_version") else "")
            + f"  ({report['duration_s']:.2f} s)")
    out.write(head + "\n")
    rows = [("GPU", "PCI", "SERIAL", "VERDICT", "WORST FINDING")]
    for gpu in report["gpus"]:
        mine = [f for f in findings if f["gpu"] == gpu["index"]]
        worst = _worst(mine)
        verdict = worst["severity"] if worst else "pass"
        text = f"{worst['check']}: {worst['message']}" if worst else (
            "probed" if any(p["gpu"] == gpu["index"] and p["status"] == "ok"
                            for p in report["probes"]) else "")
        rows.append((str(gpu["index"]), gpu["pci_bus_id"] or "-", gpu["serial"] or "-",
                     verdict, text))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for n, row in enumerate(rows):
        cells = [row[i].ljust(widths[i]) for i in range(4)]
        if n:
            cells[3] = _paint(cells[3], row[3], colour)
        out.write("  ".join(cells + [row[4][:160]]).rstrip() + "\n")
    node_wide = [f for f in findings if f["gpu"] is None]
    gpu_extra = [f for f in findings if f["gpu"] is not None and f is not _worst(
        [g for g in findings if g["gpu"] == f["gpu"]])]
    if node_wide or gpu_extra:
        out.write("\nFindings:\n")
        for f in node_wide + gpu_extra:
            where = "node" if f["gpu"] is None else f"gpu{f['gpu']}"
            out.write(f"  {_paint(f['severity'].ljust(7), f['severity'], colour)} {where:5} "
                      f"{f['check']}: {f['message']}\n")
    action = report["action"]
    verdict = report["verdict"]
    line = f"\nVerdict: {_paint(verdict.upper(), verdict, colour)}"
    if action["taken"] != "none":
        line += f"; {action['taken']}: {action['reason']}"
    elif action.get("dry_run") and action.get("reason"):
        line += f"; would drain (add --act): {action['reason']}"
    elif action.get("detail"):
        line += f"; {action['detail']}"
    out.write(line + "\n")
