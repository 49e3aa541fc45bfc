"""The repair loop's test helpers on the real test Slurm (tests/lib/gpucluster.py): a node's
config with [repair] on and the fake nvidia-smi, a DBE drained by our epilog, and the repair
steps the history recorded.  The cluster fixture is `repair_cluster` (tests/slurm/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.lib.gpucluster import GpuCluster, pci, serial

WAIT_FOR_GO = "echo started\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"


def enable_repair(c: GpuCluster, node: str, extra: str = "", report_only: bool = False) -> None:
    """The node's config with the fake nvidia-smi and [repair] on; its scenario a PCIe node
    (no NVSwitch fabric: single GPUs may be reset) whose driver writes to the node's kernel log."""
    c.write_config(node)
    path = c.wd / "config" / f"{node}.toml"
    text = path.read_text()
    if report_only:
        text = text.replace("[drain]\n", "[drain]\nreport_only = true\n")
    path.write_text(f'nvidia_smi = "{c.fake / "nvidia-smi"}"\n' + text
                    + f"[repair]\nenabled = true\ncooldown_s = 0\n{extra}")
    # 1 GiB GPUs: the full probe (90 % of free memory, per GPU) stays quick on a loaded machine
    c.scenario(node).write_text(f"gpus = 8\ngpu.*.fabric.state = not_supported\ngpu.*.memory.total_mib = 1024\n"
                                f"kernel_log = {c.wd / 'kern' / f'{node}.log'}\n")


def drain_by_epilog(c: GpuCluster, tmp_path: Path, node: str = "gpu-a", faults: str = "") -> str:
    go = tmp_path / f"go-{node}"
    job = c.cluster.sbatch(["--gres=gpu:8", "-w", node, "-J", "train"], WAIT_FOR_GO.format(go=go))
    c.wait_running(job)
    with c.scenario(node).open("a") as scenario:  # the DBE happens during the job
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n" + faults)
    go.touch()
    c.cluster.wait_job(job, timeout=60)
    reason = c.wait_reason(node)
    assert reason.startswith(f"gpu-healthcheck: gpu2 pci={pci(2)} sn={serial(2)} "
                             f"ecc.volatile_uncorrected=1 epilog job={job}")
    return job


def repair_events(c: GpuCluster, node: str):
    lines = (c.state(node) / "history.jsonl").read_text().splitlines()
    return [e for line in lines for e in json.loads(line).get("events", []) if e["kind"] == "repair"]


def ledger_file(c: GpuCluster, node: str, index: int) -> Path:
    """The repair ledger of the fake's GPU `index` (its default serial and PCI address)."""
    return c.state(node) / "repair" / f"{serial(index)}@0000-{0x18 + index * 0x10:02x}-00.0.json"


def ledger_outcomes(c: GpuCluster, node: str, index: int):
    path = ledger_file(c, node, index)
    return [a["outcome"] for a in json.loads(path.read_text())["attempts"]] if path.exists() else []
