"""Every exit status gpu-healthcheck returns, decided here and nowhere else (pure).

The status drives Slurm: a non-zero prolog makes slurmd drain the node and requeue the job, a
non-zero epilog drains it, and HealthCheckProgram's status is logged.  So each command's status
is one function of what happened, never of how a message was worded (CONTRACTS §1):

    --node          0 pass, 1 warn, 2 fail, 3 unknown (could not check; also a usage or
                    config error, a refused config, and a bug of ours)
    --prolog        non-zero exactly when the job must not start here
    --epilog        non-zero exactly when it drained the node (or left a pending drain)
    --check-config  0 valid, 3 invalid (as --node exits on the same file)
    --repair        as --node (the check that follows the repair); 3 when slurmctld did not
                    answer (nothing repaired)
    --history, --cluster, --ack   0 done, 3 could not
    --job-report    0 healthy, 2 a GPU of the job is at fault, 3 could not check (or no job)
    --internode-sweep  0 no bad node, 2 a bad node found (drained with --act), 3 could not run
    --gang          0 the fabric passed (or one node: nothing to check), 2 it failed, 3 could not run
    SIGTERM         128 + 15, as a shell reports it
"""

from __future__ import annotations

import signal

from ..model import Mode, NodeAction, Outcome, Verdict


class ExitCode:
    """The --node statuses (plain ints: an IntEnum costs a third of a millisecond to create,
    at every job start)."""

    OK = 0
    WARN = 1
    FAIL = 2
    UNKNOWN = 3


# A command-line or config mistake reads as "could not check", never as warn or fail.
USAGE = ExitCode.UNKNOWN
CONFIG_ERROR = ExitCode.UNKNOWN
TERMINATED = 128 + signal.SIGTERM


_NODE_EXIT = {Verdict.PASS: ExitCode.OK, Verdict.WARN: ExitCode.WARN, Verdict.FAIL: ExitCode.FAIL,
              Verdict.UNKNOWN: ExitCode.UNKNOWN}


def node_exit(verdict: Verdict) -> int:
    """--node: the monitoring convention."""
    return _NODE_EXIT[verdict]


def prolog_exit(job_must_not_start: bool) -> int:
    """--prolog: non-zero exactly when the job must not start here (slurmd then requeues it)."""
    return 1 if job_must_not_start else 0


def epilog_exit(drained: bool) -> int:
    """--epilog: non-zero exactly when we drained (or left a pending drain for) the node."""
    return 1 if drained else 0


def run_exit(mode: Mode, verdict: Verdict, reason: "str | None", action: NodeAction) -> int:
    """The status of a --node, --prolog or --epilog run."""
    if mode is Mode.NODE:
        return node_exit(verdict)
    if mode is Mode.PROLOG:
        # a refused or report-only drain lets the job start: exit 1 would make Slurm drain
        return prolog_exit(reason is not None
                           and action.outcome not in (Outcome.REFUSED, Outcome.REPORT_ONLY))
    return epilog_exit(action.taken == "drain")


def refused_config_exit(mode: Mode) -> int:
    """A config refused for its ownership or mode (nothing was acted on): --node and --repair
    could not check as configured (3); the prolog and epilog exit 0, so Slurm drains nothing
    for our own config."""
    return ExitCode.UNKNOWN if mode is Mode.NODE else ExitCode.OK


def internal_error_exit(mode: Mode) -> int:
    """A bug in gpu-healthcheck never drains and never fails a job: prolog and epilog exit 0,
    --node says it could not check."""
    return ExitCode.UNKNOWN if mode is Mode.NODE else ExitCode.OK


def done_exit(ok: bool) -> int:
    """--history, --cluster, --ack, --list-checks, --version: 0 done, 3 could not."""
    return ExitCode.OK if ok else ExitCode.UNKNOWN


ack_exit = done_exit


def check_config_exit(valid: bool) -> int:
    """--check-config: 0 valid; an invalid file exits as --node exits on it (CONFIG_ERROR), so a
    script that checks a config first sees the status the check would give."""
    return 0 if valid else CONFIG_ERROR


def job_report_exit(job_gpu_at_fault: bool, could_check: bool = True) -> int:
    if not could_check:
        return ExitCode.UNKNOWN
    return ExitCode.FAIL if job_gpu_at_fault else ExitCode.OK


def fabric_exit(found_bad: bool, could_run: bool = True) -> int:
    """--internode-sweep and --gang."""
    if not could_run:
        return ExitCode.UNKNOWN
    return ExitCode.FAIL if found_bad else ExitCode.OK
