"""What a `--suspects` run leaves on the admin host, written from what report/suspects.py
rendered (commands/suspects.py hands each piece over; an effector renders nothing itself):

    notes = record(config, history_line, state_doc, metrics_text)
        # the history line, <state_dir>/suspects.json (--cluster's SUSPECT column), the textfile

The textfile is `gpu_healthcheck_suspects.prom` beside `metrics_file` (node_exporter's textfile
folder), written only where metrics_file is set, as the fabric sweep's is.  Each write that fails
is a note for stderr; the others still happen.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, List

from ..fleetmodel import SUSPECTS_STATE_FILE, SUSPECTS_TEXTFILE

if TYPE_CHECKING:
    from ..config import Config


def record(config: "Config", history_line: Dict[str, Any], state_doc: Dict[str, Any], metrics: str) -> List[str]:
    from ..safefile import atomic_write
    from ..historyline import encode
    from .history import append_line
    from .metrics import textfile_beside, write_textfile

    notes: List[str] = []
    try:
        append_line(config.history_path(), encode(history_line), config.history_max_bytes)
    except OSError as exc:
        notes.append(f"cannot write the history {config.history_path()}: {exc.strerror or exc}")
    try:
        atomic_write(config.state_dir, SUSPECTS_STATE_FILE,
                     json.dumps(state_doc, sort_keys=True).encode(), file_mode=0o644)
    except OSError as exc:
        notes.append(f"cannot write {os.path.join(config.state_dir, SUSPECTS_STATE_FILE)}: "
                     f"{exc.strerror or exc}; --cluster shows no suspects from this run")
    if config.metrics_file:
        path = textfile_beside(config.metrics_file, SUSPECTS_TEXTFILE)
        try:
            write_textfile(path, metrics)
        except OSError as exc:
            notes.append(f"cannot write {path}: {exc.strerror or exc}")
    return notes
