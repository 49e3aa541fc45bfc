"""`gpu-healthcheck --prolog | --epilog`: the node pipeline (commands/node.py) for the job that
starts or ends here, at the level the job asked for where the config allows it.

    code = main(args, config, started)

Slurm's Prolog and Epilog run this on every job start and end: it imports only what the node
pipeline needs (the `import time` of --prolog is a figure in tests/bench/rooms.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Collection, Mapping, Optional

from ..decide.levels import LEVELS
from ..model import Mode, UsageError

if TYPE_CHECKING:
    import argparse

    from ..config import Config

# The job's --gpu-healthcheck= choice, put into the prolog's environment by the SPANK plugin
# (spank_job_control_setenv adds the SPANK_ prefix).
LEVEL_VAR = "SPANK_GPU_HEALTHCHECK_LEVEL"


def usage(args: "argparse.Namespace") -> None:
    if args.act:
        raise UsageError("--act goes with --node (prolog and epilog always act)")
    if args.gpus:
        raise UsageError("--gpus goes with --node or --ack (prolog and epilog check the job's GPUs)")


def main(args: "argparse.Namespace", config: "Config", started: float) -> int:
    from .node import execute

    mode = Mode.PROLOG if args.prolog else Mode.EPILOG
    refused = level_refused(args.level, mode, os.environ, config)
    return execute(mode, args, config, started, job_level(args.level, mode, os.environ, config.job_levels),
                   refused)


def job_level(given: Optional[str], mode: Mode, environ: Mapping[str, str],
              allowed: Collection[str] = LEVELS) -> str:
    """--level, else (prolog only) the job's own choice where `allowed` (config job_levels)
    has it, else quick."""
    asked = _job_asks(given, mode, environ)
    if given:
        return given
    return asked if asked in LEVELS and asked in allowed else "quick"


def _job_asks(given: Optional[str], mode: Mode, environ: Mapping[str, str]) -> Optional[str]:
    """The level the job asked for, where it decides anything: a prolog without --level."""
    return environ.get(LEVEL_VAR) if mode is Mode.PROLOG and not given else None


def level_refused(given: Optional[str], mode: Mode, environ: Mapping[str, str],
                  config: "Config") -> Optional[str]:
    """Why the job's ask is not honoured (it runs quick), or None."""
    asked = _job_asks(given, mode, environ)
    if asked is None or asked in config.job_levels:
        return None
    why = (f"job_levels = {list(config.job_levels)} ({config.source or 'the default'}) does not "
           f"allow it" if asked in LEVELS else f"not a level ({', '.join(LEVELS)})")
    return f"the job asked for --gpu-healthcheck={asked} ({LEVEL_VAR}): {why}; running quick"
