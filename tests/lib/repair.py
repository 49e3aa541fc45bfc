"""The repair loop's test helpers on the real test Slurm (tests/lib/gpucluster.py): a node's
config with [repair] on and the fake nvidia-smi, a DBE drained by our epilog, and the repair
steps the history recorded.  The cluster fixture is `repair_cluster` (tests/slurm/conftest.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

from tests.lib.gpucluster import GpuCluster, pci, serial

WAIT_FOR_GO = "echo started\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"


def enable_repair(c: GpuCluster, node: str, extra: str = "", report_only: bool = False,
                  scontrol: Optional[str] = None, top: str = "") -> None:
    """The node's config with the fake nvidia-smi and [repair] on; its scenario a PCIe node
    (no NVSwitch fabric: single GPUs may be reset) whose driver writes to the node's kernel log.
    scontrol: another scontrol (a wrapper, see hooked_scontrol); top: top-level config lines."""
    c.write_config(node, scontrol=scontrol)
    path = c.wd / "config" / f"{node}.toml"
    text = path.read_text()
    if report_only:
        text = text.replace("[drain]\n", "[drain]\nreport_only = true\n")
    if "scontrol_timeout_s" in top:
        text = text.replace("scontrol_timeout_s = 10\n", "")
    path.write_text(f'nvidia_smi = "{c.fake / "nvidia-smi"}"\n{top}' + text
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


def hooked_scontrol(c: GpuCluster, name: str) -> str:
    """A wrapper around the real scontrol that logs each call's arguments to
    bin/NAME.calls and runs bin/NAME.pre and bin/NAME.post (sh, with the call's arguments) where
    a test wrote them: before and after the real call, whose exit status it keeps."""
    base = c.wd / "bin" / name
    base.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{base}.calls"\n'
                    f'[ -f "{base}.pre" ] && sh "{base}.pre" "$@"\n"{c.scontrol}" "$@"\nrc=$?\n'
                    f'[ -f "{base}.post" ] && sh "{base}.post" "$@"\nexit $rc\n')
    base.chmod(0o755)
    return str(base)


def wait_for(condition, what: str, timeout: float = 90.0):
    """Poll `condition` until it returns something true, within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def drain_with_dbe(c: GpuCluster, node: str) -> None:
    """GPU 2's DBE on `node`, drained with the reason our epilog writes (no job needed)."""
    with c.scenario(node).open("a") as scenario:
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\n")
    c.cluster.drain(node, f"gpu-healthcheck: gpu2 pci={pci(2)} sn={serial(2)} ecc.volatile_uncorrected=1 "
                          f"epilog job=7")


def was_reset(c: GpuCluster, node: str) -> bool:
    return "# fakegpu nvidia-smi --gpu-reset" in c.scenario(node).read_text()


def comment(c: GpuCluster, node: str) -> str:
    """The node's Comment as slurmctld holds it (free text: spaces and all)."""
    from healthcheck.act.scontrol import parse_node_line

    done = c.cluster.run(["scontrol", "-o", "show", "node", node], timeout=15)
    state = parse_node_line(done.stdout.strip().splitlines()[0]) if done.stdout.strip() else None
    text = (state.comment if state else None) or ""
    return "" if text == "(null)" else text


def ledger_file(c: GpuCluster, node: str, index: int) -> Path:
    """The repair ledger of the fake's GPU `index` (its default serial and PCI address)."""
    return c.state(node) / "repair" / f"{serial(index)}@0000-{0x18 + index * 0x10:02x}-00.0.json"


def ledger_outcomes(c: GpuCluster, node: str, index: int):
    path = ledger_file(c, node, index)
    return [a["outcome"] for a in json.loads(path.read_text())["attempts"]] if path.exists() else []
