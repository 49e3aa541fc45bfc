"""The repair loop's metrics (README "Repair", docs/observability.md), beside act.metrics's
counters of repairs attempted and succeeded and GPUs marked rma:

    gpu_healthcheck_repair_state{state="validating"} 1     # and 0 for every other state
    gpu_healthcheck_repair_state_since_timestamp_seconds 1.7e9
    gpu_healthcheck_repair_last_drain_to_resume_seconds{action="reset"} 754   # the last repair
    gpu_healthcheck_repair_drain_to_resume_seconds_total{action="reset"} 1508 # summed
    gpu_healthcheck_gpu_repairs{gpu="2",serial="...",...} 1   # in repair.window_s, its ledger

The state follows the run's events in order (decide.repair.state_after: each repair step, and
any drain or resume this tool applied), so it is only as new as the node's last run; the
"since" timestamp changes only when the state does, which is what an alert on a node stuck in
repair needs.  The mean time from drain to resume is the _total divided by
gpu_healthcheck_repairs_succeeded_<action>_total.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..promtext import Family

if TYPE_CHECKING:
    from ..config import Config
    from ..model import LogEvent, NodeSnapshot

ACTIONS = ("reset", "reboot")
FAILED_STEPS = {"reset_refused": "refused", "still_failing": "still_failing"}
GPU_LABELS = ("gpu", "uuid", "serial", "pci_bus_id")
Samples = Dict[str, List[Tuple[Dict[str, str], Any]]]


REPAIR_FAMILIES: Tuple[Family, ...] = (
    Family("gpu_healthcheck_repair_state", "gauge",
           "1 for the node's repair state after its last run (in_service, drained, "
           "waiting_for_idle, cooldown, waiting_for_budget, resetting, rebooting, "
           "validating, reboot_timed_out, rma, blocked), 0 for the others."),
    Family("gpu_healthcheck_repair_state_since_timestamp_seconds", "gauge",
           "Unix time at which the node entered its current repair state."),
    Family("gpu_healthcheck_repair_last_drain_to_resume_seconds", "gauge",
           "Seconds from the drain to the resume of the last repair that worked, by action."),
    Family("gpu_healthcheck_repair_drain_to_resume_seconds_total", "counter",
           "Seconds from drain to resume summed over the repairs that worked, by action "
           "(divide by gpu_healthcheck_repairs_succeeded_<action>_total for the mean)."),
    Family("gpu_healthcheck_repairs_failed_total", "counter",
           "Repairs that did not work, by action and outcome: refused (nvidia-smi refused "
           "the reset) or still_failing (the full check after it failed)."),
    Family("gpu_healthcheck_repairs_blocked_total", "counter",
           "Resets the repair loop could not run, by action and cause: in_use (a process "
           "holds the GPU, named in the journal) or no_nvidia_smi (nvidia-smi not at its "
           "path); never counted as attempts."),
    Family("gpu_healthcheck_gpu_repairs", "gauge",
           "Repairs of the GPU within repair.window_s, from its repair ledger (read at "
           "each --node run)."),
)


def update_repair(old: Optional[Mapping[str, Any]], events: Sequence["LogEvent"], now: float,
                  gpu_repairs: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    """The repair part of the metrics state after one run (pure: a new dict)."""
    from ..decide.repair import DRAINED, IN_SERVICE, state_after
    from ..model import Outcome

    new: Dict[str, Any] = {"state": None, "since": None, "last_s": {}, "sum_s": {}, "failed": {},
                           "blocked": {}, "gpus": None}
    for key, value in (old or {}).items():
        if key in new and (key not in ("last_s", "sum_s", "failed", "blocked") or isinstance(value, dict)):
            new[key] = dict(value) if isinstance(value, dict) else value
    for event in events:
        state: Optional[str] = None
        if event.kind == "drain" and event.outcome is Outcome.APPLIED:
            state = DRAINED
        elif event.kind == "resume" and event.outcome is Outcome.APPLIED:
            state = IN_SERVICE
        elif event.kind == "repair":
            step = event.fields.get("GPU_HEALTHCHECK_REPAIR_STEP", "")
            action = event.fields.get("GPU_HEALTHCHECK_REPAIR_ACTION", "")
            state = state_after(step, action, event.fields.get("GPU_HEALTHCHECK_REPAIR_STATE", ""))
            seconds = _seconds(event.fields.get("GPU_HEALTHCHECK_DRAIN_TO_RESUME_S"))
            failed = FAILED_STEPS.get(step)
            if failed and action in ACTIONS:
                key = f"{action}:{failed}"
                new["failed"][key] = int(new["failed"].get(key, 0)) + 1
            cause = event.fields.get("GPU_HEALTHCHECK_REPAIR_BLOCKED", "")
            if step == "reset_blocked" and action in ACTIONS and cause:
                key = f"{action}:{cause}"
                new["blocked"][key] = int(new["blocked"].get(key, 0)) + 1
            if step == "resumed" and action in ACTIONS and seconds is not None:
                new["last_s"][action] = seconds
                new["sum_s"][action] = float(new["sum_s"].get(action, 0.0)) + seconds
        if state is not None and state != new["state"]:
            new["state"], new["since"] = state, round(now, 3)
    if gpu_repairs is not None:
        new["gpus"] = gpu_repairs
    return new


def _seconds(text: Optional[str]) -> Optional[float]:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and 0.0 <= value < 1e10 else None


def repair_samples(repair: Optional[Mapping[str, Any]], out: Samples) -> None:
    """Add the repair families' samples for the state's repair part to `out`."""
    from ..decide.repair import REPAIR_STATES

    if not isinstance(repair, Mapping):
        return
    p = "gpu_healthcheck_"
    state = repair.get("state")
    if state in REPAIR_STATES:
        for name in REPAIR_STATES:
            out[p + "repair_state"].append(({"state": name}, 1 if name == state else 0))
        if isinstance(repair.get("since"), (int, float)):
            out[p + "repair_state_since_timestamp_seconds"].append(({}, repair["since"]))
    for key, family in (("last_s", "repair_last_drain_to_resume_seconds"),
                        ("sum_s", "repair_drain_to_resume_seconds_total")):
        values: Mapping[str, Any] = _mapping(repair.get(key))
        for action in ACTIONS:
            if isinstance(values.get(action), (int, float)):
                out[p + family].append(({"action": action}, float(values[action])))
    failed = _mapping(repair.get("failed"))
    for key, count in sorted(failed.items()):
        action, _, outcome = str(key).partition(":")
        if isinstance(count, int):
            out[p + "repairs_failed_total"].append(({"action": action, "outcome": outcome}, count))
    for key, count in sorted(_mapping(repair.get("blocked")).items()):
        action, _, cause = str(key).partition(":")
        if isinstance(count, int):
            out[p + "repairs_blocked_total"].append(({"action": action, "cause": cause}, count))
    for g in repair.get("gpus") or ():
        if isinstance(g, Mapping) and isinstance(g.get("repairs"), int):
            out[p + "gpu_repairs"].append(({k: str(g.get(k, "")) for k in GPU_LABELS}, g["repairs"]))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def gpu_repairs(config: "Config", snapshot: Optional["NodeSnapshot"],
                now: Optional[float] = None) -> Tuple[Optional[List[Dict[str, Any]]], List[str]]:
    """Each GPU's repairs within repair.window_s from its ledger, and notes; (None, []) where the
    run listed no GPUs (the last read is kept)."""
    from ..decide.repair import in_window, ledger_of
    from .ledger import read_ledger

    if snapshot is None or not snapshot.gpus:
        return None, []
    when = time.time() if now is None else now
    rows, notes = [], []
    for g in snapshot.gpus:
        try:
            count = len(in_window(read_ledger(config.state_dir, ledger_of(g)), when,
                                  config.repair.window_s))
        except (ValueError, OSError) as exc:
            notes.append(f"gpu_healthcheck_gpu_repairs of GPU {g.index}: {exc}")
            continue
        rows.append({"gpu": str(g.index), "uuid": g.uuid or "", "serial": g.serial or "",
                     "pci_bus_id": g.pci_bus_id or "", "repairs": count})
    return rows, notes
