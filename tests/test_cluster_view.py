"""`gpu-healthcheck --cluster` on literal `scontrol -o show nodes` lines (Slurm 22.05 format)."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pytest

from healthcheck.report.cluster import COLUMNS, format_table, rows_from_show_nodes, show_cluster
from healthcheck.config import Config
from healthcheck.act.scontrol import parse_show_nodes
from tests.fakenode import FIXTURES

_HEAD = ("Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.50 "
         "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=vm NodeHostName=vm "
         "Version=22.05.8 OS=Linux 6.1.0 #1 SMP RealMemory=1000 AllocMem=0 FreeMem=1000 Sockets=16 "
         "Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
         "Partitions=gpu BootTime=2026-11-29T18:00:00 SlurmdStartTime=2026-11-29T18:50:00 "
         "LastBusyTime=2026-11-29T18:55:00 CfgTRES=cpu=16,mem=1000M,billing=16,gres/gpu=8 "
         "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
         "ExtSensorsWatts=0 ExtSensorsTemp=n/s")


def _line(name: str, state: str, reason: str = "") -> str:
    return f"NodeName={name} " + _HEAD.format(state=state) + (f" Reason={reason}" if reason else "")


# The line from the brief, verbatim.
GPU_A = ("NodeName=gpu-a Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=16 CPUTot=16 "
         "CPULoad=0.50 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=vm "
         "NodeHostName=vm Version=22.05.8 OS=Linux 6.1.0 #1 SMP RealMemory=1000 AllocMem=0 "
         "FreeMem=1000 Sockets=16 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 "
         "Owner=N/A MCS_label=N/A Partitions=gpu BootTime=2026-11-29T18:00:00 "
         "SlurmdStartTime=2026-11-29T18:50:00 LastBusyTime=2026-11-29T18:55:00 "
         "CfgTRES=cpu=16,mem=1000M,billing=16,gres/gpu=8 AllocTRES= CapWatts=n/a CurrentWatts=0 "
         "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
         "Reason=gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=1650522003802 "
         "ecc.volatile_uncorrected=3 epilog job=12 [root@2026-11-29T19:01:02]")
GPU_B = _line("gpu-b", "MIXED+DRAIN",
              "gpu-healthcheck: gpu5 pci=00000000:9A:00.0 sn=1650522003805 remap.failure=1 rma "
              "node (+1 more) [slurm@2026-11-29T19:05:00]")
GPU_C = _line("gpu-c", "IDLE+DRAIN", "bad fan, ticket 4711 [admin@2026-11-29T18:30:00]")
GPU_D = _line("gpu-d", "IDLE")
GPU_E = _line("gpu-e", "DOWN*", "Not responding [slurm@2026-11-29T18:40:00]")
GPU_F = _line("gpu-f", "IDLE+DRAIN", "gpu-healthcheck: written by a future version [root@2026-11-29T19:10:00]")
GPU_G = _line("gpu-g", "IDLE", "note from admin [admin@2026-11-29T17:00:00]")
# Slurm 24.11 keeps the last reason after State=RESUME: a node back in service with ours
GPU_H = _line("gpu-h", "IDLE", "gpu-healthcheck: gpu1 ecc.volatile_uncorrected=1 epilog job=9 "
              "[root@2026-11-29T16:00:00]")
SHOW_NODES = "\n".join([GPU_A, GPU_B, GPU_C, GPU_D, GPU_E, GPU_F, GPU_G, GPU_H]) + "\n"


def test_our_reason_is_split_into_columns_with_slurms_time():
    [row] = rows_from_show_nodes(GPU_A)
    assert row == {"node": "gpu-a", "state": "IDLE+DRAIN", "gpu": "2", "pci": "00000000:38:00.0",
                   "serial": "1650522003802", "check": "ecc.volatile_uncorrected", "value": "3",
                   "context": "epilog", "job": "12", "time": "2026-11-29T19:01:02", "ours": True, "refused": False,
                   "raw_reason": "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=1650522003802 "
                                 "ecc.volatile_uncorrected=3 epilog job=12"}


def test_ours_come_first_then_others_drained_and_healthy_nodes_are_left_out():
    rows = rows_from_show_nodes(SHOW_NODES)
    assert [(r["node"], r["ours"]) for r in rows] == [
        ("gpu-a", True), ("gpu-b", True), ("gpu-f", True), ("gpu-c", False), ("gpu-e", False)]
    b = rows[1]
    assert (b["gpu"], b["check"], b["value"], b["context"], b["job"], b["time"]) == (
        "5", "remap.failure", "1", "node", None, "2026-11-29T19:05:00")
    c = rows[3]
    assert c["raw_reason"] == "bad fan, ticket 4711" and c["time"] == "2026-11-29T18:30:00"
    assert c["check"] is None and c["gpu"] is None


def test_table_has_the_columns_and_a_not_ours_section():
    lines = _table(SHOW_NODES)
    assert lines[0].split() == [c.upper() for c in COLUMNS]
    assert lines[1].split() == ["gpu-a", "IDLE+DRAIN", "2", "00000000:38:00.0", "1650522003802",
                                "ecc.volatile_uncorrected", "3", "epilog", "12", "2026-11-29T19:01:02"]
    assert lines[2].split()[:7] == ["gpu-b", "MIXED+DRAIN", "5", "00000000:9A:00.0",
                                    "1650522003805", "remap.failure", "1"]
    # a reason of ours we cannot split still shows whole
    assert any("gpu-f: gpu-healthcheck: written by a future version" in l for l in lines)
    tail = lines[lines.index("not ours:") + 1:]
    assert tail[0].split()[:2] == ["gpu-c", "IDLE+DRAIN"] and "bad fan, ticket 4711" in tail[0]
    assert tail[1].startswith("gpu-e") and "Not responding" in tail[1]
    assert not any("gpu-d" in l or "gpu-g" in l for l in lines)


def test_no_drained_nodes_says_so():
    assert _table(GPU_D + "\n") == ["no nodes drained by gpu-healthcheck"]
    assert _table("") == ["no nodes drained by gpu-healthcheck"]


def test_garbled_output_is_not_a_crash():
    assert rows_from_show_nodes("garbage\n\x00\nNodeName=\n") == []


def _fake_scontrol(path: Path, output: str, rc: int = 0) -> Path:
    data = path.parent / (path.name + ".out")
    data.write_text(output)
    calls = path.parent / (path.name + ".calls")
    path.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\ncat "{data}"\n'
                    f'[ {rc} -eq 0 ] || echo "slurm_load_node error: Unable to contact slurm controller" >&2\n'
                    f"exit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return calls


def _table(text: str) -> list:
    from healthcheck.report.cluster import format_table

    return format_table(rows_from_show_nodes(text))


def test_show_cluster_makes_one_scontrol_call_and_prints_json(tmp_path):
    scontrol = tmp_path / "scontrol"
    calls = _fake_scontrol(scontrol, SHOW_NODES)
    out = io.StringIO()
    rc = show_cluster(Config(scontrol=str(scontrol)), {}, True, out)
    assert rc == 0
    assert calls.read_text().splitlines() == ["-o show nodes"]
    doc = json.loads(out.getvalue())
    assert [d["node"] for d in doc] == ["gpu-a", "gpu-b", "gpu-f", "gpu-c", "gpu-e"]
    assert set(doc[0]) == set(COLUMNS) | {"ours", "refused", "raw_reason"}
    assert doc[3]["ours"] is False and doc[3]["raw_reason"] == "bad fan, ticket 4711"


def test_failing_scontrol_exits_3_naming_it(tmp_path):
    scontrol = tmp_path / "scontrol"
    _fake_scontrol(scontrol, "", rc=1)
    out, err = io.StringIO(), io.StringIO()
    assert show_cluster(Config(scontrol=str(scontrol)), {}, False, out, err) == 3
    assert str(scontrol) in err.getvalue() and "scontrol" in err.getvalue()
    assert "Unable to contact slurm controller" in err.getvalue()
    assert out.getvalue() == ""
    missing = tmp_path / "nowhere" / "scontrol"
    assert show_cluster(Config(scontrol=str(missing)), {}, False, out, err) == 3
    assert f"{missing} not found" in err.getvalue()


def test_cluster_through_the_real_cli(node):
    # the node fixture points `scontrol` at <tmp>/no-scontrol: put a fake one there
    calls = _fake_scontrol(node.tmp / "no-scontrol", SHOW_NODES)
    result = node.run("--cluster")
    assert result.rc == 0, result.stderr
    assert result.stdout.splitlines()[0].split() == [c.upper() for c in COLUMNS]
    assert "gpu-a" in result.stdout and "not ours:" in result.stdout
    result = node.run("--cluster", "--json")
    assert result.rc == 0 and json.loads(result.stdout)[0]["serial"] == "1650522003802"
    assert len(calls.read_text().splitlines()) == 2  # one call per invocation
    os.unlink(node.tmp / "no-scontrol")
    result = node.run("--cluster")
    assert result.rc == 3 and "scontrol" in result.stderr


import pytest

from healthcheck.report.cluster import COLUMNS, format_table, rows_from_show_nodes, show_cluster
