"""The counter rules end to end: the real CLI's epilogs on the fake GPU libraries write each GPU's
counters into the history, and `--suspects` names the GPU whose counters grow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

from tests.conftest import Node

JOB = {"SLURMD_NODENAME": "gpu-x", "SLURM_JOB_GPUS": "0,1"}


def _epilog(node: Node, job: int, scenario: str) -> None:
    result = node.run("--epilog", "--json", env={**JOB, "SLURM_JOB_ID": str(job)}, scenario=scenario)
    assert result.rc == 0, result.stderr


def _history(node: Node) -> List[Dict]:
    return [json.loads(line) for line in (node.state_dir / "history.jsonl").read_text().splitlines()]


def test_suspects_names_the_gpu_whose_counters_grow_job_after_job(node: Node, tmp_path: Path) -> None:
    # GPU 1 under the jobs: corrected ECC errors far above GPU 0's beside it, two banks run
    # low on spare rows, PCIe and NVLink replays climbing; GPU 0 stays quiet.  GPU 2, a board
    # that retires pages instead of remapping rows (pre-Ampere), retires one a job.
    for job, step in ((41, 0), (42, 1), (43, 2)):
        _epilog(node, job, "gpus = 8\n"
                           f"gpu.0.ecc.aggregate.corrected = {step}\n"
                           f"gpu.1.ecc.aggregate.corrected = {600 * step}\n"
                           f"gpu.1.remap.histogram = 2560,0,0,{step},0\n"
                           f"gpu.1.pcie.replay = {80 * step}\n"
                           f"gpu.1.nvlink.*.replay_errors = {5 * step}\n"
                           "gpu.2.unsupported = RemappedRows\n"
                           f"gpu.2.retired.sbe = {step}\n")
    lines = _history(node)
    serial = next(s for s, c in lines[-1]["gpus"].items() if c["gpu"] == 1)
    old_board = next(s for s, c in lines[-1]["gpus"].items() if c["gpu"] == 2)
    assert lines[-1]["gpus"][serial]["load"] is True and lines[-1]["gpus"][serial]["sbe"] == 1200
    assert len(lines[-1]["gpus"]) == 8 and all(c["load"] is False for c in lines[-1]["gpus"].values()
                                               if c["gpu"] not in (0, 1))
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("JobIDRaw|User|State|ExitCode|Start|End|NNodes|NodeList\n")
    result = node.run("--suspects", "--sacct-file", str(sacct), "--since", "1d", "--json")
    assert result.rc == 1, result.stderr
    doc = json.loads(result.stdout)
    got = sorted((s["kind"], s["node"], s.get("serial")) for s in doc["suspects"])
    assert got == sorted([(kind, "gpu-x", serial) for kind in
                          ("ecc_sbe_rate", "remap_headroom", "pcie_replay", "nvlink_replay")]
                         + [("retired_pages", "gpu-x", old_board)])
    evidence = {s["kind"]: s["evidence"] for s in doc["suspects"]}
    assert evidence["ecc_sbe_rate"]["sbe_under_load"] == 1200 and evidence["ecc_sbe_rate"]["siblings"] == 1
    assert evidence["retired_pages"]["retired_growth"] == 2 and evidence["retired_pages"]["gpu"] == 2
    assert evidence["remap_headroom"]["remap_low_growth"] == 2
    assert evidence["pcie_replay"]["pcie_replay_growth"] == 160
    assert evidence["nvlink_replay"]["nvlink_replay_growth"] == 18 * 10  # every one of 18 links, 5 a job
    assert doc["history"]["counter_samples"] == 24
    # the table and the state file --cluster reads name the same GPUs
    table = node.run("--suspects", "--sacct-file", str(sacct), "--since", "1d")
    assert table.rc == 1 and "retired_pages" in table.stdout and old_board in table.stdout
    state = (node.state_dir / "suspects.json").read_text()
    assert serial in state and old_board in state


def test_suspects_steady_counters_name_no_gpu(node: Node, tmp_path: Path) -> None:
    for job in (41, 42, 43):
        _epilog(node, job, "gpus = 8\ngpu.0.ecc.aggregate.corrected = 3\ngpu.1.retired.sbe = 1\n")
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("JobIDRaw|User|State|ExitCode|Start|End|NNodes|NodeList\n")
    result = node.run("--suspects", "--sacct-file", str(sacct), "--since", "1d", "--json")
    assert result.rc == 0, result.stderr
    assert json.loads(result.stdout)["suspects"] == []
