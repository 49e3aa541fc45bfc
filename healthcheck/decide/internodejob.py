"""One fabric job (pure): the batch script it runs, and its output judged into a JobResult.

    script = job_script(spec, job)                     # /bin/sh text for sbatch
    result = judge_job_output(spec, job, sections, state, job_id)  # its output -> JobResult

The script runs, on the job's nodes, the collective once across all of them (srun with
`[internode] srun_args`, `tasks_per_node` ranks a node) and then, for each `[internode] rails` HCA,
ib_write_bw with --use_cuda between the first two nodes (a server on the second, the client on
the first).  Each runs under timeout(1) at `time_limit_s`, so a hang ends inside the job with
status 124 and is named; the job's --time (one minute more) is the backstop.  Markers the
script echoes (netmodel.MARK) split its output; read/internodejob.read_job_output reads it into
one JobSection per program, which judge_job_output judges.
"""

from __future__ import annotations

import shlex
from typing import Mapping, Optional, Sequence, Tuple

from ..netmodel import MARK, JobSection, NcclRun
from ..records import NamedTuple
from .sweep import Job, JobResult, RailResult, judge_collective

TIMEOUT_STATUSES = (124, 137)  # timeout(1): the limit passed (137: it had to SIGKILL)

class JobSpec(NamedTuple):
    collective: str  # the program: a path, or a name srun finds on the nodes' PATH
    collective_args: Tuple[str, ...]
    srun_args: Tuple[str, ...]
    tasks_per_node: int
    time_limit_s: float
    ib_write_bw: str = "ib_write_bw"
    rails: Tuple[str, ...] = ()


class SetupProblem(Exception):
    """The output shows the site's setup keeps it from testing its nodes, not a node fault: a
    program not installed (this class), or a collective that never crossed the network
    (NotSpanned).  The fabric sweep and the gang check stop, nothing drained, exit 3
    (commands/internodesweep.py and act/gangrun.py catch this class)."""


class NotSpanned(SetupProblem):
    """The collective's output does not prove it ran across the job's nodes: nccl-tests built
    without MPI, or srun without `--mpi=pmix`, runs each task as its own single-node job."""


SPAN_ADVICE = "build nccl-tests with MPI (make MPI=1) and run srun --mpi=pmix ([internode] srun_args)"


def span_problem(run: NcclRun, nodes: Sequence[str]) -> Optional[str]:
    """Why the collective's output does not prove it spanned all of `nodes`, or None.

    With MPI, rank 0 prints one `#  Rank N Group G Pid P on HOST device D` line per rank of the
    one communicator: each rank once, on as many hosts as the job has nodes.  Without it every
    task prints its own lines from rank 0, on its own host: a rank printed twice, or ranks on
    fewer hosts than nodes, is no collective over the network (two single-node `-g 8` runs
    read 235 GB/s; `-g 1` reads 0.0).  Host names are compared by count, not with Slurm's node
    names, which need not be the hosts' own (NodeHostname)."""
    if not run.rank_lines:
        return "it printed no rank lines (`#  Rank N ... on HOST`), so which hosts it ran on is not shown"
    if run.rank_lines > run.ranks:
        return (f"its ranks were numbered anew on each host ({run.rank_lines} rank lines for {run.ranks} "
                f"ranks on {', '.join(run.hosts)}): each task ran as its own single-node job")
    if len(run.hosts) < len(nodes):
        return f"ranks on {', '.join(run.hosts)} only ({run.ranks} ranks, {len(nodes)} nodes)"
    return None


def require_span(run: NcclRun, nodes: Sequence[str], problem: Optional[str], where: str = "") -> None:
    """Raises NotSpanned when the collective's output does not prove it spanned `nodes`.

    Ranks shown on too few hosts is the setup whatever the figure; no rank lines at all is,
    unless the run failed on its own (`problem`: a hang or an NCCL error before the header, a
    node's fault).  `where` ends the message (" (job 12)")."""
    span = span_problem(run, nodes)
    if span is not None and (run.rank_lines or problem is None):
        raise NotSpanned(f"the collective did not span {','.join(nodes)}: {span}; {SPAN_ADVICE}{where}")


