"""node_exporter textfile text read back through prometheus_client's own parser, and the run
outcome the metrics tests render."""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from healthcheck.model import GpuSnapshot, NodeSnapshot, RunOutcome

parser = pytest.importorskip("prometheus_client.parser")

Sample = Tuple[str, Dict[str, str], float]


def parse_metrics(text: str) -> Tuple[Dict[str, str], List[Sample]]:
    """(family name -> type, samples) through prometheus_client's own parser."""
    types, samples = {}, []
    for family in parser.text_string_to_metric_families(text):
        types[family.name] = family.type
        samples += [(s.name, dict(s.labels), s.value) for s in family.samples]
    return types, samples


def value_of(samples: List[Sample], name: str, **labels: str) -> float:
    found = [v for n, l, v in samples if n == name and all(l.get(k) == v2 for k, v2 in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def run_outcome(verdict: str = "fail", events=(), gpus=None, findings=None) -> RunOutcome:
    gpus = gpus if gpus is not None else (
        GpuSnapshot(index=0, uuid="GPU-0", serial="SN0", pci_bus_id="00000000:18:00.0",
                    ecc_volatile_corrected=0, ecc_volatile_uncorrected=0,
                    ecc_aggregate_corrected=5, ecc_aggregate_uncorrected=0,
                    remap_correctable=1, remap_uncorrectable=0, remap_pending=False,
                    remap_failure=False, retired_sbe=0, retired_dbe=0, retired_pending=False),
        GpuSnapshot(index=2, uuid="GPU-2", serial="1650522003802", pci_bus_id="00000000:38:00.0",
                    ecc_volatile_corrected=7, ecc_volatile_uncorrected=3,
                    ecc_aggregate_corrected=9, ecc_aggregate_uncorrected=3,
                    remap_correctable=0, remap_uncorrectable=2, remap_pending=True,
                    remap_failure=False),  # retired pages unsupported: no series
        GpuSnapshot(index=5, uuid="GPU-5", lost="GPU_IS_LOST"))
    report = {"verdict": verdict, "duration_s": 0.25,
              "findings": findings if findings is not None else [
                  {"check": "ecc.volatile_uncorrected", "severity": "fail", "gpu": 2},
                  {"check": "gpu.lost", "severity": "fail", "gpu": 5},
                  {"check": "remap.pending", "severity": "warn", "gpu": 2}]}
    return RunOutcome(1, report, list(events), NodeSnapshot(host="gpu-a", gpus=gpus))
