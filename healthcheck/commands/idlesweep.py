"""Sweep idle GPU nodes with gpu-healthcheck's deep level, and with --fabric its fabric sweep
first, through Slurm itself (deploy/slurm/gpu-healthcheck-sweep, run by gpu-healthcheck-sweep.timer).

    python3 -m healthcheck.commands.idlesweep [--partition P] [--max N] [--time MIN] [--dry-run]
                                              [--fabric] [--fabric-timeout S]
                                              [--scontrol PATH] [--squeue PATH] [--sbatch PATH] [--exec PATH]

The deploy script's docstring says what it does and what each exit means; this module is that
script's whole run.  The nodes come from the one `scontrol -o show nodes` reader
(act/scontrol.py), the choice of the plainly idle ones from decide/sweepnodes.py.  Each
outside command has a deadline (outside.run_bounded, the Scontrol door); one that fails is
said on stderr and the sweep exits 1, submitting nothing more; it never drains or resumes a
node itself.
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
# The fabric sweep's rounds each take a collective's run (seconds to a minute) plus the jobs'
# start; [fabric] time_limit_s bounds a hung one.  An hour leaves room for a few slow rounds.
FABRIC_TIMEOUT_S = 3600
FABRIC_GRACE_S = 60  # after SIGTERM: its scancel has [fabric] sbatch_timeout_s (30 s)
# gpu-healthcheck --fabric-sweep's exit statuses (docs/network.md) in words; any other is ours
FABRIC_OUTCOMES = {0: "no bad node", 2: "bad node(s) found, drained (see its table above)",
                   3: "could not run (its message above says why); nothing drained"}


def requested_nodes(squeue_text: str) -> List[str]:
    """`squeue -h -n gpu-healthcheck-sweep -o %n` (each job's requested node, from -w)."""
    return [line.strip() for line in squeue_text.splitlines() if line.strip()]


def sbatch_argv(sbatch: str, partition: str, node: str, minutes: int, exe: str) -> List[str]:
    return [sbatch, "-p", partition, "-w", node, "--exclusive", "-J", JOB_NAME, "-t", str(minutes),
            "-o", "/dev/null", "--wrap", f"{exe} --node --act --level deep"]


def fabric_argv(exe: str, partition: str) -> List[str]:
    return [exe, "--fabric-sweep", "--act", "--partition", partition]


def fabric_words(status: Optional[int], timeout_s: float) -> Tuple[str, bool]:
    """The fabric sweep's end in words, and whether it is an error of this script's run:
    (status None: it passed its deadline)."""
    if status is None:
        return (f"passed its deadline of {timeout_s:g} s and was stopped (SIGTERM: it cancels "
                f"its jobs and drains nothing)", True)
    if status in FABRIC_OUTCOMES:
        return f"exit {status}: {FABRIC_OUTCOMES[status]}", False
    how = f"killed by signal {-status}" if status < 0 else f"exit {status}"
    return f"{how}: not one of its statuses (0, 2, 3); see its output above", True


def run_fabric(argv: Sequence[str], timeout_s: float, grace_s: float = FABRIC_GRACE_S) -> Optional[int]:
    """Run the fabric sweep to its end, its output going where ours goes (the journal); its
    exit status, or None once it passed timeout_s (then stopped).  OSError: it cannot start."""
    from ..outside import run_attached

    return run_attached(argv, timeout_s, grace_s)


def fabric_first(args: argparse.Namespace) -> bool:
    """The fabric sweep (--fabric), before any deep job is submitted; True when its run was an
    error of ours (it could not start, passed its deadline or crashed)."""
    argv = fabric_argv(args.exe, args.partition)
    if args.dry_run:
        print(" ".join(argv))
        return False
    print(f"gpu-healthcheck-sweep: fabric sweep: {' '.join(argv)}", flush=True)
    try:
        status = run_fabric(argv, args.fabric_timeout)
    except OSError as exc:
        print(f"gpu-healthcheck-sweep: fabric sweep: cannot run {argv[0]}: {exc.strerror or exc}; "
              f"the deep sweep goes on", file=sys.stderr, flush=True)
        return True
    words, failed = fabric_words(status, args.fabric_timeout)
    print(f"gpu-healthcheck-sweep: fabric sweep: {words}", file=sys.stderr if failed else sys.stdout,
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-healthcheck-sweep", description=__doc__.split(" (deploy/")[0] + ".")
    parser.add_argument("--partition", default=PARTITION, help=f"the hidden partition ({PARTITION})")
    parser.add_argument("--max", type=int, default=0, help="submit at most N jobs (0: no limit)")
    parser.add_argument("--time", type=int, default=30, help="each job's time limit, minutes (30)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the commands only (the fabric sweep's, the sbatch lines)")
    parser.add_argument("--scontrol", default="scontrol")
    parser.add_argument("--squeue", default="squeue")
    parser.add_argument("--sbatch", default="sbatch")
    parser.add_argument("--exec", dest="exe", default="/usr/bin/gpu-healthcheck",
                        help="gpu-healthcheck on the nodes, and on this host for --fabric "
                             "(/usr/bin/gpu-healthcheck)")
    parser.add_argument("--fabric", action="store_true",
                        help="first run gpu-healthcheck --fabric-sweep --act on the partition")
    parser.add_argument("--fabric-timeout", type=float, default=FABRIC_TIMEOUT_S,
                        help=f"the fabric sweep's deadline, seconds ({FABRIC_TIMEOUT_S})")
    args = parser.parse_args(argv)
    if args.fabric_timeout <= 0:
        parser.error("--fabric-timeout must be above 0 seconds")
    fabric_failed = fabric_first(args) if args.fabric else False
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
    return 1 if fabric_failed else 0


if __name__ == "__main__":
    sys.exit(main())
