"""Prometheus metrics for node_exporter's textfile collector.

    # config.toml
    metrics_file = "/var/lib/node_exporter/textfile/gpu_healthcheck.prom"

    write_metrics(config, outcome, "epilog")   # after every run, by sinks.emit

node_exporter reads the file at every scrape, so it is replaced atomically (a temp file in the
same directory, then rename) and always holds the whole picture: the last run of each mode
(node, prolog, epilog), the GPU counters of the latest read and counters that persist across
runs.  That picture lives in <state_dir>/metrics-state.json, updated read-modify-write under
flock(<state_dir>/metrics-state.lock) so concurrent prolog/epilog runs never lose an increment
and one mode's run never erases another's series.

    # HELP gpu_healthcheck_verdict 1 for the verdict of the last run of this mode, 0 for the others.
    # TYPE gpu_healthcheck_verdict gauge
    gpu_healthcheck_verdict{mode="epilog",verdict="fail"} 1
    gpu_healthcheck_gpu_ecc_errors_total{counter="volatile",gpu="2",pci_bus_id="00000000:38:00.0",serial="1650522003802",type="uncorrected",uuid="GPU-..."} 3
    gpu_healthcheck_drains_total 4

Names follow node_exporter's conventions (`promtool check metrics`): prefix gpu_healthcheck_,
base units in the name, counters end in _total.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..promtext import Family, render as render_text
from .metricsrepair import REPAIR_FAMILIES, repair_samples, update_repair

if TYPE_CHECKING:
    from ..config import Config
    from ..model import LogEvent, RunOutcome

STATE_FILE = "metrics-state.json"
LOCK_FILE = "metrics-state.lock"
SCHEMA = 1
MODES = ("node", "prolog", "epilog")
VERDICTS = ("pass", "warn", "fail", "unknown")
COUNTERS = ("drains", "drain_refusals", "pending_drains", "resumes",
            "repairs_attempted_reset", "repairs_attempted_reboot", "repairs_succeeded_reset",
            "repairs_succeeded_reboot", "gpus_marked_rma")
GPU_LABELS = ("gpu", "uuid", "serial", "pci_bus_id")
# the run's priorities (model.py, syslog levels): an applied drain is logged at CRIT, "already drained"
# and "drained by someone else" at NOTICE/WARNING; a resume at NOTICE, "stays drained" at INFO.


class MetricsError(OSError):
    """The metrics file or its state cannot be written, with the path."""


FAMILIES: Tuple[Family, ...] = (
    Family("gpu_healthcheck_last_run_timestamp_seconds", "gauge",
           "Unix time at which the last run of this mode ended."),
    Family("gpu_healthcheck_last_run_duration_seconds", "gauge",
           "Wall-clock duration of the last run of this mode."),
    Family("gpu_healthcheck_verdict", "gauge",
           "1 for the verdict of the last run of this mode, 0 for the others."),
    Family("gpu_healthcheck_findings", "gauge",
           "Findings of the last run of this mode, by check id and severity."),
    Family("gpu_healthcheck_config_refused", "gauge",
           "1 when the last run refused its config file (not owned by root, or writable by others): "
           "it checked with built-in defaults and acted on nothing."),
    Family("gpu_healthcheck_drains_total", "counter",
           "Drains of this node applied through scontrol by gpu-healthcheck."),
    Family("gpu_healthcheck_drain_refusals_total", "counter",
           "Drains refused because drain.max_fraction of the cluster was already drained."),
    Family("gpu_healthcheck_pending_drains_total", "counter",
           "Drains that could not be applied (scontrol failed) and were kept for the next run."),
    Family("gpu_healthcheck_resumes_total", "counter",
           "Resumes of this node by gpu-healthcheck --node --act after its own drain."),
    Family("gpu_healthcheck_repairs_attempted_reset_total", "counter",
           "GPU resets the repair loop ran through nvidia-smi on this node (refused ones too)."),
    Family("gpu_healthcheck_repairs_attempted_reboot_total", "counter",
           "Reboots the repair loop asked Slurm for (scontrol reboot)."),
    Family("gpu_healthcheck_repairs_succeeded_reset_total", "counter",
           "Resets after which the full check passed and the node was resumed."),
    Family("gpu_healthcheck_repairs_succeeded_reboot_total", "counter",
           "Reboots after which the full check passed and the node was resumed."),
    Family("gpu_healthcheck_gpus_marked_rma_total", "counter",
           "GPUs the repair loop marked for RMA (repair.max_attempts within repair.window_s)."),
    Family("gpu_healthcheck_gpus_read_timestamp_seconds", "gauge",
           "Unix time of the NVML read that the gpu_healthcheck_gpu_* series come from."),
    Family("gpu_healthcheck_gpu_info", "gauge",
           "1 for each GPU of the last read; modelName is NVML's name, as dcgm-exporter labels it."),
    Family("gpu_healthcheck_gpu_lost", "gauge",
           "1 when NVML reported the GPU lost, needing a reset, or it did not answer in time."),
    Family("gpu_healthcheck_gpu_ecc_errors_total", "counter",
           "ECC errors reported by NVML; counter=volatile (since driver load) or aggregate "
           "(lifetime), type=corrected or uncorrected."),
    Family("gpu_healthcheck_gpu_remapped_rows_total", "counter",
           "Memory rows remapped, by type=correctable or uncorrectable (Ampere and later)."),
    Family("gpu_healthcheck_gpu_remap_pending", "gauge",
           "1 when a row remap is pending (the GPU needs a reset)."),
    Family("gpu_healthcheck_gpu_remap_failure", "gauge",
           "1 when a row remap failed (the GPU needs RMA)."),
    Family("gpu_healthcheck_gpu_remap_banks", "gauge",
           "Memory banks by the row remapper's availability of spare rows (max, high, partial, "
           "low, none), from NVML's histogram (Ampere and later)."),
    Family("gpu_healthcheck_gpu_retired_pages_total", "counter",
           "Memory pages retired, by cause=sbe (multiple single-bit) or dbe (double-bit)."),
    Family("gpu_healthcheck_gpu_retired_pages_pending", "gauge",
           "1 when a page retirement is pending (the GPU needs a reset)."),
    Family("gpu_healthcheck_gpu_nvlink_errors_total", "counter",
           "NVLink errors since the driver loaded, summed over the GPU's links, by type=crc, "
           "replay or recovery."),
    Family("gpu_healthcheck_gpu_nvlink_links_down", "gauge",
           "NVLink links of the GPU that report inactive."),
    Family("gpu_healthcheck_gpu_pcie_replays_total", "counter",
           "PCIe replays (link-level retransmissions) since the driver loaded."),
    Family("gpu_healthcheck_gpu_fabric_state", "gauge",
           "1 for the GPU's NVSwitch fabric registration state (not_started, in_progress, "
           "completed, completed_error), 0 for the others; absent where there is no fabric."),
)
FABRIC_STATES = ("not_started", "in_progress", "completed", "completed_error")
REMAP_AVAILABILITY = ("max", "high", "partial", "low", "none")  # nvmlRowRemapperHistogramValues_t
# The RDMA ports (checks/network.py), named as node_exporter's infiniband collector names its
# own (node_infiniband_state_id, ..._rate_bytes_per_second), under our prefix.
PORT_LABELS = ("device", "port", "link_layer", "pci_bus_id")
PORT_FAMILIES: Tuple[Family, ...] = (
    Family("gpu_healthcheck_ib_port_active", "gauge",
           "1 when the RDMA port is ACTIVE with a physical link (RoCE: and its netdev up)."),
    Family("gpu_healthcheck_ib_state_id", "gauge",
           "The RDMA port's logical state as the kernel numbers it (4 = ACTIVE)."),
    Family("gpu_healthcheck_ib_physical_state_id", "gauge",
           "The RDMA port's physical state as the kernel numbers it (5 = LinkUp, 2 = Polling)."),
    Family("gpu_healthcheck_ib_rate_bytes_per_second", "gauge",
           "The RDMA port's current rate (the kernel's rate, Gb/s, in bytes per second)."),
    Family("gpu_healthcheck_ib_port_errors_total", "counter",
           "The RDMA port's error counters since they were last cleared, by counter "
           "(symbol_error, link_downed, ...)."),
)
FAMILIES = FAMILIES + PORT_FAMILIES + REPAIR_FAMILIES


# --- what a run contributes (pure) -------------------------------------------------------

def count_actions(events: Sequence["LogEvent"]) -> Dict[str, int]:
    """Increments of the persisted counters for one run's events."""
    from ..model import Outcome

    counts = dict.fromkeys(COUNTERS, 0)
    for event in events:
        if event.kind == "drain" and event.outcome is Outcome.APPLIED:
            counts["drains"] += 1
        elif event.kind == "refused":
            counts["drain_refusals"] += 1
        elif event.kind == "pending" and event.outcome is not Outcome.DROPPED:  # a stale one dropped is not kept
            counts["pending_drains"] += 1
        elif event.kind == "resume" and event.outcome is Outcome.APPLIED:
            counts["resumes"] += 1
        elif event.kind == "repair":
            step = event.fields.get("GPU_HEALTHCHECK_REPAIR_STEP")
            action = event.fields.get("GPU_HEALTHCHECK_REPAIR_ACTION")
            if step in ("reset", "reset_refused", "reboot") and action in ("reset", "reboot"):
                counts[f"repairs_attempted_{action}"] += 1
            elif step == "resumed" and action in ("reset", "reboot"):
                counts[f"repairs_succeeded_{action}"] += 1
            elif step == "rma":
                counts["gpus_marked_rma"] += 1
    return counts


