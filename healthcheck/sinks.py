"""Where a run's log events go: stderr (slurmd's log), journald, and the node history file.

    emit(outcome, config, Mode.PROLOG)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config
    from .model import Mode
    from .runner import RunOutcome

_LEVEL = {2: "CRITICAL", 3: "ERROR", 4: "WARNING", 5: "NOTICE", 6: "INFO"}


def emit(outcome: "RunOutcome", config: "Config", mode: "Mode") -> None:
    from .model import Mode

    # By hand the table already shows the findings: stderr gets only what needs attention.
    limit = 2 if mode is Mode.NODE else 5
    for event in outcome.events:
        if event.priority <= limit:
            print(f"gpu-healthcheck: {_LEVEL.get(event.priority, 'INFO')}: {event.message}",
                  file=sys.stderr)


def emit_internal_error(mode: str, trace: str) -> None:
    """Called when our own code failed; stderr already has the traceback."""
