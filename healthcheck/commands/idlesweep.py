"""Sweep idle GPU nodes with gpu-healthcheck's deep level, and with --internode its internode sweep
first, through Slurm itself (deploy/slurm/gpu-healthcheck-sweep, run by gpu-healthcheck-sweep.timer).

    python3 -m healthcheck.commands.idlesweep [--partition P] [--max N] [--time MIN] [--dry-run]
                                              [--internode] [--internode-timeout S]
                                              [--scontrol PATH] [--squeue PATH] [--sbatch PATH] [--exec PATH]

The deploy script's docstring says what it does and what each exit means; this module is that
script's whole run.  The nodes come from the one `scontrol -o show nodes` reader
(act/scontrol.py), the choice of the plainly idle ones from decide/sweepnodes.py.  Each
outside command has a deadline (outside.run_bounded, the Scontrol door); one that fails is
said on stderr and the sweep exits 1, submitting nothing more; it never drains or resumes a
node itself.  `--fabric` and `--fabric-timeout` are the old names of `--internode` and
`--internode-timeout`: still read, with a note on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence, Tuple

from ..act.scontrol import Scontrol, parse_show_nodes
from ..decide.sweepnodes import idle_nodes
from ..model import DoorError
from ..tools import find_tool

JOB_NAME = "gpu-healthcheck-sweep"
PARTITION = "gpu-healthcheck-sweep"
COMMAND_TIMEOUT_S = 30
# The internode sweep's rounds each take a collective's run (seconds to a minute) plus the jobs'
# start; [internode] time_limit_s bounds a hung one.  An hour leaves room for a few slow rounds.
INTERNODE_TIMEOUT_S = 3600
INTERNODE_GRACE_S = 60  # after SIGTERM: its scancel has [internode] sbatch_timeout_s (30 s)
# gpu-healthcheck --internode-sweep's exit statuses (docs/network.md) in words; any other is ours
INTERNODE_OUTCOMES = {0: "no bad node", 2: "bad node(s) found, drained (see its table above)",
                   3: "could not run (its message above says why); nothing drained"}


def requested_nodes(squeue_text: str) -> List[str]:
    """`squeue -h -n gpu-healthcheck-sweep -o %n` (each job's requested node, from -w)."""
    return [line.strip() for line in squeue_text.splitlines() if line.strip()]


def sbatch_argv(sbatch: str, partition: str, node: str, minutes: int, exe: str) -> List[str]:
    return [sbatch, "-p", partition, "-w", node, "--exclusive", "-J", JOB_NAME, "-t", str(minutes),
            "-o", "/dev/null", "--wrap", f"{exe} --node --act --level deep"]


def internode_argv(exe: str, partition: str) -> List[str]:
    return [exe, "--internode-sweep", "--act", "--partition", partition]


def internode_words(status: Optional[int], timeout_s: float) -> Tuple[str, bool]:
    """The internode sweep's end in words, and whether it is an error of this script's run:
    (status None: it passed its deadline)."""
    if status is None:
        return (f"passed its deadline of {timeout_s:g} s and was stopped (SIGTERM: it cancels "
                f"its jobs and drains nothing)", True)
    if status in INTERNODE_OUTCOMES:
        return f"exit {status}: {INTERNODE_OUTCOMES[status]}", False
    how = f"killed by signal {-status}" if status < 0 else f"exit {status}"
    return f"{how}: not one of its statuses (0, 2, 3); see its output above", True


def run_internode(argv: Sequence[str], timeout_s: float, grace_s: float = INTERNODE_GRACE_S) -> Optional[int]:
    """Run the internode sweep to its end, its output going where ours goes (the journal); its
    exit status, or None once it passed timeout_s (then stopped).  OSError: it cannot start."""
    from ..outside import run_attached

    return run_attached(argv, timeout_s, grace_s)


def internode_first(args: argparse.Namespace) -> bool:
    """The internode sweep (--internode), before any deep job is submitted; True when its run was an
    error of ours (it could not start, passed its deadline or crashed)."""
    argv = internode_argv(args.exe, args.partition)
    if args.dry_run:
        print(" ".join(argv))
        return False
    print(f"gpu-healthcheck-sweep: internode sweep: {' '.join(argv)}", flush=True)
    try:
        status = run_internode(argv, args.internode_timeout)
    except OSError as exc:
        print(f"gpu-healthcheck-sweep: internode sweep: cannot run {argv[0]}: {exc.strerror or exc}; "
              f"the deep sweep goes on", file=sys.stderr, flush=True)
        return True
    words, failed = internode_words(status, args.internode_timeout)
    print(f"gpu-healthcheck-sweep: internode sweep: {words}", file=sys.stderr if failed else sys.stdout,
          flush=True)
    return failed


def _run(argv: Sequence[str]) -> str:
    from ..outside import run_bounded

    ran = run_bounded(argv, COMMAND_TIMEOUT_S)
    if ran.error:
        raise DoorError(f"{argv[0]}: {ran.error}")
    if ran.returncode != 0:
        raise DoorError(f"{' '.join(argv)}: exit {ran.returncode}: {ran.text('stderr').strip()[-300:]}")
    return ran.text()


# An old option -> its name now: it works as the new one, with a note on stderr.
OLD_OPTIONS = {"--fabric": "--internode", "--fabric-timeout": "--internode-timeout"}


class _OldName(argparse.Action):
    """An old option: sets its new option's dest (True for a flag), and says it is deprecated."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: Optional[str] = None) -> None:
        print(f"gpu-healthcheck-sweep: {option_string} is deprecated, use "
              f"{OLD_OPTIONS[str(option_string)]} (the same option)", file=sys.stderr, flush=True)
        setattr(namespace, self.dest, True if self.nargs == 0 else values)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-healthcheck-sweep", description=__doc__.split(" (deploy/")[0] + ".")
    parser.add_argument("--partition", default=PARTITION, help=f"the hidden partition ({PARTITION})")
    parser.add_argument("--max", type=int, default=0, help="submit at most N jobs (0: no limit)")
    parser.add_argument("--time", type=int, default=30, help="each job's time limit, minutes (30)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the commands only (the internode sweep's, the sbatch lines)")
    parser.add_argument("--scontrol", default="scontrol")
    parser.add_argument("--squeue", default="squeue")
    parser.add_argument("--sbatch", default="sbatch")
    parser.add_argument("--exec", dest="exe", default="/usr/bin/gpu-healthcheck",
                        help="gpu-healthcheck on the nodes, and on this host for --internode "
                             "(/usr/bin/gpu-healthcheck)")
    parser.add_argument("--internode", action="store_true",
                        help="first run gpu-healthcheck --internode-sweep --act on the partition")
    parser.add_argument("--internode-timeout", type=float, default=INTERNODE_TIMEOUT_S,
                        help=f"the internode sweep's deadline, seconds ({INTERNODE_TIMEOUT_S})")
    # the old names, after the new (a dest takes the default of its first option)
    parser.add_argument("--fabric", action=_OldName, nargs=0, dest="internode", default=argparse.SUPPRESS,
                        help="deprecated: the old name of --internode")
    parser.add_argument("--fabric-timeout", action=_OldName, type=float, dest="internode_timeout",
                        default=argparse.SUPPRESS, help="deprecated: the old name of --internode-timeout")
    args = parser.parse_args(argv)
    if args.internode_timeout <= 0:
        parser.error("--internode-timeout must be above 0 seconds")
    internode_failed = internode_first(args) if args.internode else False
    try:
        ctl = Scontrol(find_tool("scontrol", args.scontrol, os.environ), COMMAND_TIMEOUT_S)
        nodes = parse_show_nodes(ctl.show_nodes_raw())
        already = requested_nodes(_run([args.squeue, "-h", "-n", JOB_NAME, "-o", "%n"]))
        chosen = idle_nodes(nodes, args.partition, already)
        if args.max > 0:
            chosen = chosen[:args.max]
        for node in chosen:
            line = sbatch_argv(args.sbatch, args.partition, node, args.time, args.exe)
            if args.dry_run:
                print(" ".join(line))
            else:
                print(f"{node}: {_run(line).strip()}")
    except DoorError as exc:
        print(f"gpu-healthcheck-sweep: {exc}; nothing more submitted", file=sys.stderr)
        return 1
    if not chosen:
        print(f"gpu-healthcheck-sweep: no idle node in partition {args.partition} to sweep")
    return 1 if internode_failed else 0


if __name__ == "__main__":
    sys.exit(main())
