"""`gpu-healthcheck --node | --prolog | --epilog | --repair`: one run of the node pipeline, read
the node, judge it, act on it, report it, in that order.

    outcome = run(RunRequest(mode=Mode.PROLOG, environ=os.environ), config)
    outcome.exit_code, outcome.report, outcome.events
    code = execute(Mode.NODE, args, config, started)    # the command line's run: prints, emits

commands/prolog.py (the job's level) and commands/repair.py call execute() for their modes.

Every line here calls into one room and decides nothing itself:
- healthcheck.read: the node snapshot (NVML, sysfs, kernel log, CUDA probes, the Slurm
  environment), with the state store's and slurmctld's answers handed in;
- healthcheck.decide: the findings, the verdict, the drain reason, the budget, the exit code;
- healthcheck.act: the drain, the pending drain, the resume, the Xid acknowledgements, the
  baseline (the only code that changes the node or the cluster);
- healthcheck.report: the JSON document and the log events.
execute() prints the report and hands the events to the sinks (act.sinks).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from ..act.slurm import Slurm, report_only
from ..act.state import StateStore, read_acks, read_known_gpus, remember_gpus
from ..config import Config
from ..decide.budget import fit_to_budget, probe_cap_s, probe_timeout, run_budget_s
from ..decide.exitcodes import CONFIG_ERROR, run_exit
from ..decide.gpumap import map_job_gpus
from ..decide.judge import judge
from ..decide.plan import Step, next_step, plan_run
from ..decide.verdict import drain_reason
from ..model import CRIT, ERR, WARNING, LogEvent, NodeAction, NodeSnapshot, RunOutcome, RunRequest
from ..read.node import NodeInputs, read_node
from ..report.document import build_report, finding_events
from ..staterecords import XidAck

if TYPE_CHECKING:
    import argparse

    from ..model import Mode


def run(request: RunRequest, config: Config, node_name: Optional[str] = None,
        slurm: Optional[Slurm] = None) -> RunOutcome:
    """`slurm`: the run's door to slurmctld (default: scontrol as the config says; the reader-
    layer tests hand in tests/lib/slurmdoor.py's)."""
    started, t0 = time.time(), time.monotonic()
    mode = request.mode
    events: List[LogEvent] = [LogEvent("error", CRIT, w) for w in config.warnings]
    environ = request.environ
    host = os.uname().nodename.split(".")[0]
    node = node_name or config.node_name or environ.get("SLURMD_NODENAME") or host
    store = StateStore(config.state_dir)
    plan = plan_run(request, config)
    # Slurm kills HealthCheckProgram after 60 s, the SPANK plugin a prolog at its deadline, and
    # a killed run drains nothing
    budget_s, budget_problem = run_budget_s(plan.health_check, config, environ)
    if budget_problem:
        events.append(LogEvent("error", WARNING, budget_problem))
    if budget_s is not None:
        config = fit_to_budget(config, budget_s)
    slurm = slurm or Slurm(config, environ)
    probe_cap: Optional[Callable[[], float]] = None
    ends_at: Optional[float] = None
    if budget_s is not None:
        run_ends = ends_at = (request.started_monotonic or t0) + budget_s
        probe_cap = lambda: probe_cap_s(run_ends, time.monotonic(), slurm.unanswered(), config)  # noqa: E731
    if plan.changes_node:
        slurm.apply_pending(store, node, events)
    # an admin's resume of our drain deals with the Xids up to where it was last seen drained
    resumed_upto = slurm.admin_resumed(store, node, events) if plan.health_check and plan.changes_node else None

    fitted = config

    def probe_limits(level: str, largest_mib: int) -> Tuple[Optional[float], float]:
        cap = probe_cap() if probe_cap is not None else None
        # without a cap probe_timeout always has a deadline: the probe's own
        return (probe_timeout(fitted, level, largest_mib, cap), probe_timeout(fitted, level, largest_mib) or 0.0)

    inputs = NodeInputs(probe_limits=probe_limits, map_gpus=map_job_gpus, baseline=store.read_baseline,
                        listpids=slurm.listpids,
                        known=lambda: read_known_gpus(store))
    snapshot, selected = _read(request, config, host, node, inputs, events, store)
    if plan.health_check and plan.changes_node:  # how a GPU that vanishes later is named
        remember_gpus(store, snapshot, events)
    if plan.health_check and plan.changes_node:
        from ..act.xidack import acknowledge_resets, acknowledge_xids

        snapshot = (acknowledge_xids(snapshot, config, store, events, None, by="resume", upto=resumed_upto)
                    if resumed_upto else acknowledge_resets(snapshot, config, store, node, events))
    findings, crashes, verdict = judge(snapshot, config, mode, request.level, selected, plan.only_gpus)
    job_id = snapshot.job.job_id if snapshot.job else None
    reason = drain_reason(findings, snapshot.gpus, mode, job_id)
    base_fields = {"GPU_HEALTHCHECK_MODE": mode.value, "SLURMD_NODENAME": node}
    if job_id:
        base_fields["SLURM_JOB_ID"] = job_id
    if snapshot.job and snapshot.job.sluid:  # journalctl SLURM_JOB_SLUID=..., unique where ids are reused
        base_fields["SLURM_JOB_SLUID"] = snapshot.job.sluid

    if job_id and plan.records_baseline(job_id):
        from ..act.state import record_baseline

        position = record_baseline(store, snapshot, job_id, config.kernel_log, events, config.kernel_log_marker)
        snapshot = snapshot._replace(kernel_log=snapshot.kernel_log._replace(end=position))

    step = next_step(plan, reason, verdict)
    action = NodeAction("none", dry_run=not plan.acting and reason is not None, reason=reason)
    if step == Step.REPORT_ONLY:
        action = report_only(node, reason, mode, events, base_fields)
    elif step == Step.DRAIN and reason:
        from ..decide.levels import found_at
        from ..decide.verdict import draining
        from ..decide.xidack import volatile_ecc

        checks = tuple(dict.fromkeys(f.check for f in draining(findings)))
        action = slurm.drain(store, node, reason, mode, job_id, events, base_fields,
                             counters=volatile_ecc(snapshot.gpus),
                             found=(found_at(checks, request.level), checks))
    elif step == Step.RESUME:
        action = slurm.maybe_resume(store, node, findings, snapshot, events, base_fields,
                                    request.level, partial=request.gpus is not None)

    unreached: Optional[str] = None  # --repair: why slurmctld did not answer (nothing repaired)
    if plan.health_check and (request.repair or config.repair.enabled) and request.gpus is None:
        from ..act.repair import Repairer

        repairer = Repairer(config, slurm, store, node, events, base_fields, ends_at)
        started_repair = repairer.start(snapshot, findings, plan.report_only, request.level)
        unreached = repairer.unreached if request.repair else None
        if started_repair:
            # Prove the repaired GPUs healthy: every GPU checked at the level that found the
            # fault (the deep tests and dcgmi diag for a deep drain), at least full, then
            # today's resume (the drain's own context judged too)
            level = repairer.validation_level()
            snapshot, selected = _read(request._replace(level=level), config, host, node, inputs, events, store)
            from ..act.xidack import acknowledge_resets

            snapshot = acknowledge_resets(snapshot, config, store, node, events, repairer.reset_at)
            findings, crashes, verdict = judge(snapshot, config, mode, level, selected, None)
            action = repairer.finish(snapshot, findings, slurm.maybe_resume(
                store, node, findings, snapshot, events, base_fields, level, partial=False))
            reason = None if action.taken == "resume" else action.reason

    if job_id and plan.consumes_baseline(job_id, snapshot.baseline is not None):
        store.remove_baseline(job_id)

    # --repair that could not reach slurmctld repaired nothing: could not do what was asked
    exit_code = run_exit(mode, verdict, reason, action) if unreached is None else CONFIG_ERROR
    report = build_report(snapshot, findings, verdict, action, mode, job_id, node, started,
                          time.monotonic() - t0, request.level, plan.only_gpus)
    if unreached is not None:
        from ..model import SLURMCTLD_ADVICE

        report["repair_error"] = (f"--repair could not run: slurmctld did not answer ({unreached}); "
                                  f"nothing repaired; {SLURMCTLD_ADVICE}")
    events += finding_events(findings, crashes, snapshot, mode, node, verdict, action, base_fields)
    # every entry findable by job and node (journalctl SLURM_JOB_ID=...), whoever made it
    events = [e._replace(fields={**base_fields, **{k: v for k, v in e.fields.items() if v}})
              for e in events]
    return RunOutcome(exit_code, report, events, snapshot, findings, crashes)



