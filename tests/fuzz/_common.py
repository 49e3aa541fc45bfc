"""Shared set-up for the atheris targets in this folder.

Each target is a plain script: `python3 tests/fuzz/fuzz_<name>.py [libFuzzer flags] [corpus]`.
This module puts the repository root on sys.path so `healthcheck` imports without an install,
holds the size limit every target applies to its input, and decodes the run-length form
that lets a mutation of one byte make a long run.

Run-length form: an input starting with "*" is read as (count, byte) pairs; the byte is
repeated once for a count below 0xF0, else 2 ** (count - 0xF0) times (up to 32768).  libFuzzer
grows inputs a few bytes at a time and gets no coverage signal from inside the C regex
engine, so without this it never reaches "Reason=" followed by 10,000 blanks, which is what
backtracking bugs need; the corpora hold seeds in this form (files named rle-*).
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MAX_INPUT = 64 * 1024  # bytes: the size the invariants promise bounded time for


def expand(data: bytes) -> bytes:
    """The input's bytes, run-length form decoded, at most MAX_INPUT."""
    if data[:1] != b"*":
        return data[:MAX_INPUT]
    out = bytearray()
    for i in range(1, len(data) - 1, 2):
        count, byte = data[i], data[i + 1]
        out += bytes([byte]) * (1 if count < 0xF0 else 2 ** (count - 0xF0))
        if len(out) >= MAX_INPUT:
            break
    return bytes(out[:MAX_INPUT])


def rle(plain: bytes) -> bytes:
    """The run-length form of plain bytes (every byte once): how the rle-* seeds are made."""
    return b"*" + b"".join(b"\0" + bytes([b]) for b in plain)


def text(data: bytes) -> str:
    """Fuzz bytes as the readers see them: UTF-8 with errors replaced, at most MAX_INPUT."""
    return expand(data).decode("utf-8", "replace")


# `scontrol -o show nodes` fields before Reason on Slurm 22.05 (tests/lib/shownodes.py), for
# the scontrol target and tests/unit/test_properties.py
HEAD = ("Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.50 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=vm NodeHostName=vm "
        "Version=22.05.8 OS=Linux 6.1.0 #1 SMP RealMemory=1000 AllocMem=0 FreeMem=1000 Sockets=16 "
        "Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=gpu BootTime=2026-11-29T18:00:00 SlurmdStartTime=2026-11-29T18:50:00 "
        "LastBusyTime=2026-11-29T18:55:00 CfgTRES=cpu=16,mem=1000M,billing=16,gres/gpu=8 AllocTRES= "
        "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
        "ExtSensorsTemp=n/s")
# Slurm prints a reason unescaped, so these inside one are read as its end: a known limit.
TERMINATOR = re.compile(r"\s(?:Comment|Extra|ExtSensors\w*|CurrentWatts|Partitions|AllocTRES|CfgTRES)="
                        r"|\[[^\]@\s]+@[^\]\s]+\]")
