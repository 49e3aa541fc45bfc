"""Literal `scontrol -o show nodes` lines (Slurm 22.05 format) and a stub scontrol that prints
them, for the `--cluster` tests of every layer."""

from __future__ import annotations

import stat
from pathlib import Path

HEAD = ("Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.50 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=vm NodeHostName=vm "
        "Version=22.05.8 OS=Linux 6.1.0 #1 SMP RealMemory=1000 AllocMem=0 FreeMem=1000 Sockets=16 "
        "Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=gpu BootTime=2026-11-29T18:00:00 SlurmdStartTime=2026-11-29T18:50:00 "
        "LastBusyTime=2026-11-29T18:55:00 CfgTRES=cpu=16,mem=1000M,billing=16,gres/gpu=8 "
        "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
        "ExtSensorsWatts=0 ExtSensorsTemp=n/s")


def node_line(name: str, state: str, reason: str = "") -> str:
    return f"NodeName={name} " + HEAD.format(state=state) + (f" Reason={reason}" if reason else "")


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
GPU_B = node_line("gpu-b", "MIXED+DRAIN",
                  "gpu-healthcheck: gpu5 pci=00000000:9A:00.0 sn=1650522003805 remap.failure=1 rma "
                  "node (+1 more) [slurm@2026-11-29T19:05:00]")
GPU_C = node_line("gpu-c", "IDLE+DRAIN", "bad fan, ticket 4711 [admin@2026-11-29T18:30:00]")
GPU_D = node_line("gpu-d", "IDLE")
GPU_E = node_line("gpu-e", "DOWN*", "Not responding [slurm@2026-11-29T18:40:00]")
GPU_F = node_line("gpu-f", "IDLE+DRAIN", "gpu-healthcheck: written by a future version [root@2026-11-29T19:10:00]")
GPU_G = node_line("gpu-g", "IDLE", "note from admin [admin@2026-11-29T17:00:00]")
# Slurm 24.11 keeps the last reason after State=RESUME: a node back in service with ours
GPU_H = node_line("gpu-h", "IDLE", "gpu-healthcheck: gpu1 ecc.volatile_uncorrected=1 epilog job=9 "
                  "[root@2026-11-29T16:00:00]")
SHOW_NODES = "\n".join([GPU_A, GPU_B, GPU_C, GPU_D, GPU_E, GPU_F, GPU_G, GPU_H]) + "\n"


def fake_scontrol(path: Path, output: str, rc: int = 0) -> Path:
    data = path.parent / (path.name + ".out")
    data.write_text(output)
    calls = path.parent / (path.name + ".calls")
    path.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\ncat "{data}"\n'
                    f'[ {rc} -eq 0 ] || echo "slurm_load_node error: Unable to contact slurm controller" >&2\n'
                    f"exit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return calls