def _read(request: RunRequest, config: Config, host: str, node: str, inputs: NodeInputs,
          events: List[LogEvent], store: StateStore) -> Tuple[NodeSnapshot, Optional[Tuple[int, ...]]]:
    """The node as read (read_node), with --node's Xids an admin acknowledged left out."""
    from ..model import Mode

    snapshot, selected = read_node(request, config, host, node, inputs, events)
    if request.mode is Mode.NODE and snapshot.kernel_log is not None:
        snapshot = without_acknowledged(snapshot, config, read_acks(store), events)
    return snapshot, selected


def without_acknowledged(snapshot: NodeSnapshot, config: Config,
                         acks_read: Tuple[Dict[str, XidAck], Optional[str]],
                         events: List[LogEvent]) -> NodeSnapshot:
    """`--node` and `--ack`: Xids an admin has dealt with (XidAck, decide/xidack.py) no longer
    count; what the kernel logged after each acknowledgement (read/kernlog.py) does.  The
    epilog needs none of this: its window is the job's own."""
    from ..decide.xidack import live_acks, position_key, unacknowledged, window_after
    from ..read.kernlog import current_boot, read_kernel_log

    stored, error = acks_read
    if error:
        events.append(LogEvent("error", ERR, f"{error}; every Xid since boot counts"))
    boot = current_boot()
    acks = live_acks(stored, boot)
    counts = tuple(sorted((pci, a.count) for pci, a in stored.items()))
    log = snapshot.kernel_log
    if not acks or log.error:
        return snapshot._replace(xid_ack_counts=counts)
    after = {}
    for ack in acks.values():
        key = position_key(ack.position)
        if key not in after:
            later = read_kernel_log(config.kernel_log, window_after(ack.position, boot.boot_id))
            after[key] = later.events
    return snapshot._replace(kernel_log=log._replace(events=unacknowledged(log.events, acks, after)),
                             xid_ack_counts=counts)


