"""`gpu-healthcheck --history [N] [--json]`: the node's last N verdicts, read back from the history
file (report/history.py reads and words them; read-only).

    code = main(args, config, started)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from ..config import Config


def main(args: "argparse.Namespace", config: "Config", started: float) -> int:
    from ..report.history import show_history

    return show_history(config, args.history, args.json, sys.stdout)
