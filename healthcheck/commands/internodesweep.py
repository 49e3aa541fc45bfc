"""`gpu-healthcheck --internode-sweep`: find the bad node among many through Slurm jobs, and drain
it with --act.

    code = internode_sweep(SweepRequest(nodes="gpu-[01-64]", partition=None, act=True, as_json=False),
                        config, os.environ, sys.stdout, sys.stderr)
    code = main(args, config, started)                   # from the command line (cli.py)

On a submit host, as root or SlurmUser.  The candidates are the nodes `scontrol show nodes` shows
plainly idle (no DRAIN, DOWN, RESERVED, MAINT, REBOOT or other flag; with `[internode] reservation`
the idle nodes of that reservation), not claimed by the repair loop, with GPUs, in the
partition (decide/sweepnodes.py), decide/sweep.py plans the rounds and act/sweeprun.py
runs them as exclusive jobs.
A bad node is drained through the one scontrol door, within `drain.max_fraction` (decided
before and held after, as every drain of ours), never over an admin's reason, and not at all
under `drain.report_only` or without --act.  Nodes the repair loop rebooted for their fabric
and marked for a re-test are held in reservations of their own, resumed, and re-tested in the
partner rounds (act/fabricretest.py), with --act only.  The sweep is recorded in the journal, in the
history file and in a node_exporter textfile beside `metrics_file` (`gpu_healthcheck_fabric.prom`).

Exit status: 0 no bad node, 2 a bad node was found (drained with --act), 3 the sweep could not
run (another sweep is running, no candidates, sbatch refused every job, a program is missing,
scontrol failed, SIGTERM stopped it: its jobs are cancelled); then nothing is drained.  With
`[internode] floors` each node's GPU model (its Gres= type) gives its floor (decide/internodefloor.py).
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, TextIO

from ..act.fabricretest import Retester
from ..act.scontrol import parse_show_nodes
from ..act.sweeprun import JOB_NAME, Setup, SlurmRunner, SweepError
from ..config import Config
from ..decide.exitcodes import CONFIG_ERROR, fabric_exit
from ..decide.internodejob import JobSpec, SetupProblem
from ..decide.sweep import (BAD, UNKNOWN, NodeOutcome, SweepAction, SweepOutcome, SweepPlanner, SweepReport,
                             Thresholds, fabric_reason)
from ..decide.sweepnodes import candidates, retest_candidates, retest_refused
from ..model import CRIT, ERR, NOTICE, SLURMCTLD_ADVICE, DoorError, LogEvent, Terminated, UsageError
from ..records import NamedTuple

if TYPE_CHECKING:
    import argparse

    from ..decide.verdict import NodeState

_COMMENT_ID_RE = re.compile(r"gpu-healthcheck sweep=(\S+)")


class SweepRequest(NamedTuple):
    nodes: Optional[str] = None  # --nodes HOSTLIST
    partition: Optional[str] = None  # --partition (else [internode] partition)
    act: bool = False
    as_json: bool = False


class _SweepLock:
    """One sweep at a time on this host: flock on <state_dir>/fabric-sweep.lock, which holds the
    running sweep's id (so the second can name it)."""

    def __init__(self, state_dir: str) -> None:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        self.path = os.path.join(state_dir, "fabric-sweep.lock")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)

    def take(self, sweep_id: str) -> Optional[str]:
        """None when ours; else the id of the sweep that holds it."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(self.fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, sweep_id.encode() + b"\n", 0)
        return None

    def close(self) -> None:
        os.close(self.fd)


def _spec(config: Config) -> JobSpec:
    internode = config.internode
    collective = (os.path.join(internode.nccl_tests, internode.collective) if internode.nccl_tests
                  else internode.collective)
    return JobSpec(collective, internode.collective_args, internode.srun_args, internode.tasks_per_node,
                   internode.time_limit_s, internode.ib_write_bw or "ib_write_bw", internode.rails)


def usage(args: "argparse.Namespace") -> None:
    if args.gpus or args.level:
        raise UsageError("--internode-sweep takes --nodes, --partition, --act, --json and --config")


def main(args: "argparse.Namespace", config: Config, started: float) -> int:
    """--internode-sweep from the command line.  SIGTERM (the idle-sweep timer's deadline, systemd
    stopping it, an admin's kill) raises Terminated (cli.py's guard): the sweep stops as one
    that cannot go on does, cancelling its jobs and draining nothing.  (A Slurm call cut short
    may leave one job unknown to us; its --time ends it.)"""
    import sys

    request = SweepRequest(args.nodes, args.partition, args.act, args.json)
    return internode_sweep(request, config, os.environ, sys.stdout, sys.stderr)


def internode_sweep(request: SweepRequest, config: Config, environ: Mapping[str, str],
                 out: TextIO, err: TextIO) -> int:
    from ..act.scontrol import Scontrol, find_scontrol
    from ..act.slurmjobs import SlurmJobs
    from ..read.gres import GresConfError, expand_hostlist
    from ..report.sweep import write_report

    host = os.uname().nodename.split(".")[0]
    sweep_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{host}-{os.getpid()}"
    try:
        wanted = expand_hostlist(request.nodes) if request.nodes else None
    except GresConfError as exc:
        print(f"gpu-healthcheck: --internode-sweep --nodes: {exc}", file=err)
        return CONFIG_ERROR
    internode = config.internode
    partition = request.partition or internode.partition
    ctl = Scontrol(find_scontrol(config.scontrol, environ), config.scontrol_timeout_s)
    door = SlurmJobs.from_config(internode, environ)
    lock = _SweepLock(config.state_dir)
    events: List[LogEvent] = []
    retester: Optional[Retester] = None
    try:
        holder = lock.take(sweep_id)
        other = holder or _running_sweep(door, sweep_id)
        if other:
            print(f"gpu-healthcheck: --internode-sweep: another internode sweep is running: {other}; "
                  f"not starting a second", file=err)
            return fabric_exit(False, could_run=False)
        reservation = None
        if internode.reservation:
            reservation = expand_hostlist(_reservation_nodes(ctl, internode.reservation))
        out_dir = os.path.join(internode.output_dir or os.path.join(config.state_dir, "fabric"), sweep_id)
        retester = Retester(ctl, config, sweep_id, internode.collective, events, out_dir)
        acting = request.act and not config.drain.report_only
        shown = ctl.show_nodes_raw()
        if acting and retester.recover(parse_show_nodes(shown)):
            shown = ctl.show_nodes_raw()
        nodes = parse_show_nodes(shown)
        chosen, why_not = candidates(nodes, wanted, partition, reservation)
        retest, waiting = retest_candidates(nodes, wanted, partition)
        why_not.update(waiting)
        if len(chosen) < 2:
            print(f"gpu-healthcheck: --internode-sweep: {len(chosen)} idle candidate node(s), a sweep "
                  f"needs 2; " + "; ".join(f"{n}: {w}" for n, w in why_not.items()), file=err)
            return fabric_exit(False, could_run=False)
        for this in retest:
            why_not.pop(this.name, None)  # not idle (IDLE+DRAIN): said better below
            why = retest_refused(request.act, config.drain.report_only, internode.reservation) or retester.hold(this)
            if why:
                why_not[this.name] = why
        os.makedirs(out_dir, mode=0o755, exist_ok=True)
        setup = Setup(sweep_id, out_dir, partition, internode.reservation,
                      queue_grace_s=max(60.0, internode.time_limit_s))
        runner = SlurmRunner(door, _spec(config), setup)
        runner.reservations = retester.reservations
        planner = SweepPlanner(chosen, _thresholds(config, nodes),
                               partners=internode.partners, group_size=internode.group_size,
                               first=_last_unknown(config.state_dir), retest=list(retester.held))
        try:
            while True:
                jobs = planner.next_jobs()
                if not jobs:
                    break
                planner.record(runner.run(jobs))
        except (SweepError, SetupProblem, Terminated) as exc:
            runner.cancel_all()
            retested = tuple(retester.held)
            report = SweepReport(sweep_id, None, retester.abandon(f"the sweep stopped: {exc}"), why_not,
                                 error=str(exc), retested=retested)
            events.append(LogEvent("error", ERR, f"fabric sweep {sweep_id} stopped: {exc}; nothing drained",
                                   {"GPU_HEALTHCHECK_SWEEP": sweep_id}))
            write_report(report, request.as_json, out)
            print(f"gpu-healthcheck: --internode-sweep: {exc}; nothing drained", file=err)
            return fabric_exit(False, could_run=False)
        outcome = planner.outcome()
        _keep_unknown(config.state_dir, sweep_id, [n for n in outcome.of(UNKNOWN) if n not in planner.retest], err)
        actions = {}
        for node in outcome.nodes:
            if node.node in retester.held:
                actions[node.node] = retester.finish(node, outcome.results)
            elif node.outcome == BAD:
                actions[node.node] = _drain(ctl, node, internode.collective, config, request.act, events, sweep_id)
        report = SweepReport(sweep_id, outcome, actions, why_not, retested=tuple(planner.retest))
        events.append(_summary_event(report))
        write_report(report, request.as_json, out)
        _record(config, report, events, err)
        return fabric_exit(any(n.outcome == BAD for n in outcome.nodes))
    except (DoorError, GresConfError, OSError, SweepError, Terminated) as exc:
        advice = f"; {SLURMCTLD_ADVICE}" if isinstance(exc, DoorError) else ""
        print(f"gpu-healthcheck: --internode-sweep: {exc}; nothing drained{advice}", file=err)
        return fabric_exit(False, could_run=False)
    finally:
        if retester is not None and retester.held:  # stopped before they were judged
            retester.abandon("the sweep stopped before judging it")
        lock.close()
        if events and config.journal:
            from ..act.journal import send_events

            send_events(events, "fabric-sweep")


def _thresholds(config: Config, nodes: Sequence["NodeState"]) -> Thresholds:
    """[internode]'s thresholds, with each node's GPU model (its own median) and per-model floor
    (`[internode] floors`) from its Gres=."""
    from ..decide.sweep import fabric_thresholds

    return fabric_thresholds(config.internode, {n.name: n.gres for n in nodes})


UNKNOWN_FILE = "fabric-unknown.json"


def _last_unknown(state_dir: str) -> List[str]:
    """The nodes the last sweep could not tell about (tested first now); [] when none or the
    file is unreadable (a sweep without the hint is still a whole sweep)."""
    import json

    try:
        with open(os.path.join(state_dir, UNKNOWN_FILE)) as handle:
            nodes = json.load(handle).get("nodes", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in nodes if isinstance(n, str)] if isinstance(nodes, list) else []


def _keep_unknown(state_dir: str, sweep_id: str, nodes: Sequence[str], err: TextIO) -> None:
    import json

    from ..safefile import atomic_write

    try:
        atomic_write(state_dir, UNKNOWN_FILE, json.dumps({"sweep": sweep_id, "nodes": list(nodes)}).encode())
    except OSError as exc:
        print(f"gpu-healthcheck: --internode-sweep: cannot keep the unknown nodes for the next sweep "
              f"in {state_dir}: {exc}", file=err)


def _running_sweep(door: "object", sweep_id: str) -> Optional[str]:
    """Another sweep's id, from the live jobs named gpu-healthcheck-fabric (a sweep on another
    submit host holds no lock of ours).  Any user may name a job so, and write its comment: a job
    is a sweep's only when slurmctld says root, or the user running this sweep, submitted it, so
    a user's held job of that name never stops the sweeps."""
    import os

    ours = {0, os.geteuid()}
    for job in door.named(JOB_NAME):  # type: ignore[attr-defined]
        if job.user_id not in ours:
            continue
        m = _COMMENT_ID_RE.search(job.comment)
        other = m.group(1) if m else "unknown"
        if other != sweep_id:
            return f"{other} (its job {job.job_id} is {job.state})"
    return None