def gpu_values(outcome: "RunOutcome") -> List[Dict[str, Any]]:
    """The per-GPU values of the run's snapshot (every GPU NVML listed, not only the job's)."""
    gpus = outcome.snapshot.gpus if outcome.snapshot is not None else ()
    values = []
    for g in gpus:
        values.append({
            "gpu": str(g.index), "uuid": g.uuid or "", "serial": g.serial or "",
            "pci_bus_id": g.pci_bus_id or "", "lost": g.lost is not None,
            "ecc": {"volatile": {"corrected": g.ecc_volatile_corrected,
                                 "uncorrected": g.ecc_volatile_uncorrected},
                    "aggregate": {"corrected": g.ecc_aggregate_corrected,
                                  "uncorrected": g.ecc_aggregate_uncorrected}},
            "remapped_rows": {"correctable": g.remap_correctable,
                              "uncorrectable": g.remap_uncorrectable},
            "remap_pending": g.remap_pending, "remap_failure": g.remap_failure,
            "model": g.name or "",
            "remap_banks": dict(zip(REMAP_AVAILABILITY, g.remap_histogram)) if g.remap_histogram else None,
            "retired_pages": {"sbe": g.retired_sbe, "dbe": g.retired_dbe},
            "retired_pending": g.retired_pending,
            "nvlink_errors": {"crc": g.nvlink_crc_errors, "replay": g.nvlink_replay_errors,
                              "recovery": g.nvlink_recovery_errors},
            "nvlink_down": len(g.nvlink_down) if g.nvlink_links and g.nvlink_down is not None else None,
            "pcie_replays": g.pcie_replay,
            "fabric_state": _fabric_state(g.fabric_state, g.fabric_status),
        })
    return values


