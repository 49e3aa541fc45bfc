"""`gpu-healthcheck --cluster [--json]`: the nodes gpu-healthcheck drained, with their reasons in
columns (report/cluster.py says what each column holds), from one `scontrol -o show nodes` call,
and the last `--suspects` run's suspects from <state_dir>/suspects.json (written by act/suspectsrun.py, read by load_state below).

    code = show_cluster(config, os.environ, as_json=False, out=sys.stdout)
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, TextIO, Tuple

from ..decide.exitcodes import done_exit
from ..report.cluster import RUNBOOK, format_table, rows_from_show_nodes

if TYPE_CHECKING:
    import argparse

    from ..config import Config


def main(args: "argparse.Namespace", config: "Config", started: float) -> int:
    return show_cluster(config, os.environ, args.json, sys.stdout)


def show_cluster(config: "Config", environ: Mapping[str, str], as_json: bool, out: TextIO,
                 err: Optional[TextIO] = None) -> int:
    """`--cluster`: exit 0, or 3 when scontrol fails (the message names it)."""
    from ..act.scontrol import Scontrol, ScontrolError, find_scontrol

    err = err if err is not None else sys.stderr
    ctl = Scontrol(find_scontrol(config.scontrol, environ), config.scontrol_timeout_s)
    try:
        text = ctl.show_nodes_raw()
    except ScontrolError as exc:
        from ..model import SLURMCTLD_ADVICE

        print(f"gpu-healthcheck: --cluster: cannot list nodes with scontrol: {exc}; {SLURMCTLD_ADVICE}",
              file=err)
        return done_exit(False)
    # the last --suspects run on this host (the admin host, where both run)
    state, note = load_state(config.state_dir)
    if note:
        print(f"gpu-healthcheck: --cluster: {note}", file=err)
    rows = rows_from_show_nodes(text, config.repair.max_concurrent, state["suspects"] if state else ())
    if as_json:
        json.dump(rows, out, indent=2)
        out.write("\n")
    else:
        since = None
        if state:
            since = f"{state.get('time')}, {state.get('source')}" + (
                f"; accounting unknown: {state['unknown']}" if state.get("unknown") else "")
        for line in format_table(rows, since):
            out.write(line + "\n")
        if rows:
            out.write(f"\nwhat each reason means and what to do: {RUNBOOK}\n")
    return done_exit(True)


def load_state(state_dir: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(the last --suspects run's state, None) or (None, why not); (None, None): none ran here."""
    from ..report.suspects import STATE_FILE, parse_state
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
