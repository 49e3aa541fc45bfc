"""`gpu-healthcheck --gang`: at the top of a multi-node job, a short collective over the job's own
nodes; on failure, find the node inside the allocation, and (on the privileged side) drain it
and requeue the job so that it starts again without that node.

    srun --ntasks-per-node=1 gpu-healthcheck --gang      # in a batch script, as the job's user
    code = gang(GangRequest(act=False), config, os.environ, sys.stdout, sys.stderr)

Two sides, one code path (decide/gang.py plans, act/gangrun.py runs the collectives, this module
conducts and acts through act/, report/gang.py words its output):
- **The user's side** (`--gang`, the job's own tasks; rank 0 of the step works, the others
  return at once): measures and reports into the job's output; it changes nothing and needs no
  privilege.  Exit 0 passed (or one node), 2 the fabric failed, 3 it could not run.
- **The privileged side** (`--gang --act`, as root only: the SPANK plugin runs it from
  slurmstepd when rank 0 of a `--gang` step exits 2, or at the start of a batch job submitted
  with `--gpu-healthcheck=gang`, where plugstack.conf says allow_gang=yes).  It trusts nothing
  the job wrote or said: the job id comes from slurmstepd (the plugin sets SLURM_JOB_ID from
  S_JOB_ID), the nodes from slurmctld (`scontrol show job`), the programs from root's config,
  and every figure from its own srun steps (`srun --jobid=J --overlap`), which it starts as the
  job's owner, with the uid, gid and groups of slurmctld's record (decide/gang.step_user):
  slurmctld lets nobody else, root included, create a step in her job.  A user's exit status
  2, or any line she prints, only makes it measure again, at most once per job run on a node
  (`<state_dir>/gang-<job>-<restarts>`).  A node it finds bad is drained through the scontrol
  door (act/slurm.Slurm.drain_remote: the budget, ownership, report_only), the job's AdminComment gets the
  reason, and the job is requeued (`scontrol requeue`): a drained node is not chosen again.

Each collective runs at most gang_timeout_s / 5 (a hang fails its run and leaves time to find
the node), the whole check at most gang_timeout_s; a missing program, an srun that cannot
start a step, or a collective whose output does not prove it spanned the nodes (nccl-tests
built without MPI, srun without --mpi=pmix: decide/internodejob.span_problem, the fabric sweep's
rule) is "could not run" (exit 3, nothing drained, what to fix said), never a pass and never a
node's fault.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from ..act.gangrun import GangError, GangRunner, node_groups
from ..config import Config
from ..decide.exitcodes import CONFIG_ERROR, fabric_exit
from ..decide.gang import (FAILED, LINE, PASSED, SINGLE, GangPlan, GangResult, gang_reason, job_lines, parse_show_job,
                           step_user)
from ..decide.sweep import FABRIC_PREFIX, JobResult, Thresholds
from ..model import CRIT, ERR, NOTICE, DoorError, LogEvent, NodeAction, Outcome
from ..records import NamedTuple
from ..report.gang import document, drain_words
from ..text import iso_utc

if TYPE_CHECKING:
    import argparse

    from ..act.scontrol import Scontrol
    from ..decide.gang import GangJob


class GangRequest(NamedTuple):
    act: bool = False
    as_json: bool = False


def _job(ctl: "Scontrol", job_id: str) -> "GangJob":
    from ..read.slurmconf import expand_hostlist

    return parse_show_job(ctl.show_job(job_id), expand_hostlist)


def main(args: "argparse.Namespace", config: Config, started: float) -> int:
    """--gang [--act] [--json] from the command line."""
    import sys

    return gang(GangRequest(args.act, args.json), config, os.environ, sys.stdout, sys.stderr)


def gang(request: GangRequest, config: Config, environ: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    from ..act.scontrol import Scontrol, find_scontrol
    from ..tools import find_tool

    if environ.get("SLURM_PROCID", "0") != "0":
        return fabric_exit(False)  # one task of the step measures; the others have nothing to do
    job_id = environ.get("SLURM_JOB_ID", "")
    if request.act and os.geteuid() != 0:
        print("gpu-healthcheck: --gang --act is the privileged side (the SPANK plugin runs it as "
              "root); in a job, run --gang", file=err)
        return CONFIG_ERROR
    from ..decide.gang import valid_job_id

    if not valid_job_id(job_id):
        print(f"gpu-healthcheck: --gang runs inside a Slurm job: SLURM_JOB_ID is {job_id or 'unset'!r}",
              file=err)
        return CONFIG_ERROR
    ctl = Scontrol(find_scontrol(config.scontrol, environ), config.scontrol_timeout_s)
    internode = config.internode
    events: List[LogEvent] = []
    fields = {"GPU_HEALTHCHECK_MODE": "gang", "SLURM_JOB_ID": job_id}
    try:
        job = _job(ctl, job_id)
    except (DoorError, ValueError) as exc:
        print(f"gpu-healthcheck: --gang: cannot read job {job_id} from slurmctld: {exc}", file=err)
        return fabric_exit(False, could_run=False)
    if request.act and len(job.nodes) > 1 and not _first_remeasure(config, job_id, job.restarts, err):
        return fabric_exit(False)
    try:
        thresholds = _thresholds(ctl, config, job.nodes)
    except DoorError as exc:
        print(f"{LINE} job {job_id}: could not run: cannot read the nodes' GPU models for "
              f"[internode] floors: {exc}; nothing drained", file=out)
        if request.act:
            events.append(LogEvent("error", ERR, f"gang check of job {job_id} could not run: {exc}", fields))
            _record(config, job_id, None, {}, events, err, job.nodes)
        return fabric_exit(False, could_run=False)
    user = None
    if request.act:
        # slurmctld lets only the job's owner create a step in it: root's steps drop to her
        try:
            user = step_user(job, node_groups)
        except ValueError as exc:
            print(f"{LINE} job {job_id}: could not run: {exc}; nothing drained", file=out)
            events.append(LogEvent("error", ERR, f"gang check of job {job_id} could not run: {exc}", fields))
            _record(config, job_id, None, {}, events, err, job.nodes)
            return fabric_exit(False, could_run=False)
    started = time.monotonic()
    runner = GangRunner(find_tool("srun", internode.srun, environ), job_id, config, environ,
                        started + internode.gang_timeout_s, user)
    plan = GangPlan(job.nodes, thresholds, partners=internode.partners)
    try:
        jobs = plan.next_jobs()
        while jobs:
            plan.record(runner.run(jobs))
            jobs = plan.next_jobs()
    except GangError as exc:
        print(f"{LINE} job {job_id}: could not run: {exc}; nothing drained", file=out)
        if request.act:
            events.append(LogEvent("error", ERR, f"gang check of job {job_id} could not run: {exc}", fields))
            _record(config, job_id, None, {}, events, err, job.nodes, plan.recorded)
        return fabric_exit(False, could_run=False)
    result = plan.result()
    actions: Dict[str, NodeAction] = {}
    requeue = False
    if result.outcome == FAILED:
        actions, requeue = _drain_bad(ctl, config, result, job_id, request.act, events, fields)
    requeue = requeue and job.requeue
    if request.as_json:
        json.dump(document(result, job_id, actions, requeue, request.act), out, indent=2)
        out.write("\n")
    else:
        words = drain_words(actions, requeue, request.act, job.requeue)
        out.write("\n".join(job_lines(result, job_id, internode.gang_bytes, words)) + "\n")
    out.flush()
    if request.act:
        events.append(LogEvent("summary", CRIT if result.outcome == FAILED else NOTICE,
                               f"gang check of job {job_id} ({len(job.nodes)} nodes): {result.outcome}"
                               + (f"; bad: {','.join(n.node for n in result.bad)}" if result.bad else "")
                               + ("; requeuing the job" if requeue else ""), fields))
        _record(config, job_id, result, actions, events, err, job.nodes, plan.recorded)
    if requeue:
        # last: the requeue ends this job's steps, and this process with them
        try:
            ctl.requeue(job_id)
        except DoorError as exc:
            print(f"{LINE} cannot requeue job {job_id}: {exc}", file=out, flush=True)
            if config.journal:
                from ..act.journal import send_events

                send_events([LogEvent("error", ERR, f"cannot requeue job {job_id}: {exc}", fields)], "gang")
    return fabric_exit(result.outcome not in (PASSED, SINGLE))


def _thresholds(ctl: "Scontrol", config: Config, nodes: Sequence[str]) -> Thresholds:
    """[internode]'s thresholds, with each node's GPU model (its own median) and per-model floor from
    its Gres= (one `scontrol show nodes` of the job's nodes)."""
    from ..decide.sweep import fabric_thresholds
    from ..act.scontrol import parse_show_nodes

    shown = {n.name: n.gres for n in parse_show_nodes(ctl.show_nodes_raw(nodes))}
    return fabric_thresholds(config.internode, {n: shown.get(n) for n in nodes})


def _first_remeasure(config: Config, job_id: str, restarts: int, err: TextIO) -> bool:
    """At most one privileged re-measure per job run on this node: whatever a job prints or
    exits with, it cannot make root run steps in its allocation again and again."""
    os.makedirs(config.state_dir, mode=0o700, exist_ok=True)
    path = os.path.join(config.state_dir, f"gang-{job_id}-{restarts}")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        print(f"gpu-healthcheck: --gang --act: job {job_id} (run {restarts}) was measured on this node "
              f"already ({path}); not again", file=err)
        return False
    return True


def _drain_bad(ctl: "Scontrol", config: Config, result: GangResult, job_id: str, act: bool,
               events: List[LogEvent], fields: Dict[str, str]) -> Tuple[Dict[str, NodeAction], bool]:
    """Drain each bad node (with act: the privileged side) and name it in the job's
    AdminComment.  Returns ({node: what became of its drain}, whether to requeue: only once
    every bad node is out of service, else the job would start on it again)."""
    from ..act.slurm import Slurm

    slurm = Slurm(config, os.environ, ctl)
    actions: Dict[str, NodeAction] = {}
    comment = ""
    for node in result.bad:
        reason = gang_reason(node, config.internode.collective, job_id)
        actions[node.node] = slurm.drain_remote(node.node, reason, act, events, fields)
        comment = comment or f"{LINE} {node.node} {reason[len(FABRIC_PREFIX):]}"
    out_of_service = (Outcome.APPLIED, Outcome.ALREADY_OURS, Outcome.ADMIN_OWNED)
    if not act or not all(a.outcome in out_of_service for a in actions.values()):
        return actions, False
    try:
        ctl.set_admin_comment(job_id, comment)
    except DoorError as exc:
        events.append(LogEvent("error", ERR, f"cannot set job {job_id}'s AdminComment: {exc}", fields))
    return actions, True


def _record(config: Config, job_id: str, result: Optional[GangResult], actions: Dict[str, NodeAction],
            events: List[LogEvent], err: TextIO, nodes: Sequence[str] = (),
            runs: Sequence[JobResult] = ()) -> None:
    """The privileged side's history line, journal entries and metrics textfile; a failure is
    said, never a crash."""
    from ..checks.internode import check_fabric_gang
    from ..historyline import brief_events, encode, finding_item

    findings = [finding_item(f) for n in ((*result.bad, *result.others) if result else ())
                for f in check_fabric_gang(n)]
    drained = [n for n, a in actions.items() if a.outcome is Outcome.APPLIED]
    record = {"time": iso_utc(time.time()), "mode": "gang", "job_id": job_id,
              "verdict": "unknown" if result is None else "fail" if result.bad else
              "pass" if result.outcome in (PASSED, SINGLE) else "unknown",
              "findings": findings,
              "action": {"taken": "drain" if drained else "none",
                         "reason": next((e.message for e in events if e.kind == "drain"), None),
                         "dry_run": any(a.outcome is Outcome.REPORT_ONLY for a in actions.values())},
              "events": brief_events(events)}
    try:
        from ..act.history import append_line

        append_line(config.history_path(), encode(record), config.history_max_bytes)
    except OSError as exc:
        print(f"gpu-healthcheck: --gang: cannot write the history: {exc}", file=err)
    if config.metrics_file:
        from ..report.gang import FILE_NAME, metrics_text
        from ..act.metrics import textfile_beside, write_textfile

        path = textfile_beside(config.metrics_file, FILE_NAME)
        try:
            write_textfile(path, metrics_text(result, nodes, time.time(), runs))
        except OSError as exc:
            print(f"gpu-healthcheck: --gang: {exc}", file=err)
    if config.journal:
        from ..act.journal import send_events

        send_events(events, "gang")
