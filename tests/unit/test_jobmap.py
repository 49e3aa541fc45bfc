"""decide/jobmap.py: what dcgm-exporter's HPC job mapping files hold after a job's prolog and
epilog (one file per GPU index, one job id a line; an empty file hides the GPU, so none is
left; another job's line is never lost)."""

import pytest

from healthcheck.decide.jobmap import is_gpu_file, job_lines, on_end, on_start, render, valid_job_id


def test_jobmap_start_adds_the_job_to_each_of_its_gpus_files() -> None:
    assert on_start("1234", (3, 0), {}) == {"0": "1234\n", "3": "1234\n"}


def test_jobmap_start_keeps_another_jobs_line_on_a_shared_gpu() -> None:
    assert on_start("1234", (3,), {"3": "77\n"}) == {"3": "77\n1234\n"}


def test_jobmap_start_twice_changes_nothing() -> None:
    """A requeued job's second prolog on the same node."""
    assert on_start("1234", (0, 0), {"0": "1234\n"}) == {}


def test_jobmap_end_takes_out_only_its_own_line_and_removes_an_emptied_file() -> None:
    current = {"0": "1234\n", "3": "77\n1234\n88\n", "5": "77\n", ".lock": "1234\n"}
    assert on_end("1234", current) == {"0": None, "3": "77\n88\n"}


def test_jobmap_end_of_a_job_never_written_changes_nothing() -> None:
    assert on_end("9", {"0": "90\n19\n"}) == {}


def test_jobmap_job_ids_match_whole_lines_only() -> None:
    """Job 12 is not job 123, and a line with spaces around is the same job."""
    assert on_end("12", {"0": "123\n 12 \n"}) == {"0": "123\n"}
    assert on_start("12", (0,), {"0": "123\n"}) == {"0": "123\n12\n"}


def test_jobmap_blank_lines_are_dropped_never_written() -> None:
    """dcgm-exporter would label a blank line as a job named ""."""
    assert job_lines("\n77\n\n  \n88") == ["77", "88"]
    assert on_start("5", (1,), {"1": "\n77\n\n"}) == {"1": "77\n5\n"}


def test_jobmap_render_none_for_no_jobs() -> None:
    assert render([]) is None and render(["1", "2"]) == "1\n2\n"


def test_jobmap_only_integer_names_are_gpu_files() -> None:
    assert is_gpu_file("0") and is_gpu_file("17")
    assert not any(is_gpu_file(n) for n in (".gpu-healthcheck.lock", ".3.412.tmp", "GPU-abc", "", "٣"))


@pytest.mark.parametrize("job_id", ["", "12\n34", "12 34", "a1", "-1", None, "1" * 21])
def test_jobmap_refuses_what_is_not_a_slurm_job_id(job_id) -> None:
    assert not valid_job_id(job_id)
    with pytest.raises(ValueError, match="not a Slurm job id"):
        on_start(job_id, (0,), {})
    with pytest.raises(ValueError, match="not a Slurm job id"):
        on_end(job_id, {"0": "1\n"})
