"""`job_levels`: the probe levels a job may ask for.  The job's ask reaches the prolog as
SPANK_GPU_HEALTHCHECK_LEVEL, which any user can set (a SPANK plugin or plugstack.conf of their
own, whatever our plugin's allow_full= says), so the prolog honours only the levels the config
allows; another ask is logged and runs quick.  The real CLI on the fake GPUs."""

from __future__ import annotations

JOB = {"SLURM_JOB_ID": "52", "SLURMD_NODENAME": "gpu-x", "SLURM_JOB_GPUS": "0,1"}
SMALL = "gpus = 8\ngpu.*.memory.total_mib = 2048\n"


def _prolog(node, *args, asks=None):
    env = dict(JOB, **({"SPANK_GPU_HEALTHCHECK_LEVEL": asks} if asks else {}))
    result = node.run("--prolog", "--json", *args, env=env, scenario=SMALL)
    assert result.rc == 0, result.stderr
    return result.json["level"], result.stderr


def test_job_levels_by_default_a_jobs_ask_for_full_runs_quick_and_is_logged(node):
    level, stderr = _prolog(node, asks="full")
    assert level == "quick"
    assert ("the job asked for --gpu-healthcheck=full (SPANK_GPU_HEALTHCHECK_LEVEL): "
            "job_levels = ['quick']") in stderr and "does not allow it; running quick" in stderr


def test_job_levels_allowing_full_honours_the_jobs_ask(node):
    node.write_config('job_levels = ["quick", "full"]\n')
    level, stderr = _prolog(node, asks="full")
    assert level == "full" and "asked for" not in stderr


def test_job_levels_a_malformed_ask_is_logged_and_runs_quick(node):
    level, stderr = _prolog(node, asks="everything")
    assert level == "quick" and "--gpu-healthcheck=everything" in stderr and "not a level" in stderr


def test_job_levels_do_not_bind_the_admins_command_line(node):
    # the SPANK plugin's own prolog passes --level, bounded by its allow_full=
    level, stderr = _prolog(node, "--level", "full", asks="quick")
    assert level == "full" and "asked for" not in stderr
    level, _ = _prolog(node)
    assert level == "quick"


def test_job_levels_an_unknown_level_is_a_config_error_naming_the_key(node):
    node.write_config('job_levels = ["quick", "ful"]\n')
    result = node.run("--check-config")
    assert result.rc == 3
    assert "job_levels: unknown value(s) 'ful' (known: quick, full, deep)" in result.stdout + result.stderr
