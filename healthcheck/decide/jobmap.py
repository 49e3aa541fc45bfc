"""What dcgm-exporter's HPC job mapping directory holds after a job's prolog or epilog (pure).

    changes = on_start("1234", (0, 3), {"3": "77\\n"})   # {"0": "1234\\n", "3": "77\\n1234\\n"}
    changes = on_end("1234", {"0": "1234\\n", "3": "77\\n1234\\n"})   # {"0": None, "3": "77\\n"}

A change maps a file name to its new text, or None: remove the file.  act/jobmap.py reads the
current files and carries the changes out (`hpc_job_mapping_dir`).

dcgm-exporter (`--hpc-job-mapping-dir`, or DCGM_HPC_JOB_MAPPING_DIR; its
internal/pkg/transformation/hpc.go) lists the directory at every collection, takes each plain
file whose name is an integer for the GPU of that DCGM id, and each line of it for a job on that
GPU: the GPU's series are repeated once per line, labelled `hpc_job="<line>"`.  Hence:
- one file per GPU index, one job id a line, and never a blank line (it would be a job named "");
- several jobs on one GPU (gres/shard, MPS) are several lines: a job adds or takes out only its
  own line, never another job's;
- a file with no line at all hides the GPU's series altogether (a GPU with a list of no jobs),
  so the last job's end removes the file rather than leaving it empty;
- names that are not integers (the effector's temp files and lock) are ignored by dcgm-exporter.
"""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Sequence

# What a job id may be here: SLURM_JOB_ID is a number; anything else (a newline above all)
# would write someone else's line.
_JOB_ID = re.compile(r"[0-9]{1,20}")

Changes = Dict[str, Optional[str]]


def valid_job_id(job_id: Optional[str]) -> bool:
    return bool(job_id) and _JOB_ID.fullmatch(job_id or "") is not None


def is_gpu_file(name: str) -> bool:
    """A file dcgm-exporter reads as a GPU's (we only ever write plain digits)."""
    return name.isdigit() and name.isascii()


def job_lines(text: str) -> List[str]:
    """The job ids a file holds, in order, blank lines and surrounding spaces dropped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def render(jobs: Sequence[str]) -> Optional[str]:
    """A file's text for these jobs, or None (remove it) for none."""
    return "".join(f"{job}\n" for job in jobs) if jobs else None


def on_start(job_id: str, gpus: Sequence[int], current: Mapping[str, str]) -> Changes:
    """The job starts on `gpus` (NVML indices): its id joins each of their files, once (a
    requeued job's second prolog changes nothing).  `current`: the text of the files there are."""
    if not valid_job_id(job_id):
        raise ValueError(f"job id {job_id!r} is not a Slurm job id")
    changes: Changes = {}
    for gpu in sorted(set(gpus)):
        name = str(gpu)
        jobs = job_lines(current.get(name, ""))
        if job_id not in jobs:
            changes[name] = render([*jobs, job_id])
    return changes


def on_end(job_id: str, current: Mapping[str, str]) -> Changes:
    """The job ended: its line leaves every GPU file that has it (all of them, not only the
    GPUs the epilog could map: a GPU lost during the job still drops its line), and a file left
    with no line is removed.  Other jobs' lines stay, in their order."""
    if not valid_job_id(job_id):
        raise ValueError(f"job id {job_id!r} is not a Slurm job id")
    changes: Changes = {}
    for name, text in sorted(current.items()):
        if not is_gpu_file(name):
            continue
        jobs = job_lines(text)
        if job_id in jobs:
            changes[name] = render([j for j in jobs if j != job_id])
    return changes
