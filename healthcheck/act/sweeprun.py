"""Run one round of the fabric sweep as Slurm jobs: submit every job at once, wait for them
all, read what each printed.

    runner = SlurmRunner(jobs_door, spec, setup)
    results = runner.run(planner.next_jobs())   # one JobResult per job

Each job is `sbatch -N<n> --exclusive -w A,B --time=<minutes> [-p P] [--reservation R]` of a
script decide/internodejob.py writes, named gpu-healthcheck-fabric with the sweep's id in its
Comment (so a second sweep can tell ours).  A job sbatch refuses for its nodes (Slurm cannot
place it) is skipped and named; when every job of the round is refused (a partition that
cannot run them) the round raises SweepError and nothing is judged.  A job still queued past
the round's deadline is cancelled and skipped; one still running past it is cancelled and
counts as a hang.
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable, Dict, List, Optional, Sequence

from ..decide.internodejob import JobSpec, judge_job_output, job_script
from ..read.internodejob import read_job_output
from ..decide.sweep import Job, JobResult
from ..records import NamedTuple
from .slurmjobs import LIVE_STATES, JobsError, SlurmJobs

JOB_NAME = "gpu-healthcheck-fabric"
OUTPUT_CAP = 8 << 20  # bytes of a job's output read: a log flood is not judged past this


class SweepError(Exception):
    """The sweep cannot go on: nothing it found so far is acted on."""


class Setup(NamedTuple):
    sweep_id: str
    out_dir: str  # this sweep's folder: scripts and outputs
    partition: Optional[str]
    reservation: Optional[str]
    queue_grace_s: float = 300.0  # how long a job may wait for its nodes before it is skipped


def minutes(time_limit_s: float) -> int:
    """The jobs' --time: the collective's limit in whole minutes, plus one (the backstop)."""
    return int(math.ceil(time_limit_s / 60.0)) + 1


def sbatch_args(setup: Setup, spec: JobSpec, job: Job, output: str,
                reservation: Optional[str] = None) -> List[str]:
    """`reservation`: the re-test reservation of a node of the job (act/fabricretest.py), in
    place of `[internode] reservation` (a sweep inside one re-tests no node)."""
    args = ["-J", JOB_NAME, f"--comment=gpu-healthcheck sweep={setup.sweep_id}",
            f"--nodes={len(job.nodes)}", "--exclusive", f"--nodelist={','.join(job.nodes)}",
            f"--time={minutes(spec.time_limit_s)}", f"--output={output}", "--no-requeue",
            f"--chdir={setup.out_dir}"]
    if setup.partition:
        args.append(f"--partition={setup.partition}")
    if reservation or setup.reservation:
        args.append(f"--reservation={reservation or setup.reservation}")
    return args


class SlurmRunner:
    def __init__(self, door: SlurmJobs, spec: JobSpec, setup: Setup,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.door, self.spec, self.setup = door, spec, setup
        self.clock, self.sleep = clock, sleep
        self.submitted: List[str] = []  # every job id of the sweep (cancelled if it is stopped)
        self.reservations: Dict[str, str] = {}  # node -> the reservation its jobs must ask for

    def run(self, jobs: Sequence[Job]) -> List[JobResult]:
        placed: Dict[str, Job] = {}
        outputs: Dict[str, str] = {}
        results: List[JobResult] = []
        refusals: List[str] = []
        for n, job in enumerate(jobs):
            stem = os.path.join(self.setup.out_dir, f"r{job.round:02d}-{n:05d}")
            with open(stem + ".sh", "w") as script:
                script.write(job_script(self.spec, job, self.setup.sweep_id))
            try:
                reservation = next((self.reservations[n] for n in job.nodes if n in self.reservations), None)
                job_id = self.door.submit(sbatch_args(self.setup, self.spec, job, stem + ".out", reservation),
                                          stem + ".sh")
            except JobsError as exc:
                refusals.append(exc.problem)
                results.append(JobResult(job, skipped=f"sbatch refused the job: {exc.problem}"))
                continue
            self.submitted.append(job_id)
            placed[job_id] = job
            outputs[job_id] = stem + ".out"
        if jobs and not placed:
            raise SweepError(f"sbatch refused every job of round {jobs[0].round} "
                             f"({len(jobs)} of {len(jobs)}): {refusals[0]}")
        states = self._wait(list(placed))
        for job_id, job in placed.items():
            state = states.get(job_id, "")
            if state == "PENDING":
                results.append(JobResult(job, job_id=job_id, skipped=(
                    f"job {job_id} did not start within {self.setup.queue_grace_s:g} s "
                    f"(its nodes were taken); cancelled")))
                continue
            results.append(judge_job_output(self.spec, job, read_job_output(_read(outputs[job_id])), state,
                                                job_id))
        order = {job: i for i, job in enumerate(jobs)}
        return sorted(results, key=lambda r: order[r.job])

    def _wait(self, job_ids: List[str]) -> Dict[str, str]:
        """Poll until every job has ended; past the deadline, cancel what is left.  Returns
        {job id: its last state}: "PENDING" for one that never started, "CANCELLED" for one we
        ended, the final state (or "" once squeue forgot it) for the rest."""
        limit = minutes(self.spec.time_limit_s) * 60.0
        deadline = self.clock() + limit + self.setup.queue_grace_s
        last: Dict[str, str] = {}
        interval = 1.0 if len(job_ids) <= 100 else 5.0
        started: Dict[str, float] = {}
        while True:
            try:
                now_states = self.door.states(job_ids)
            except JobsError as exc:
                raise SweepError(f"cannot follow the sweep's jobs: {exc}") from None
            now = self.clock()
            for job_id in job_ids:
                state = now_states.get(job_id, last.get(job_id, ""))
                if job_id not in now_states and last.get(job_id) in LIVE_STATES:
                    state = ""  # forgotten by squeue (MinJobAge): it ended
                last[job_id] = state
                if state == "RUNNING":
                    started.setdefault(job_id, now)
            live = [j for j in job_ids if last[j] in LIVE_STATES]
            if not live:
                return last
            overdue = [j for j in live if (last[j] == "PENDING" and now > deadline) or
                       (j in started and now - started[j] > limit + 30.0)]
            if overdue or now > deadline + limit:
                ending = overdue or live
                self.door.cancel(ending)
                for job_id in ending:
                    last[job_id] = "PENDING" if last[job_id] == "PENDING" else "CANCELLED"
                job_ids = [j for j in job_ids if j not in ending]
                if not job_ids:
                    return last
            self.sleep(interval)

    def cancel_all(self) -> Optional[str]:
        return self.door.cancel(self.submitted) if self.submitted else None


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(OUTPUT_CAP).decode("utf-8", "replace")
    except OSError:
        return ""  # the job never wrote (killed before it started): judged as no output
