#!/usr/bin/env python3
"""atheris target: healthcheck.read.slurmenv.parse_gpu_list and job_from_env (SLURM_JOB_GPUS etc.).

    python3 tests/fuzz/fuzz_job_gpus.py -max_total_time=20 tests/fuzz/corpus/job_gpus

Invariants: parse_gpu_list returns at most 1024 distinct ids (decimal indices or GPU-/MIG-
uuids) or raises GpuListError; job_from_env never raises and keeps the job id to 64 safe
characters.
"""

import re
import sys

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.read import slurmenv

JOB_ID = re.compile(r"^[0-9_+A-Za-z.-]{0,64}$")


def TestOneInput(data: bytes) -> None:
    text = _common.text(data)
    try:
        ids = slurmenv.parse_gpu_list(text)
    except slurmenv.GpuListError:
        ids = None
    if ids is not None:
        assert len(ids) <= slurmenv.MAX_GPU_IDS and len(set(ids)) == len(ids)
        for ident in ids:
            assert ident.isdigit() or ident[:4] in ("GPU-", "MIG-"), ident
    # the environment: the same text in each variable slurmd may set
    parts = text.split("\x00")
    env = {"SLURM_JOB_ID": parts[0], "SLURMD_NODENAME": "gpu-a", "SLURM_JOB_USER": "u"}
    if len(parts) > 1:
        env["SLURM_JOB_GPUS" if len(parts) % 2 else "CUDA_VISIBLE_DEVICES"] = parts[1]
    job = slurmenv.job_from_env(env)
    assert JOB_ID.match(job.job_id or ""), job.job_id
    assert (job.gpu_ids is None) == (job.gpu_ids_error is not None), job


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