def port_values(outcome: "RunOutcome") -> List[Dict[str, Any]]:
    """The RDMA ports of the run's snapshot (none on a node without /sys/class/infiniband)."""
    from ..netmodel import ERROR_COUNTERS

    net = outcome.snapshot.network if outcome.snapshot is not None else None
    values = []
    for p in net.ports if net is not None else ():
        up = p.up
        if up and p.link_layer == "Ethernet" and p.operstate not in (None, "up"):
            up = False
        values.append({"device": p.hca, "port": str(p.port), "link_layer": p.link_layer or "",
                       "pci_bus_id": p.pci or "", "active": up, "state": p.state,
                       "phys_state": p.phys_state, "rate_gbps": p.rate_gbps,
                       "counters": {name: getattr(p, name) for name in ERROR_COUNTERS}})
    return values


def _fabric_state(state: Optional[int], status: Optional[int]) -> Optional[str]:
    if state == 3:
        return "completed" if not status else "completed_error"
    return {1: "not_started", 2: "in_progress"}.get(state or 0)


def run_values(outcome: "RunOutcome", now: float) -> Dict[str, Any]:
    """The last-run values of one mode."""
    findings: Dict[Tuple[str, str], int] = {}
    for f in outcome.report.get("findings") or ():
        key = (str(f.get("check")), str(f.get("severity")))
        findings[key] = findings.get(key, 0) + 1
    return {"timestamp": round(now, 3), "duration_s": outcome.report.get("duration_s") or 0.0,
            "verdict": outcome.report.get("verdict"),
            "findings": [[c, s, n] for (c, s), n in sorted(findings.items())]}


