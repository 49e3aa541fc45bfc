"""`gpu-healthcheck --job-report`: inside a job, as its user, say which GPU failed it.

    gpu-healthcheck: gpu-a GPU 2 (00000000:38:00.0, SN 1650522003802): 3 volatile uncorrected
    ECC errors, limit 0; this node will be drained

Read-only: it acts on nothing, needs no root, and never fails the job.  The SPANK plugin runs it
(spank/gpu_healthcheck.c) with the job's environment and the task's stderr:
  - GPU_HEALTHCHECK_REPORT=task-exit when a task exited non-zero: a fast NVML read of the job's
    GPUs, judged by the epilog's own checks, one line per faulty GPU (or one saying they look
    healthy);
  - GPU_HEALTHCHECK_REPORT=requeued at the first task of a requeued batch job: why it was
    requeued, from the job's AdminComment (slurmctld sends it to every reader of the job,
    its owner included; the prolog that refused the job wrote our drain reason there).
Run by hand (no GPU_HEALTHCHECK_REPORT) it prints both.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, List, Mapping, Optional, TextIO, Tuple

from ..model import Mode, NodeSnapshot
from ..report.jobreport import PREFIX, job_faults, report_lines, requeue_line

if TYPE_CHECKING:
    import argparse

    from ..config import Config


def _gpu_lines(environ: Mapping[str, str], config: "Config") -> Tuple[List[str], int]:
    from ..act.state import StateStore
    from ..checks import CheckContext, run_checks
    from ..decide.exitcodes import job_report_exit
    from ..decide.gpumap import map_job_gpus
    from ..read.nvml import read_nvml
    from ..read.slurmenv import job_from_env

    node = config.node_name or environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    job = job_from_env(environ)
    nvml = read_nvml(config.nvml_timeout_s)
    selected: Tuple[int, ...] = tuple(g.index for g in nvml.gpus)
    whose = "the job's GPUs"
    if job.gpu_ids and nvml.error is None:
        layout = None
        if any(i.isdigit() for i in job.gpu_ids):  # gres indices: numbered as slurmd does
            from ..read.gres import gres_conf_path, read_layout

            # no state_dir: the layout cache is root's, and a report writes nothing
            layout = read_layout(gres_conf_path(config.gres_conf, dict(environ)), node)
        mapped, _ = map_job_gpus(job.gpu_ids, nvml.gpus, layout)
        if mapped:
            selected = mapped
        else:  # better every GPU of the node than none: the line says which it judged
            whose = "this node's GPUs (the job's could not be told apart)"
    snapshot = NodeSnapshot(host=node, nvml_error=nvml.error, driver_version=nvml.driver_version,
                            gpus=nvml.gpus, job=job, selected=selected)
    if job.job_id:  # the prolog's baseline, where the user may read it: only new errors count
        baseline, _ = StateStore(config.state_dir).read_baseline(job.job_id)
        snapshot = snapshot._replace(baseline=baseline)
    findings, _ = run_checks(snapshot, CheckContext(config=config, mode=Mode.EPILOG,
                                                    selected=selected))
    return report_lines(node, findings, snapshot, whose), job_report_exit(bool(job_faults(findings, snapshot)))


def _admin_comment(environ: Mapping[str, str], config: "Config", job_id: str) -> Optional[str]:
    from ..act.scontrol import Scontrol, ScontrolError, find_scontrol, parse_admin_comment

    try:
        ctl = Scontrol(find_scontrol(config.scontrol, environ), config.scontrol_timeout_s)
        return parse_admin_comment(ctl.show_job(job_id))
    except ScontrolError:
        return None


def job_report(environ: Mapping[str, str], out: TextIO, config: Optional["Config"] = None) -> int:
    """Exit 0 healthy, 2 a GPU of the job is at fault, 3 could not check.  `config`: the node's
    (cli.py reads it; the admin's file may be unreadable to the user: then, and by default
    here, the built-in defaults judge)."""
    from ..config import Config
    from ..decide.exitcodes import job_report_exit

    phase = environ.get("GPU_HEALTHCHECK_REPORT", "")
    status = job_report_exit(False)
    config = config or Config()
    if not (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")):
        # no job, no job's GPUs: "the job's GPUs (none) look healthy" would be a claim unmade
        print(f"{PREFIX} --job-report runs inside a Slurm job (as the SPANK plugin or a batch "
              f"script runs it): SLURM_JOB_ID is unset, nothing checked; use --node for this "
              f"node's GPUs", file=out)
        out.flush()
        return job_report_exit(False, could_check=False)
    if phase in ("", "requeued"):
        try:
            restarts = int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
        except ValueError:
            restarts = 0
        job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
        if restarts > 0 and job_id:
            line = requeue_line(restarts, _admin_comment(environ, config, job_id))
            if line:
                print(line, file=out)
    if phase in ("", "task-exit"):
        lines, status = _gpu_lines(environ, config)
        for line in lines:
            print(line, file=out)
    out.flush()
    return status


def main(args: "argparse.Namespace", config: "Config", started: float) -> int:
    return job_report(os.environ, sys.stdout, config)


def crashed(exc: Exception) -> int:
    """cli.py's guard, on a bug of ours: one line on the task's stderr; a report must never add
    a failure to the job."""
    from ..decide.exitcodes import job_report_exit

    print(f"{PREFIX} --job-report could not check the job's GPUs ({type(exc).__name__}: "
          f"{exc}); a bug in gpu-healthcheck", file=sys.stderr)
    return job_report_exit(False, could_check=False)