def _reservation_nodes(ctl: "object", name: str) -> str:
    text = ctl._run(["show", "reservation", name])  # type: ignore[attr-defined]
    m = re.search(r"\sNodes=(\S+)", " " + text)
    if m is None:
        raise SweepError(f"reservation {name}: scontrol shows no Nodes=")
    return m.group(1)


def _drain(ctl: "object", node: NodeOutcome, collective: str, config: Config, act: bool,
           events: List[LogEvent], sweep_id: str) -> SweepAction:
    """Drain one bad node through the scontrol door, as every drain of ours
    (act/slurm.Slurm.drain_remote: within the budget, decided then held, never over an admin's
    reason; report_only and a run without --act only say it).  Returns what became of it: the
    remote drain's NodeAction, with the reason."""
    from ..act.slurm import Slurm

    action = Slurm(config, os.environ, ctl).drain_remote(
        node.node, fabric_reason(node, collective), act, events,
        {"GPU_HEALTHCHECK_MODE": "fabric-sweep", "GPU_HEALTHCHECK_SWEEP": sweep_id})
    return SweepAction(action.reason, drain=action)


def _summary_event(report: SweepReport) -> LogEvent:
    outcome = report.outcome
    assert outcome is not None
    bad = outcome.of(BAD)
    retested = [f"{n} {report.actions[n].said if n in report.actions else '-'}" for n in report.retested]
    text = (f"fabric sweep {report.sweep_id}: {len(outcome.nodes)} nodes, {outcome.rounds} rounds, "
            f"{outcome.jobs} jobs, median busbw {outcome.median_gbps or 0:.1f} GB/s{_per_model(outcome)}; "
            f"bad: {','.join(bad) or 'none'}" + (f"; re-tested: {', '.join(retested)}" if retested else ""))
    return LogEvent("summary", CRIT if bad else NOTICE, text, {"GPU_HEALTHCHECK_SWEEP": report.sweep_id,
                                                              "GPU_HEALTHCHECK_MODE": "fabric-sweep"})


def _per_model(outcome: "SweepOutcome") -> str:
    """Each GPU model's own median, when the sweep had several: " (a100 200.0, h100 380.0)"."""
    by_model = outcome.medians.by_model
    if len(by_model) < 2:
        return ""
    return " (" + ", ".join(f"{model or 'untyped'} {figure:.1f}" for model, figure in by_model) + ")"


def _record(config: Config, report: SweepReport, events: List[LogEvent], err: TextIO) -> None:
    """History line and metrics textfile; a failure is said on stderr, never a crash."""
    from ..report.sweep import history_record, metrics_text

    try:
        from ..act.history import append_line
        from ..historyline import encode

        append_line(config.history_path(), encode(history_record(report, events, time.time())),
                    config.history_max_bytes)
    except OSError as exc:
        print(f"gpu-healthcheck: --internode-sweep: cannot write the history: {exc}", file=err)
    if config.metrics_file:
        from ..act.metrics import textfile_beside, write_textfile

        path = textfile_beside(config.metrics_file, "gpu_healthcheck_fabric.prom")
        try:
            write_textfile(path, metrics_text(report, time.time()))
        except OSError as exc:
            print(f"gpu-healthcheck: --internode-sweep: cannot write {path}: {exc}", file=err)
