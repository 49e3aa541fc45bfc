"""The one door to Slurm's job commands: sbatch, squeue and scancel, each by its configured path
(`[internode] sbatch`, `squeue`, `scancel`; else PATH) with a deadline (`sbatch_timeout_s`), run
through outside.run_bounded.

    jobs = SlurmJobs.from_config(config.internode, os.environ)
    job_id = jobs.submit(["-N2", "--exclusive", "-w", "gpu-a,gpu-b", "--time=11"], script_path)
    jobs.states([job_id])               # {"1234": "RUNNING"}; a job squeue no longer knows is absent
    jobs.named(JOB_NAME)                # [NamedJob(job id, state, user id, comment)] with that name
    jobs.cancel([job_id])

Arguments are lists, never a shell.  Every failure is a JobsError naming the command and what
it said (sbatch's "invalid partition specified", a missing binary, a deadline).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

from ..configsections import InternodeConfig
from ..model import DoorError
from ..records import NamedTuple
from ..tools import find_tool

# squeue's states of a job that has not ended yet (squeue(1) JOB STATE CODES)
LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                         "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                         "STAGE_OUT", "STOPPED"})
CHUNK = 500  # job ids per squeue/scancel call: keeps the command line short at 10,000 nodes


class NamedJob(NamedTuple):
    """A live job found by its name.  The name and the comment are anyone's to choose; the user
    id is slurmctld's own record of who submitted it (root's only when root did)."""

    job_id: str
    state: str
    user_id: Optional[int]  # None when squeue printed no number
    comment: str


class JobsError(DoorError):
    """An sbatch, squeue or scancel call that did not do what we asked."""

    def __init__(self, argv: Sequence[str], problem: str) -> None:
        super().__init__(f"{argv[0]}: {problem}")
        self.argv = list(argv)
        self.problem = problem


class SlurmJobs:
    def __init__(self, sbatch: str, squeue: str, scancel: str, timeout_s: float) -> None:
        self.sbatch, self.squeue, self.scancel = sbatch, squeue, scancel
        self.timeout_s = timeout_s

    @classmethod
    def from_config(cls, internode: InternodeConfig, environ: Mapping[str, str]) -> "SlurmJobs":
        return cls(find_tool("sbatch", internode.sbatch, environ), find_tool("squeue", internode.squeue, environ),
                   find_tool("scancel", internode.scancel, environ), internode.sbatch_timeout_s)

    def _run(self, argv: Sequence[str]) -> str:
        from ..outside import run_bounded

        ran = run_bounded(argv, self.timeout_s, cap_bytes=16 << 20, term_grace_s=2.0)
        if ran.error:
            raise JobsError(argv, ran.error)
        if ran.returncode != 0:
            lines = [line.strip() for line in ran.text("stderr").splitlines() if line.strip()]
            raise JobsError(argv, f"exit status {ran.returncode}: {lines[-1] if lines else ''}")
        return ran.text()

    def submit(self, args: Sequence[str], script: str) -> str:
        """sbatch --parsable ARGS SCRIPT -> the job id."""
        out = self._run([self.sbatch, "--parsable", *args, script]).strip()
        job_id = out.split(";")[0].strip()
        if not job_id.isdigit():
            raise JobsError([self.sbatch], f"no job id in its answer {out[:200]!r}")
        return job_id

    def states(self, job_ids: Sequence[str]) -> Dict[str, str]:
        """{job id: state} of the jobs squeue still knows (it forgets ended ones after MinJobAge)."""
        found: Dict[str, str] = {}
        for i in range(0, len(job_ids), CHUNK):
            chunk = ",".join(job_ids[i:i + CHUNK])
            text = self._run([self.squeue, "-h", "-t", "all", "-j", chunk, "-o", "%i|%T"])
            for line in text.splitlines():
                job, _, state = line.strip().partition("|")
                if job:
                    found[job] = state
        return found

    def named(self, name: str) -> List[NamedJob]:
        """Every job of any user with this name that has not ended (the comment last: it is
        free text, `|` included)."""
        text = self._run([self.squeue, "-h", "-n", name, "-o", "%i|%T|%U|%k"])
        rows = []
        for line in text.splitlines():
            parts = line.strip().split("|", 3)
            if len(parts) == 4 and parts[1] in LIVE_STATES:
                uid = parts[2].strip()
                rows.append(NamedJob(parts[0], parts[1], int(uid) if uid.isdigit() else None, parts[3]))
        return rows

    def cancel(self, job_ids: Sequence[str]) -> Optional[str]:
        """scancel the jobs; the error in words, or None."""
        problems = []
        for i in range(0, len(job_ids), CHUNK):
            try:
                self._run([self.scancel, *job_ids[i:i + CHUNK]])
            except JobsError as exc:
                problems.append(str(exc))
        return "; ".join(problems) or None
