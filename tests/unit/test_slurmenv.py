"""The Slurm job environment: SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES and the map to GPUs."""

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.read.gres import parse_gres_conf
from healthcheck.model import GpuSnapshot, MigDevice
from healthcheck.decide.gpumap import map_job_gpus
from healthcheck.read.slurmenv import GpuListError, job_from_env, parse_gpu_list


@pytest.mark.parametrize("text,ids", [("", ()), ("0", ("0",)), ("0,1,3", ("0", "1", "3")),
                                      ("0-3", ("0", "1", "2", "3")), (" 2 , 5", ("2", "5")),
                                      ("GPU-513536b6-7d19-9063-b049-1e69664bb298",
                                       ("GPU-513536b6-7d19-9063-b049-1e69664bb298",))])
def test_gpu_lists(text, ids):
    assert parse_gpu_list(text) == ids


@pytest.mark.parametrize("text", ["a", "0,,1", "1,1", "3-1", "0;rm -rf /", "-1", "0-99999", "$(id)"])
def test_malformed_gpu_lists(text):
    with pytest.raises(GpuListError):
        parse_gpu_list(text)


def test_job_gpus_fall_back_to_cuda_visible_devices_and_errors_are_kept():
    assert job_from_env({"SLURM_JOB_ID": "5", "CUDA_VISIBLE_DEVICES": "1,2"}).gpu_ids == ("1", "2")
    job = job_from_env({"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "x"})
    assert job.gpu_ids is None and "SLURM_JOB_GPUS" in job.gpu_ids_error
    assert job_from_env({"SLURM_JOB_ID": "5"}).gpu_ids == ()


def test_map_through_gres_conf_and_minor_numbers_not_nvml_order():
    gpus = [GpuSnapshot(index=0, minor_number=3, uuid="GPU-a"), GpuSnapshot(index=1, minor_number=0, uuid="GPU-b")]
    layout = parse_gres_conf("Name=gpu File=/dev/nvidia[0-7]\n", "gpu-a")
    assert map_job_gpus(["0"], gpus, layout) == ((1,), None)
    assert map_job_gpus(["GPU-a"], gpus) == ((0,), None)
    found, error = map_job_gpus(["7"], gpus, layout)
    assert found == () and "7" in error
    found, error = map_job_gpus(["0"], gpus)  # no gres.conf: a gres index is never taken for a minor
    assert found == () and "no gres.conf" in error


def test_a_mig_device_maps_to_its_gpu():
    mig = MigDevice(index=1, uuid="MIG-0929581a-2be6-5dec-bf34-0954c6c529a6", memory_total_mib=40192)
    gpus = [GpuSnapshot(index=0, minor_number=0, uuid="GPU-a"),
            GpuSnapshot(index=1, minor_number=1, uuid="GPU-b", mig_mode=True, mig_devices=(mig,))]
    ids = parse_gpu_list("MIG-0929581a-2be6-5dec-bf34-0954c6c529a6")
    assert map_job_gpus(ids, gpus) == ((1,), None)
    assert map_job_gpus(["MIG-0929581a"], gpus) == ((1,), None)  # a unique prefix, as CUDA takes


@settings(max_examples=500)
@given(st.text(max_size=60))
def test_any_text_parses_or_raises_gpu_list_error(text):
    try:
        ids = parse_gpu_list(text)
    except GpuListError:
        return
    assert len(ids) == len(set(ids)) <= 1024


def test_job_sluid_read_from_slurm_job_sluid_and_garbage_refused():
    """SLURM_JOB_SLUID (Slurm 25.11+; 26.05's prolog got e.g. sC7XM8XGZGD100): the job's id
    that is unique where job ids are reused; anything else is not one."""
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0", "SLURM_JOB_SLUID": "sC7XM8XGZGD100"}
    job = job_from_env(env)
    assert (job.job_id, job.sluid, job.gpu_ids) == ("7", "sC7XM8XGZGD100", ("0",))
    for bad in ("", "s C7", "x" * 33, "sC7\n", "../x"):
        assert job_from_env({**env, "SLURM_JOB_SLUID": bad}).sluid is None, bad
    assert job_from_env({"SLURM_JOB_ID": "7"}).sluid is None
