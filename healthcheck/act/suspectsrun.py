"""What a `--suspects` run leaves on the admin host (report/suspects.py renders each):

    notes = record(config, result, now)   # history line, <state_dir>/suspects.json, textfile
    state, note = load_state(state_dir)   # --cluster's SUSPECT column

The textfile is `gpu_healthcheck_suspects.prom` beside `metrics_file` (node_exporter's textfile
folder), written only where metrics_file is set, as the fabric sweep's is.  Each write that fails
is a note for stderr; the others still happen.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..report.suspects import STATE_FILE, TEXTFILE, SuspectsResult, history_record, metrics_text, parse_state, state_document

if TYPE_CHECKING:
    from ..config import Config


def textfile_path(config: "Config") -> Optional[str]:
    if not config.metrics_file:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(config.metrics_file)), TEXTFILE)


def record(config: "Config", result: SuspectsResult, now: float) -> List[str]:
    from ..safefile import atomic_write
    from .history import append_line, encode
    from .metrics import write_textfile

    notes: List[str] = []
    host = os.uname().nodename.split(".")[0]
    try:
        append_line(config.history_path(), encode(history_record(result, host, now)), config.history_max_bytes)
    except OSError as exc:
        notes.append(f"cannot write the history {config.history_path()}: {exc.strerror or exc}")
    try:
        atomic_write(config.state_dir, STATE_FILE,
                     json.dumps(state_document(result, now), sort_keys=True).encode(), file_mode=0o644)
    except OSError as exc:
        notes.append(f"cannot write {os.path.join(config.state_dir, STATE_FILE)}: {exc.strerror or exc}; "
                     f"--cluster shows no suspects from this run")
    path = textfile_path(config)
    if path:
        try:
            write_textfile(path, metrics_text(result, now))
        except OSError as exc:
            notes.append(f"cannot write {path}: {exc.strerror or exc}")
    return notes


def load_state(state_dir: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(the last --suspects run's state, None) or (None, why not); (None, None): none ran here."""
    from ..safefile import read_file

    path = os.path.join(state_dir, STATE_FILE)
    try:
        raw = read_file(state_dir, STATE_FILE)
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    if raw is None:
        return None, None
    try:
        state = parse_state(json.loads(raw.decode("utf-8")))
    except (ValueError, UnicodeDecodeError):
        state = None
    return (state, None) if state is not None else (None, f"{path} is not a suspects state file; ignored")