def empty_state() -> Dict[str, Any]:
    return {"schema": SCHEMA, "counters": dict.fromkeys(COUNTERS, 0), "runs": {},
            "gpus": None}


def valid_state(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return False
    counters, runs = data.get("counters"), data.get("runs")
    return (isinstance(counters, dict) and isinstance(runs, dict)
            and all(isinstance(counters.get(c, 0), int) for c in COUNTERS)
            and all(m in MODES and isinstance(v, dict) for m, v in runs.items())
            and (data.get("gpus") is None or isinstance(data.get("gpus"), dict))
            and (data.get("repair") is None or isinstance(data.get("repair"), dict)))


def update_state(state: Dict[str, Any], outcome: "RunOutcome", mode: str, now: float,
                 gpu_repairs: Optional[List[Dict[str, Any]]] = None, refused: bool = False) -> Dict[str, Any]:
    """The new state after one run (pure: returns a new dict); gpu_repairs: each GPU's
    repairs within repair.window_s (metricsrepair.gpu_repairs), None to keep the last."""
    new = json.loads(json.dumps(state))
    for name, inc in count_actions(outcome.events).items():
        new["counters"][name] = int(new["counters"].get(name, 0)) + inc
    new["runs"][mode] = run_values(outcome, now)
    new["config_refused"] = 1 if refused else 0
    gpus = gpu_values(outcome)
    # A run where NVML listed nothing (driver down) keeps the last read: the verdict series
    # carries the failure, and the read timestamp shows the GPU values are old.
    if gpus:
        new["gpus"] = {"timestamp": round(now, 3), "list": gpus}
    if outcome.snapshot is not None:
        new["ports"] = port_values(outcome)
    new["repair"] = update_repair(new.get("repair"), outcome.events, now, gpu_repairs)
    return new


# --- text format (pure) ------------------------------------------------------------------

def samples(state: Mapping[str, Any]) -> Dict[str, List[Tuple[Dict[str, str], Any]]]:
    """family name -> [(labels, value)] for everything the state holds."""
    out: Dict[str, List[Tuple[Dict[str, str], Any]]] = {f.name: [] for f in FAMILIES}
    p = "gpu_healthcheck_"
    for mode in MODES:
        run = (state.get("runs") or {}).get(mode)
        if not run:
            continue
        out[p + "last_run_timestamp_seconds"].append(({"mode": mode}, run.get("timestamp", 0)))
        out[p + "last_run_duration_seconds"].append(({"mode": mode}, run.get("duration_s", 0.0)))
        for verdict in VERDICTS:
            out[p + "verdict"].append(({"mode": mode, "verdict": verdict},
                                       1 if run.get("verdict") == verdict else 0))
        for check, severity, count in run.get("findings") or ():
            out[p + "findings"].append(({"mode": mode, "check": check, "severity": severity}, count))
    if "config_refused" in state:
        out[p + "config_refused"].append(({}, int(state.get("config_refused") or 0)))
    for name in COUNTERS:
        out[p + name + "_total"].append(({}, int((state.get("counters") or {}).get(name, 0))))
    gpus = state.get("gpus")
    if gpus:
        out[p + "gpus_read_timestamp_seconds"].append(({}, gpus.get("timestamp", 0)))
        for g in gpus.get("list") or ():
            ident = {k: str(g.get(k, "")) for k in GPU_LABELS}
            if g.get("model"):
                out[p + "gpu_info"].append(({**ident, "modelName": str(g["model"])}, 1))
            out[p + "gpu_lost"].append((ident, bool(g.get("lost"))))
            for availability, banks in (g.get("remap_banks") or {}).items():
                if isinstance(banks, int):
                    out[p + "gpu_remap_banks"].append(({**ident, "availability": availability}, banks))
            for counter, by_type in (g.get("ecc") or {}).items():
                for kind, value in by_type.items():
                    if value is not None:
                        out[p + "gpu_ecc_errors_total"].append(
                            ({**ident, "counter": counter, "type": kind}, value))
            for kind, value in (g.get("remapped_rows") or {}).items():
                if value is not None:
                    out[p + "gpu_remapped_rows_total"].append(({**ident, "type": kind}, value))
            for cause, value in (g.get("retired_pages") or {}).items():
                if value is not None:
                    out[p + "gpu_retired_pages_total"].append(({**ident, "cause": cause}, value))
            for kind, value in (g.get("nvlink_errors") or {}).items():
                if value is not None:
                    out[p + "gpu_nvlink_errors_total"].append(({**ident, "type": kind}, value))
            if g.get("nvlink_down") is not None:
                out[p + "gpu_nvlink_links_down"].append((ident, g["nvlink_down"]))
            if g.get("pcie_replays") is not None:
                out[p + "gpu_pcie_replays_total"].append((ident, g["pcie_replays"]))
            if g.get("fabric_state") in FABRIC_STATES:
                for state_name in FABRIC_STATES:
                    out[p + "gpu_fabric_state"].append(
                        ({**ident, "state": state_name}, 1 if g["fabric_state"] == state_name else 0))
            for key, family in (("remap_pending", "gpu_remap_pending"),
                                ("remap_failure", "gpu_remap_failure"),
                                ("retired_pending", "gpu_retired_pages_pending")):
                if g.get(key) is not None:
                    out[p + family].append((ident, bool(g[key])))
    _port_samples(state, out)
    repair_samples(state.get("repair"), out)
    return out


def _port_samples(state: Mapping[str, Any], out: Dict[str, List[Tuple[Dict[str, str], Any]]]) -> None:
    p = "gpu_healthcheck_ib_"
    for port in state.get("ports") or ():
        if not isinstance(port, dict):
            continue
        ident = {k: str(port.get(k, "")) for k in PORT_LABELS}
        if port.get("active") is not None:
            out[p + "port_active"].append((ident, bool(port["active"])))
        for key, family in (("state", "state_id"), ("phys_state", "physical_state_id")):
            if isinstance(port.get(key), int):
                out[p + family].append((ident, port[key]))
        if isinstance(port.get("rate_gbps"), (int, float)):
            out[p + "rate_bytes_per_second"].append((ident, int(port["rate_gbps"] * 1e9 / 8)))
        for name, value in (port.get("counters") or {}).items():
            if isinstance(value, int):
                out[p + "port_errors_total"].append(({**ident, "counter": name}, value))


def render(state: Mapping[str, Any]) -> str:
    """The node_exporter textfile for this state; HELP and TYPE for every family with samples."""
    by_family = samples(state)
    return render_text([(family, by_family[family.name]) for family in FAMILIES])


# --- files -------------------------------------------------------------------------------

def textfile_beside(metrics_file: str, name: str) -> str:
    """A run's own textfile (the sweep's, the gang check's, --suspects') in node_exporter's
    textfile folder: the folder of the node's metrics_file."""
    return os.path.join(os.path.dirname(os.path.abspath(metrics_file)), name)


def write_textfile(path: str, text: str) -> None:
    """Replace path atomically with text, mode 0644, without touching the directory's mode
    (node_exporter, not root, must read it).

    Raises:
        MetricsError: the directory is missing, a symlink, or the write fails.
    """
    from ..safefile import atomic_write

    directory, name = os.path.split(os.path.abspath(path))
    try:
        atomic_write(directory, name, text.encode("utf-8"), file_mode=0o644, private_dir=False)
    except OSError as exc:
        raise MetricsError(exc.errno, f"cannot write {path}: {exc.strerror or exc} (its directory "
                                      f"must exist; a symlink is refused)") from None


def _update_and_write(state_dir: str, metrics_file: Optional[str], outcome: "RunOutcome", mode: str,
                      now: float, gpu_repairs: Optional[List[Dict[str, Any]]] = None, refused: bool = False
                      ) -> Tuple[Dict[str, Any], List[str]]:
    """Read-modify-write <state_dir>/metrics-state.json and rewrite metrics_file, both under
    the flock, so a slower run can never put an older picture back; (new state, notes).
    metrics_file None (a refused config): the textfile the state names, the last trusted
    run's; none named, nothing is written."""
    from ..safefile import Locked, SafeFileError, atomic_write, open_dir, read_file

    notes: List[str] = []
    path = os.path.join(state_dir, STATE_FILE)
    try:
        dfd = open_dir(state_dir, True)
    except OSError as exc:
        raise MetricsError(exc.errno or 0, f"cannot use state_dir {state_dir}: {exc.strerror or exc}") from None
    try:
        try:
            lock = Locked(dfd, LOCK_FILE, os.path.join(state_dir, LOCK_FILE), exclusive=True, create=True)
        except SafeFileError as exc:
            raise MetricsError(exc.errno, f"cannot use {os.path.join(state_dir, LOCK_FILE)}: "
                                          f"{exc.strerror or exc}") from None
        with lock:
            state = empty_state()
            try:
                raw = read_file(state_dir, STATE_FILE)
            except OSError as exc:
                raw = None
                notes.append(f"cannot read {path} ({exc.strerror or exc}); counters start again at 0")
            if raw is not None:
                try:
                    loaded = json.loads(raw.decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    loaded = None
                if valid_state(loaded):
                    state = loaded
                else:
                    notes.append(f"{path} is corrupt; counters start again at 0")
            textfile = metrics_file or state.get("textfile")
            if not isinstance(textfile, str) or not textfile:
                return state, notes + ["the config was refused and no trusted run has named a metrics "
                                       "textfile yet: gpu_healthcheck_config_refused is not written"]
            new = update_state(state, outcome, mode, now, gpu_repairs, refused)
            new["textfile"] = textfile
            try:
                atomic_write(state_dir, STATE_FILE, json.dumps(new, sort_keys=True).encode())
            except OSError as exc:
                raise MetricsError(exc.errno or 0, f"cannot write {path}: {exc.strerror or exc}") from None
            write_textfile(textfile, render(new))
            return new, notes
    finally:
        os.close(dfd)


def write_metrics(config: "Config", outcome: "RunOutcome", mode: str,
                  now: Optional[float] = None) -> List[str]:
    """Update the persisted state and rewrite config.metrics_file; returns notes for stderr.

    Raises:
        MetricsError: the state or the metrics file cannot be written (names the path).
    """
    if not config.metrics_file and not config.refused:
        return []
    when = time.time() if now is None else now
    repairs: Optional[List[Dict[str, Any]]] = None
    notes: List[str] = []
    if mode == "node":  # the ledgers are read off the prolog's path; the last read is kept
        from .metricsrepair import gpu_repairs

        repairs, notes = gpu_repairs(config, outcome.snapshot, when)
    # a refused config's own metrics_file is not trusted: the textfile the last trusted run
    # wrote (kept in the state) gets the refusal
    _, more = _update_and_write(config.state_dir, config.metrics_file, outcome, mode, when, repairs,
                                refused=config.refused is not None)
    return notes + more
