"""`gpu-healthcheck --ack [--gpus LIST]`: the admin has dealt with the Xids seen so far on
these GPUs (all by default): they stop counting, new ones count.

    code = main(args, config, started)
    code, lines, events = ack(config, gpus=(2,))

The acknowledgement itself is written by act/xidack.py (what decide/xidack.py decides).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, List, Optional, Tuple

from ..act.state import StateStore, read_acks
from ..act.xidack import acknowledge_xids, xid_list
from ..config import Config
from ..model import LogEvent, Mode, NodeSnapshot, UsageError

if TYPE_CHECKING:
    import argparse


def usage(args: "argparse.Namespace") -> None:
    if args.act or args.json or args.level not in (None, "quick"):
        raise UsageError("--ack takes only --gpus and --config")


def main(args: "argparse.Namespace", config: Config, started: float) -> int:
    from .node import parse_gpus

    gpus = parse_gpus(args.gpus) if args.gpus else None
    code, lines, events = ack(config, gpus)
    for line in lines:
        print(line, file=sys.stdout if code == 0 else sys.stderr)
    if config.journal and events:
        # an acknowledgement changes what later runs judge: it belongs in the node's journal
        from ..act.journal import send_events

        send_events(events, "ack")
    return code


def ack(config: Config, gpus: Optional[Tuple[int, ...]]) -> Tuple[int, List[str], List[LogEvent]]:
    """The admin has dealt with the Xids seen so far on these GPUs (all by default).  Returns
    (exit code, lines to print, log events)."""
    from ..decide.exitcodes import ack_exit
    from ..read.kernlog import read_kernel_log
    from ..read.nvml import read_nvml
    from ..read.node import xid_window
    from .node import without_acknowledged

    events: List[LogEvent] = []
    host = os.uname().nodename.split(".")[0]
    store = StateStore(config.state_dir)
    nvml = read_nvml(config.nvml_timeout_s)
    if gpus is not None and nvml.error is None:
        missing = sorted(set(gpus) - {g.index for g in nvml.gpus})
        if missing:
            raise UsageError(f"--gpus {','.join(map(str, missing))}: this node has "
                             f"{len(nvml.gpus)} GPU(s)")
    snapshot = NodeSnapshot(host=host, nvml_error=nvml.error, gpus=nvml.gpus)
    snapshot = snapshot._replace(kernel_log=read_kernel_log(
        config.kernel_log, xid_window(Mode.NODE, snapshot, config.xid_window_s)))
    if snapshot.kernel_log.error:
        return ack_exit(ok=False), [f"gpu-healthcheck: --ack: {snapshot.kernel_log.error}; "
                                    f"nothing acknowledged"], events
    snapshot = without_acknowledged(snapshot, config, read_acks(store), events)
    before = snapshot.kernel_log.events
    try:
        after = acknowledge_xids(snapshot, config, store, events, gpus, by="ack")
    except OSError as exc:
        return ack_exit(ok=False), [f"gpu-healthcheck: --ack: cannot use {store.state_dir}: {exc}"], events
    if any(e.kind == "error" for e in events):
        return ack_exit(ok=False), [e.message for e in events if e.kind == "error"], events
    dealt = [e for e in before if e not in after.kernel_log.events]
    which = "every GPU" if gpus is None else "GPU(s) " + ",".join(map(str, gpus))
    lines = [f"acknowledged the Xids so far on {which} of {host}: " + (xid_list(dealt) or "none were counting")]
    counts = dict(after.xid_ack_counts)
    worn = [f"{p} ({c})" for p, c in sorted(counts.items()) if c >= config.xid_escalate_after]
    if worn:
        lines.append(f"a new failing Xid on {', '.join(worn)} will escalate to RMA "
                     f"(xid_escalate_after = {config.xid_escalate_after})")
    return ack_exit(ok=True), lines, events