def job_script(spec: JobSpec, job: Job, sweep_id: str) -> str:
    q = shlex.quote
    limit = f"{max(1, int(spec.time_limit_s))}"
    nodes = len(job.nodes)
    srun = " ".join(q(a) for a in spec.srun_args)
    lines = ["#!/bin/sh",
             f"# gpu-healthcheck fabric sweep {sweep_id} round {job.round} ({job.kind}): {' '.join(job.nodes)}",
             "export NCCL_DEBUG=${NCCL_DEBUG:-WARN}",
             f"echo '{MARK} collective begin'",
             f"timeout --kill-after=10 {limit} srun {srun} --nodes={nodes} --ntasks-per-node={spec.tasks_per_node} "
             f"{q(spec.collective)} {' '.join(q(a) for a in spec.collective_args)} 2>&1",
             f"echo \"{MARK} collective rc=$?\""]
    for rail in spec.rails if nodes >= 2 else ():
        ib = f"{q(spec.ib_write_bw)} -d {q(rail)} --use_cuda=0 --report_gbits -F"
        # rank 0 (the first node) is the client: it waits for the server on the second node
        inner = (f'if [ "$SLURM_PROCID" = 0 ]; then sleep 2; exec {ib} "$0"; else exec {ib}; fi')
        lines += [f"echo '{MARK} rail {rail} begin'",
                  f"timeout --kill-after=10 {limit} srun {srun} --nodes=2 --ntasks=2 --ntasks-per-node=1 "
                  f"--nodelist={q(','.join(job.nodes[:2]))} sh -c {q(inner)} {q(job.nodes[1])} 2>&1",
                  f"echo \"{MARK} rail {rail} rc=$?\""]
    lines.append(f"echo '{MARK} end'")
    return "\n".join(lines) + "\n"


def judge_job_output(spec: JobSpec, job: Job, sections: Mapping[str, JobSection], state: str,
                     job_id: Optional[str]) -> JobResult:
    """What the job printed (read/internodejob.read_job_output), and the state Slurm gave it, as a
    JobResult.

    Raises:
        SetupProblem: the collective or ib_write_bw is not installed where the job ran.
        NotSpanned: the collective's output does not prove it ran across the job's nodes.
    """
    section = sections.get("collective", JobSection(None))
    rc, collective = section.rc, section.nccl
    if section.missing is not None or rc == 127:
        raise SetupProblem(f"{section.missing or spec.collective} is not installed on {','.join(job.nodes)} "
                           f"(job {job_id}: {section.last_line})")
    killed = state not in ("COMPLETED", "FAILED", "")  # TIMEOUT (its --time), CANCELLED (ours), ...
    timed_out = rc in TIMEOUT_STATUSES or (rc is None and killed)
    busbw, problem = judge_collective(collective, rc, timed_out)
    if "collective" in sections:
        require_span(collective, job.nodes, problem, f" (job {job_id})")
    if rc is None and not killed and problem is None:
        problem = "the job ended before the collective finished"
    if "collective" not in sections:
        problem = f"the job printed nothing of ours (Slurm state {state or 'unknown'})"
    rails = []
    for rail in spec.rails if len(job.nodes) >= 2 else ():
        shown = sections.get(rail, JobSection(None))
        rail_rc, run = shown.rc, shown.ib
        if shown.missing is not None or rail_rc == 127:
            raise SetupProblem(f"{spec.ib_write_bw} is not installed on {','.join(job.nodes[:2])} "
                               f"(job {job_id}: {shown.last_line})")
        why = None
        if rail_rc in TIMEOUT_STATUSES or (rail_rc is None and rail in sections):
            why = "hang"
        elif run.avg_gbps is None:
            why = "no result" + (f" (exit status {rail_rc})" if rail_rc else "")
        rails.append(RailResult(job.nodes[0], rail, run.avg_gbps, why))
    return JobResult(job, busbw, problem, tuple(rails), job_id)

