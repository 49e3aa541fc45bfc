"""The Slurm entry points as console scripts, for an install made with pip alone.

    # slurm.conf, after `python3 -m venv /opt/gpu-healthcheck && /opt/gpu-healthcheck/bin/pip
    # install gpu_healthcheck-*.whl`:
    Prolog=/opt/gpu-healthcheck/bin/gpu-healthcheck-prolog
    Epilog=/opt/gpu-healthcheck/bin/gpu-healthcheck-epilog
    HealthCheckProgram=/opt/gpu-healthcheck/bin/gpu-healthcheck-node-act

Each does what its shell script in prolog/, epilog/ or deploy/slurm/ does: slurmd starts it with
no PATH, so PATH falls back to the standard directories (and is honoured where set), its own
arguments are ignored, and the checker's exit status is the script's.  The shell scripts look
gpu-healthcheck up on PATH and exit 0 when it is missing; here the checker is this very
install, so there is nothing to look up.
"""

from __future__ import annotations

import os
from typing import List, NoReturn


def _run(args: List[str]) -> NoReturn:
    from .cli import entry
    from .tools import DEFAULT_PATH

    # `PATH=${PATH:-...}` in the shell scripts: unset or empty takes the default.  Children
    # (scontrol found on PATH, logger) see it too.
    if not os.environ.get("PATH"):
        os.environ["PATH"] = DEFAULT_PATH
    entry(args)


def prolog() -> NoReturn:
    """Prolog=: `gpu-healthcheck --prolog`."""
    _run(["--prolog"])


def epilog() -> NoReturn:
    """Epilog=: `gpu-healthcheck --epilog`."""
    _run(["--epilog"])


def node_act() -> NoReturn:
    """HealthCheckProgram=: `gpu-healthcheck --node --act` (slurmd ignores its exit status)."""
    _run(["--node", "--act"])