def execute(mode: "Mode", args: "argparse.Namespace", config: Config, started: float,
            level: Optional[str] = None, refused: Optional[str] = None) -> int:
    """One run of `mode` from the command line: the pipeline, then its report printed (the JSON
    document, or --node's table) and its events handed to the sinks.  `level`: the level to
    run at (default: --level, else quick); `refused`: why the job's own level ask is not
    honoured (logged as a warning)."""
    from ..act.sinks import emit
    from ..model import Mode, RunRequest

    gpus = parse_gpus(args.gpus) if args.gpus else None
    request = RunRequest(mode=mode, environ=os.environ, level=level or args.level or "quick",
                         act=args.act, gpus=gpus, started_monotonic=started, repair=args.repair)
    outcome = run(request, config)
    if config.refused:  # the run was report_only (config.load_config): it acted on nothing
        outcome.report["config_refused"] = config.refused
    if refused:
        job = os.environ.get("SLURM_JOB_ID")
        outcome.events.append(LogEvent("error", WARNING, refused, {
            "GPU_HEALTHCHECK_MODE": mode.value, **({"SLURM_JOB_ID": job} if job else {})}))
    try:
        if args.json:
            from ..report.table import write_json

            write_json(outcome.report, sys.stdout)
        elif mode is Mode.NODE:
            from ..report.table import write_table

            write_table(outcome.report, sys.stdout, colour=sys.stdout.isatty())
        if config.refused and not args.json:
            from ..config import refusal_line

            print(refusal_line(config.refused))
        if outcome.report.get("repair_error") and not args.json:
            print(f"gpu-healthcheck: {outcome.report['repair_error']}")
        sys.stdout.flush()
    except BrokenPipeError:
        # `gpu-healthcheck --node | head`: the reader left; the run itself still counts
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    emit(outcome, config, mode)
    if config.refused:
        from ..decide.exitcodes import refused_config_exit

        return refused_config_exit(mode)
    return outcome.exit_code


def usage(args: "argparse.Namespace") -> None:
    """--node's own refusal (UsageError), before the config is read: a wrong --gpus."""
    if args.gpus:
        parse_gpus(args.gpus)


def main(args: "argparse.Namespace", config: Config, started: float) -> int:
    """--node [--act] [--gpus LIST] [--level L]."""
    from ..model import Mode

    return execute(Mode.NODE, args, config, started)


def parse_gpus(text: str) -> tuple:
    """--gpus LIST (--node, --repair, --ack): NVML indices; UsageError otherwise."""
    from ..model import UsageError
    from ..read.slurmenv import GpuListError, parse_gpu_list

    try:
        ids = parse_gpu_list(text)
    except GpuListError as exc:
        raise UsageError(f"--gpus: {exc}") from None
    if not ids or not all(i.isdigit() for i in ids):
        raise UsageError("--gpus takes NVML indices, e.g. 0,3")
    return tuple(int(i) for i in ids)
