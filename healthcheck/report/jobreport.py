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
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from ..model import Finding, Mode, NodeSnapshot

if TYPE_CHECKING:
    from ..config import Config

PREFIX = "gpu-healthcheck:"


# --- pure ----------------------------------------------------------------------------------

def _short(message: str) -> str:
    """A check message without its advice: "GPU 2 (...): 3 volatile ... errors, limit 0"."""
    head, sep, _ = message.partition(". ")
    return head if sep else message.rstrip(".")


def job_faults(findings: Sequence[Finding], snapshot: NodeSnapshot) -> Dict[Optional[int], Finding]:
    """The worst draining finding of each of the job's GPUs (None: node-wide), worst first."""
    from ..decide.verdict import draining

    selected = set(snapshot.selected)
    worst: Dict[Optional[int], Finding] = {}
    for f in draining(findings):  # worst first
        if f.gpu is None or f.gpu in selected:
            worst.setdefault(f.gpu, f)
    return worst


def report_lines(node: str, findings: Sequence[Finding], snapshot: NodeSnapshot,
                 whose: str = "the job's GPUs") -> List[str]:
    """One line per faulty GPU of the job, naming its worst finding (node-wide faults too), or
    one line saying the job's GPUs look healthy."""
    selected = set(snapshot.selected)
    worst = job_faults(findings, snapshot)
    if worst:
        return [f"{PREFIX} {node} {_short(f.message)}; this node will be drained"
                for f in worst.values()]
    gpus = ", ".join(str(i) for i in sorted(selected)) or "none"
    return [f"{PREFIX} {node}: {whose} ({gpus}) look healthy (ECC, row remapping, "
            f"retired pages, lost GPUs read through NVML)"]


def requeue_line(restarts: int, admin_comment: Optional[str]) -> Optional[str]:
    """Why a requeued job was requeued, as far as the job may see it."""
    if restarts <= 0:
        return None
    times = "once" if restarts == 1 else f"{restarts} times"
    if admin_comment and admin_comment.startswith(PREFIX):
        return (f"{PREFIX} this job was requeued {times}; the node it was first given failed "
                f"its check: {admin_comment[len(PREFIX):].strip()}")
    if admin_comment:
        return f"{PREFIX} this job was requeued {times}; AdminComment: {admin_comment}"
    return f"{PREFIX} this job was requeued {times}; Slurm recorded no reason the job can see"


# --- reading and writing -------------------------------------------------------------------

def _config(environ: Mapping[str, str]) -> "Config":
    """The node's config, read once for the whole report; the admin's file may be unreadable
    to the user: then the defaults judge."""
    from ..checks import CATALOGUE
    from ..config import Config, ConfigError, load_config

    try:
        return load_config(None, environ, known_checks=CATALOGUE)
    except ConfigError:
        return Config()


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


def job_report(environ: Mapping[str, str], out: TextIO) -> int:
    """Exit 0 healthy, 2 a GPU of the job is at fault, 3 could not check."""
    from ..decide.exitcodes import job_report_exit

    phase = environ.get("GPU_HEALTHCHECK_REPORT", "")
    status = job_report_exit(False)
    config = _config(environ)
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


def main(environ: Optional[Mapping[str, str]] = None, out: Optional[TextIO] = None) -> int:
    try:
        return job_report(os.environ if environ is None else environ,
                          sys.stdout if out is None else out)
    except Exception as exc:  # noqa: BLE001 - a report must never add a failure to the job
        print(f"{PREFIX} --job-report could not check the job's GPUs ({type(exc).__name__}: "
              f"{exc}); a bug in gpu-healthcheck", file=sys.stderr)
        from ..decide.exitcodes import job_report_exit

        return job_report_exit(False, could_check=False)
