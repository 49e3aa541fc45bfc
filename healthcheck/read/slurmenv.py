"""Reader of the Slurm job environment that slurmd gives a Prolog or Epilog.

    job = job_from_env({"SLURM_JOB_ID": "1234", "SLURMD_NODENAME": "gpu-a",
                        "SLURM_JOB_GPUS": "0,1"})
    job.gpu_ids   # ("0", "1"): Slurm gres indices: positions in slurmd's gres device list,
                  # NOT /dev/nvidiaN minors (decide/gpumap.py maps them)

The values come from the job's side of the system and are treated as untrusted text: they are
parsed, bounded, and never passed to a shell.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional, Tuple

from ..model import JobContext

MAX_GPU_IDS = 1024
_INDEX_RE = re.compile(r"^\d{1,4}$")
_RANGE_RE = re.compile(r"^(\d{1,4})-(\d{1,4})$")
_UUID_RE = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f-]{4,64}$")
# SLURM_JOB_ID is always Slurm's numeric id (uint32), array tasks included; anything else is
# not from slurmd.  Rewriting it instead would be worse than dropping it: "1234;5" made
# "1234_5", which scontrol reads as task 5 of array job 1234, another job.
_JOB_ID_RE = re.compile(r"^[1-9][0-9]{0,9}$")


class GpuListError(ValueError):
    """A GPU list we cannot read; keeps the offending part."""

    def __init__(self, part: str, problem: str) -> None:
        super().__init__(f"{problem}: {part[:40]!r}")
        self.part = part


def parse_gpu_list(text: str) -> Tuple[str, ...]:
    """"0,1,3", "0-3" or "GPU-<uuid>,..." -> ids as strings; "" -> ().

    Raises:
        GpuListError: anything else.
    """
    text = text.strip()
    if not text:
        return ()
    ids = []
    for part in text.split(","):
        part = part.strip()
        m = _RANGE_RE.match(part)
        if _INDEX_RE.match(part):
            ids.append(str(int(part)))
        elif m:
            low, high = int(m.group(1)), int(m.group(2))
            if high < low or high - low >= MAX_GPU_IDS:
                raise GpuListError(part, "bad range")
            ids.extend(str(i) for i in range(low, high + 1))
        elif _UUID_RE.match(part):
            ids.append(part)
        else:
            raise GpuListError(part, "not a GPU index, range or GPU-<uuid>")
        if len(ids) > MAX_GPU_IDS:
            raise GpuListError(text, "too many GPUs")
    if len(set(ids)) != len(ids):
        raise GpuListError(text, "GPU listed twice")
    return tuple(ids)


def valid_job_id(text: Optional[str]) -> Optional[str]:
    """The job id when it is one (1 to 4294967295), else None: it then names no baseline, no
    AdminComment and no reason (the run says so in its log)."""
    if text is None or not _JOB_ID_RE.match(text) or int(text) > 0xFFFFFFFF:
        return None
    return text


_SLUID_RE = re.compile(r"[0-9A-Za-z]{1,32}")


def job_from_env(environ: Mapping[str, str]) -> JobContext:
    """The job context; GPU ids from SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES, else none;
    SLURM_JOB_SLUID (Slurm 25.11+, e.g. sC7XM8XGZGD100) where it is one."""
    sluid = environ.get("SLURM_JOB_SLUID", "")
    return _job_gpus(environ)._replace(sluid=sluid if _SLUID_RE.fullmatch(sluid) else None)


def _job_gpus(environ: Mapping[str, str]) -> JobContext:
    job_id = valid_job_id(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"))
    node = environ.get("SLURMD_NODENAME")
    user = environ.get("SLURM_JOB_USER")
    # On a MIG node Slurm treats each MIG device as a GPU: SLURM_JOB_GPUS holds gres indices of
    # MIG devices, which no gres.conf File= order maps, and CUDA_VISIBLE_DEVICES their MIG-
    # UUIDs, which name them exactly.  UUIDs (MIG- or GPU-) win wherever they are given.
    visible = environ.get("CUDA_VISIBLE_DEVICES", "")
    try:
        uuids = parse_gpu_list(visible) if "-" in visible else ()
    except GpuListError:
        uuids = ()
    if uuids and all(not u.isdigit() for u in uuids):
        return JobContext(job_id, node, user, gpu_ids=uuids, gpu_ids_source="CUDA_VISIBLE_DEVICES",
                          mig_uuids=tuple(u.lower() for u in uuids if u.upper().startswith("MIG-")))
    for source in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        raw = environ.get(source)
        if raw is None:
            continue
        if source == "CUDA_VISIBLE_DEVICES" and raw.strip() == "NoDevFiles":
            return JobContext(job_id, node, user, gpu_ids=(), gpu_ids_source=source)
        try:
            return JobContext(job_id, node, user, gpu_ids=parse_gpu_list(raw), gpu_ids_source=source)
        except GpuListError as exc:
            return JobContext(job_id, node, user, gpu_ids_error=f"{source}: {exc}",
                              gpu_ids_source=source)
    return JobContext(job_id, node, user, gpu_ids=())
