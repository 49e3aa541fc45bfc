"""The gang check's collectives (commands/gang.py conducts it): each job of a round an `srun
--overlap` step inside the job's own allocation, all of a round's at once, each within its share
of gang_timeout_s, its output read by read/nccltests.py and judged by decide/gang.py
(judge_gang_run: whether it spanned the nodes, then its figure, as the fabric sweep judges).

    runner = GangRunner(srun, job_id, config, os.environ, deadline)
    results = runner.run(jobs)          # JobResult per Job; GangError: the check could not run
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import time
from typing import Dict, List, Mapping, Optional, Sequence

from ..config import Config
from ..decide.internodejob import SetupProblem
from ..decide.gang import StepUser, judge_gang_run
from ..decide.sweep import Job, JobResult

# slurmstepd's words when the program is not on the nodes (Slurm 22.05-24.11)
_MISSING_RE = re.compile(r"execve\(\): (\S+): No such file or directory")
_SRUN_ERROR_RE = re.compile(r"^srun: error: (.*)$", re.M)
RUN_SHARE = 5  # each collective gets at most gang_timeout_s / RUN_SHARE


class GangError(Exception):
    """The check could not run (a program missing, srun refused, a collective that did not
    span the nodes): nobody's node is at fault."""


# root's own variables that must not follow the drop to the job's owner (her srun and her
# steps): a home, a login, a session bus, credentials of root's
_ROOTS_OWN = ("HOME", "USER", "LOGNAME", "MAIL", "XDG_", "DBUS_", "SSH_", "KRB5", "SUDO_")


def srun_env(environ: Mapping[str, str], user: Optional[StepUser] = None) -> Dict[str, str]:
    """The nested srun's environment: ours without the step's SLURM_* (SLURM_NTASKS and the
    like would override what we ask for); the job is named by --jobid.  Run as the job's owner
    (`user`), also without root's home, login and session variables; HOME is then /tmp, which
    she can read (her own home may not exist on the node)."""
    env = {k: v for k, v in environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    if user is not None and user.uid != 0:
        env = {k: v for k, v in env.items() if not k.startswith(_ROOTS_OWN)}
        env["HOME"] = "/tmp"
    return env


def node_groups(uid: int, gid: int) -> List[int]:
    """The supplementary groups of `uid` in this node's account database (as slurmstepd gives
    her steps), or none where the node has no name for her."""
    import pwd

    try:
        return os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except (KeyError, OSError):
        return []


class GangRunner:
    """Runs a round's jobs at once, each an `srun --overlap` step inside the job."""

    def __init__(self, srun: str, job_id: str, config: Config, environ: Mapping[str, str],
                 deadline: float, user: Optional[StepUser] = None) -> None:
        internode = config.internode
        self.srun, self.job_id, self.deadline = srun, job_id, deadline
        self.collective = (os.path.join(internode.nccl_tests, internode.collective) if internode.nccl_tests
                           else internode.collective)
        self.nbytes = internode.gang_bytes
        self.tasks_per_node = internode.tasks_per_node
        self.srun_args = internode.srun_args
        self.run_limit = max(5.0, internode.gang_timeout_s / RUN_SHARE)
        self.env = srun_env(environ, user)
        # root's steps run as the job's owner (decide/gang.step_user): only she may create a
        # step in her job; None: as whoever runs this (the user's side, or root's own job)
        self.as_user = (user.uid, user.gid, user.groups) if user is not None and user.uid != 0 else None

    def argv(self, job: Job) -> List[str]:
        return [self.srun, f"--jobid={self.job_id}", "--overlap", "--chdir=/tmp", f"--nodes={len(job.nodes)}",
                f"--nodelist={','.join(job.nodes)}", f"--ntasks-per-node={self.tasks_per_node}",
                # the job may hold fewer CPUs than ranks (one task a node): the ranks mostly wait
                # on GPUs and the fabric, so they may share them
                "--overcommit", "--kill-on-bad-exit=1", *self.srun_args, self.collective,
                "-b", str(self.nbytes), "-e", str(self.nbytes), "-g", "1"]

    def run(self, jobs: Sequence[Job]) -> List[JobResult]:
        left = self.deadline - time.monotonic()
        if left <= 1.0:
            raise GangError("gang_timeout_s spent before the node could be found")
        limit = min(left, self.run_limit)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            return list(pool.map(lambda job: self._one(job, limit), jobs))

    def _one(self, job: Job, limit: float) -> JobResult:
        from ..outside import run_bounded
        from ..read.nccltests import parse_nccl_tests

        ran = run_bounded(self.argv(job), limit, merge_stderr=True, env=self.env, term_grace_s=3.0,
                          cwd="/tmp" if self.as_user else None, as_user=self.as_user)
        if ran.error and not ran.timed_out:
            raise GangError(ran.error)
        text = ran.text()
        missing = _MISSING_RE.search(text)
        if missing or ran.returncode == 127:
            raise GangError(f"{missing.group(1) if missing else self.collective} is not installed on "
                            f"{','.join(job.nodes)}")
        run = parse_nccl_tests(text)
        srun_errors = _SRUN_ERROR_RE.findall(text)
        if not ran.timed_out and not run.rows and not run.hosts and srun_errors:
            # srun never started the collective (no step, a node Slurm lost): not a fabric figure
            raise GangError(f"srun could not run {self.collective} on {','.join(job.nodes)}: {srun_errors[0]}")
        try:
            return judge_gang_run(job, run, ran.returncode, ran.timed_out)
        except SetupProblem as exc:
            raise GangError(str(exc)) from exc
