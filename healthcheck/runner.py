"""One run of gpu-healthcheck: read the node, judge it, act on it, in that order.

    outcome = run(RunRequest(mode=Mode.PROLOG, environ=os.environ), config)
    outcome.exit_code, outcome.report, outcome.events

read_node() calls the readers (NVML, sysfs, kernel log, CUDA probes, state files, the Slurm
environment); judge() is pure; act() calls the effectors (scontrol, state files).  The caller
(cli) writes the report and the log events.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import __version__
from .checks import CheckContext, CheckCrash, run_checks
from .config import Config
from .kernlog import boot_wallclock, position_now, read_kernel_log
from .model import (Baseline, Finding, GpuBaseline, GpuSnapshot, JobContext, KernelLogWindow,
                    Mode, NodeAction, NodeSnapshot, ProbeResult, ProbeStatus, Severity, UsageError,
                    Verdict)
from .nvml import read_nvml
from .records import NamedTuple
from .slurmenv import job_from_env, map_job_gpus
from .state import PendingDrain, StateStore
from .sysfs import read_driver_age, read_sysfs_gpus
from .verdict import (DrainDecision, decide_drain, drain_reason, epilog_exit, gpu_nodes, is_ours,
                      may_resume, node_exit, prolog_exit, refused_reason, verdict_of)

# journald priorities (syslog levels)
CRIT, ERR, WARNING, NOTICE, INFO = 2, 3, 4, 5, 6


class LogEvent(NamedTuple):
    """One thing worth a journal entry; kind picks its MESSAGE_ID."""

    kind: str  # summary | finding | drain | resume | refused | pending | error
    priority: int
    message: str
    fields: Dict[str, str] = {}  # never mutated: replaced whole


class RunRequest(NamedTuple):
    mode: Mode
    environ: Mapping[str, str]
    level: str = "quick"
    act: bool = False  # --node --act; prolog and epilog always act
    gpus: Optional[Tuple[int, ...]] = None  # --gpus
    started_monotonic: Optional[float] = None  # when the process started: the budget counts from it


class RunOutcome(NamedTuple):
    exit_code: int
    report: Dict[str, Any]
    events: List[LogEvent]
    snapshot: Optional[NodeSnapshot] = None
    findings: List[Finding] = []
    crashes: List[CheckCrash] = []


# Shares of `act_budget_s` (HealthCheckProgram's run) that the NVML read and each scontrol call
# may take at most; the CUDA probe gets what is left once the calls after it are reserved.
# With the defaults (50 s): NVML 7.5 s, scontrol 7.5 s a call, and the probe at most what is
# left after two more scontrol calls and a margin for writing the report and exiting.
NVML_SHARE, SCONTROL_SHARE, MARGIN_S = 0.15, 0.15, 2.0


def fit_to_budget(config: Config) -> Config:
    """The config of a run that must end within `act_budget_s`: NVML and scontrol deadlines
    shrunk to their shares of it (pure)."""
    budget = config.act_budget_s
    return config._replace(nvml_timeout_s=min(config.nvml_timeout_s, NVML_SHARE * budget),
                           scontrol_timeout_s=min(config.scontrol_timeout_s, SCONTROL_SHARE * budget))


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(epoch))


# --- reading -----------------------------------------------------------------------------

def read_node(request: RunRequest, config: Config, host: str, store: StateStore,
              events: List[LogEvent], probe_cap: Optional[Callable[[], float]] = None,
              node: Optional[str] = None) -> Tuple[NodeSnapshot, Optional[Tuple[int, ...]]]:
    """Every reader, once.  Returns the snapshot and the GPUs under test (None = all).
    probe_cap, where the run has a budget, says how many seconds the CUDA probe may take."""
    mode = request.mode
    job: Optional[JobContext] = job_from_env(request.environ) if mode is not Mode.NODE else None
    raw_job_id = request.environ.get("SLURM_JOB_ID") or request.environ.get("SLURM_JOBID")
    if job is not None and job.job_id is None and raw_job_id is not None:
        events.append(LogEvent("error", ERR, f"SLURM_JOB_ID={raw_job_id[:40]!r} is not a Slurm job id: "
                                             f"no baseline, AdminComment or job in the reason for it"))
    nvml = read_nvml(config.nvml_timeout_s)
    sysfs_gpus, sysfs_error = read_sysfs_gpus(config.sysfs_root)
    from .procinfo import with_owners

    gpus = name_lost_gpu(with_owners(nvml.gpus, config.proc_root), sysfs_gpus)
    selected: Optional[Tuple[int, ...]] = request.gpus
    if request.gpus is not None and nvml.error is None:
        missing = sorted(set(request.gpus) - {g.index for g in gpus})
        if missing:
            raise UsageError(f"--gpus {','.join(map(str, missing))}: this node has "
                             f"{len(gpus)} GPU(s), NVML indices 0-{len(gpus) - 1}"
                             if gpus else f"--gpus: this node has no GPUs")
    if job is not None:
        if job.gpu_ids is not None:
            layout = None
            if any(i.isdigit() for i in job.gpu_ids):
                from .gres import gres_conf_path, read_layout

                layout = read_layout(gres_conf_path(config.gres_conf, dict(request.environ)),
                                     job.node_name or config.node_name or host, config.state_dir)
            selected, error = map_job_gpus(job.gpu_ids, gpus, layout) if nvml.error is None else ((), None)
            if error:
                job = job._replace(gpu_ids_error=f"{job.gpu_ids_source}={','.join(job.gpu_ids)}: {error}")
                selected = ()
        else:
            selected = ()  # malformed list: probe nothing, judge with NVML only
        gpus = _with_slurm_jobs(gpus, selected or (), config, request.environ,
                                node or job.node_name or host, events)
    snapshot = NodeSnapshot(host=host, nvml_error=nvml.error, driver_version=nvml.driver_version,
                            gpus=gpus, sysfs_gpus=sysfs_gpus, sysfs_error=sysfs_error, job=job,
                            driver_age_s=read_driver_age(config.proc_root),
                            selected=tuple(selected) if selected is not None else tuple(g.index for g in gpus))

    if mode is Mode.EPILOG and job is not None and job.job_id:
        baseline, why = store.read_baseline(job.job_id)
        snapshot = snapshot._replace(baseline=baseline, baseline_error=why)
        if why:
            events.append(LogEvent("error" if "corrupt" in why or "cannot" in why else "finding",
                                   WARNING, why))
    if mode is not Mode.PROLOG:
        snapshot = snapshot._replace(kernel_log=read_kernel_log(
            config.kernel_log, _xid_window(mode, snapshot, config.xid_window_s)))
        if mode is Mode.NODE:
            snapshot = _without_acknowledged(snapshot, config, store, events)
    if mode is not Mode.EPILOG and config.probe.enabled and config.enabled("cuda.probe"):
        snapshot = snapshot._replace(probes=_probe(snapshot, config, request.level,
                                                   probe_cap() if probe_cap else None))
    return snapshot, selected


def _with_slurm_jobs(gpus: Tuple[GpuSnapshot, ...], selected: Tuple[int, ...], config: Config,
                     environ: Mapping[str, str], node: str,
                     events: List[LogEvent]) -> Tuple[GpuSnapshot, ...]:
    """With gres/mps or gres/shard several live jobs share a GPU: a process on the job's GPUs
    that no cgroup names a job for is looked up in what slurmd says runs here (one
    `scontrol listpids` call, made only when such a process exists).  A co-tenant is not a
    leftover (checks/processes.py)."""
    from .procinfo import is_mps_daemon, with_jobs

    unknown = [p for g in gpus if g.index in selected and g.processes for p in g.processes
               if p.job_id is None and not is_mps_daemon(p)]
    if not unknown:
        return gpus  # the common case: scontrol is never imported
    from .scontrol import Scontrol, ScontrolError, find_scontrol

    try:
        jobs = Scontrol(find_scontrol(config.scontrol, environ),
                        config.scontrol_timeout_s).listpids(node)
    except ScontrolError as exc:
        events.append(LogEvent("error", WARNING, f"cannot ask slurmd which jobs run on {node} "
                                                 f"({exc}); processes on the job's GPUs count as "
                                                 f"leftovers"))
        return gpus
    return with_jobs(gpus, jobs)


def _without_acknowledged(snapshot: NodeSnapshot, config: Config, store: StateStore,
                          events: List[LogEvent]) -> NodeSnapshot:
    """`--node`: Xids an admin has dealt with (state.XidAck) no longer count; what the kernel
    logged after each acknowledgement does.  The epilog needs none of this: its window is the
    job's own."""
    from .state import read_acks
    from .xidack import live_acks, position_key, unacknowledged, window_after

    stored, error = read_acks(store)
    if error:
        events.append(LogEvent("error", ERR, f"{error}; every Xid since boot counts"))
    acks = live_acks(stored, boot_wallclock())
    counts = tuple(sorted((pci, a.count) for pci, a in stored.items()))
    log = snapshot.kernel_log
    if not acks or log.error:
        return snapshot._replace(xid_ack_counts=counts)
    after = {}
    for ack in acks.values():
        key = position_key(ack.position)
        if key not in after:
            later = read_kernel_log(config.kernel_log, window_after(ack.position))
            after[key] = later.events
    return snapshot._replace(kernel_log=log._replace(events=unacknowledged(log.events, acks, after)),
                             xid_ack_counts=counts)


def name_lost_gpu(gpus: Tuple[GpuSnapshot, ...],
                  sysfs_gpus: Optional[Tuple[str, ...]]) -> Tuple[GpuSnapshot, ...]:
    """A lost GPU that NVML can no longer identify gets its PCI address from sysfs, when that is
    unambiguous (exactly one such GPU, exactly one NVIDIA function no other GPU accounts for),
    so the drain reason still says which board to pull (pure)."""
    from .nvml import normalise_pci

    nameless = [g for g in gpus if g.lost is not None and not g.pci_bus_id]
    if len(nameless) != 1 or not sysfs_gpus:
        return gpus
    try:
        known = {normalise_pci(g.pci_bus_id) for g in gpus if g.pci_bus_id}
        spare = [a for a in sysfs_gpus if normalise_pci(a) not in known]
    except ValueError:
        return gpus
    if len(spare) != 1:
        return gpus
    domain, bus, device = normalise_pci(spare[0])
    address = f"{domain:08X}:{bus:02X}:{device:02X}.0"
    return tuple(g._replace(pci_bus_id=address) if g is nameless[0] else g for g in gpus)


def _xid_window(mode: Mode, snapshot: NodeSnapshot, window_s: float) -> KernelLogWindow:
    if mode is Mode.EPILOG and snapshot.baseline and snapshot.baseline.kernel_log:
        pos = snapshot.baseline.kernel_log
        return KernelLogWindow(position=pos, since_monotonic_s=pos.monotonic_s,
                               since_wallclock=pos.wallclock)
    if mode is Mode.NODE and window_s > 0:
        return KernelLogWindow(since_monotonic_s=time.monotonic() - window_s,
                               since_wallclock=time.time() - window_s)
    return KernelLogWindow(since_wallclock=boot_wallclock())


def _probe(snapshot: NodeSnapshot, config: Config, level: str,
           cap_s: Optional[float] = None) -> Tuple[ProbeResult, ...]:
    from .cudaprobe import ProbeSize, ProbeTarget, run_probes

    targets: List[ProbeTarget] = []
    skipped: List[ProbeResult] = []
    for gpu in snapshot.gpus:
        if gpu.index not in snapshot.selected or gpu.lost is not None:
            continue  # never allocate on GPUs another job holds; a lost GPU already fails
        if gpu.mig_mode:
            # CUDA cannot use a MIG-enabled GPU as a whole (its GPU- UUID gives no device, as the
            # driver has it), only its MIG devices, and one process sees one: one child per device.
            # A job given some MIG devices gets those probed, never another job's.
            migs = [m for m in gpu.mig_devices or () if m.uuid]
            job_migs = snapshot.job.mig_uuids if snapshot.job else ()
            if job_migs and any((m.uuid or "").lower() in job_migs for m in migs):
                migs = [m for m in migs if (m.uuid or "").lower() in job_migs]
            if not migs:
                skipped.append(ProbeResult(gpu.index, ProbeStatus.NOT_RUN,
                                           detail="MIG is on and the GPU has no MIG device to probe"))
            targets.extend(ProbeTarget(gpu.index, m.uuid) for m in migs if m.uuid)
            continue
        if not gpu.uuid:
            skipped.append(ProbeResult(gpu.index, ProbeStatus.NOT_RUN, detail="NVML gave no UUID"))
            continue
        targets.append(ProbeTarget(gpu.index, gpu.uuid))
    if not targets:
        return tuple(skipped)
    size = ProbeSize(quick_mib=config.probe.quick_mib,
                     full_fraction=config.probe.full_fraction if level == "full" else None)
    timeout_s = config.probe.timeout_s
    if level == "full":
        # Reading every byte back takes time in proportion to the memory: allow 1 s per GiB
        # (host copies and memcmp run at several GiB/s) on top of the quick deadline.
        largest_mib = max((g.memory_total_mib or 0) for g in snapshot.gpus if g.index in snapshot.selected)
        timeout_s += largest_mib / 1024.0
    if cap_s is not None and cap_s < timeout_s:
        if cap_s < MARGIN_S:
            # nothing left of act_budget_s: not checked (unknown), never a drain
            return _with_devices(tuple(
                ProbeResult(t.index, ProbeStatus.NOT_RUN,
                            detail=f"no time left within act_budget_s = {config.act_budget_s:g} s")
                for t in targets), targets) + tuple(skipped)
        timeout_s = cap_s
    return _with_devices(run_probes(targets, size, timeout_s), targets) + tuple(skipped)


def _with_devices(results: Tuple[ProbeResult, ...], targets: List[Any]) -> Tuple[ProbeResult, ...]:
    """One result per probed device: a MIG-enabled GPU has one per MIG device, named by its
    MIG- UUID (checks/probe.py judges the GPU by the worst of them)."""
    return tuple(r._replace(device=t.uuid) if t.uuid.upper().startswith("MIG-") else r
                 for r, t in zip(results, targets))


# --- judging (pure) ----------------------------------------------------------------------

def judge(snapshot: NodeSnapshot, config: Config, request: RunRequest,
          selected: Optional[Tuple[int, ...]]) -> Tuple[List[Finding], List[CheckCrash], Verdict]:
    ctx = CheckContext(config=config, mode=request.mode, level=request.level,
                       selected=selected)
    if request.mode is Mode.NODE and request.gpus is not None:
        snapshot = snapshot._replace(gpus=tuple(g for g in snapshot.gpus if g.index in request.gpus))
    findings, crashes = run_checks(snapshot, ctx)
    return findings, crashes, verdict_of(findings)


# --- acting ------------------------------------------------------------------------------

class _Effects:
    """scontrol, created on first use so a healthy prolog never spawns a process."""

    def __init__(self, config: Config, environ: Mapping[str, str]) -> None:
        self.config = config
        self.environ = environ
        self._ctl: Any = None

    def ctl_unanswered(self) -> bool:
        return self._ctl is not None and bool(self._ctl.unanswered)

    @property
    def ctl(self) -> Any:
        if self._ctl is None:
            from .scontrol import Scontrol, find_scontrol

            self._ctl = Scontrol(find_scontrol(self.config.scontrol, self.environ),
                                 self.config.scontrol_timeout_s)
        return self._ctl


# Reasons slurmctld writes itself when our prolog/epilog exits non-zero: a pending drain of ours
# replaces them, since they stand for our own failed drain.
SLURM_OWN_REASONS = ("Prolog error", "Epilog error")


def _drain(effects: _Effects, store: StateStore, node: str, reason: str, mode: Mode,
           job_id: Optional[str], events: List[LogEvent], fields: Dict[str, str],
           replace_slurm_reason: bool = False,
           counters: Tuple[Tuple[str, int], ...] = ()) -> NodeAction:
    """Drain through scontrol, within the budget; on failure leave a pending drain."""
    from .scontrol import ScontrolError

    try:
        nodes = effects.ctl.show_nodes()
        this = next((n for n in nodes if n.name == node), None)
        if this is None:
            raise ScontrolError(["scontrol", "show", "nodes"], f"node {node} not in the output")
        if replace_slurm_reason and this.drained and (this.reason or "").startswith(SLURM_OWN_REASONS):
            effects.ctl.set_reason(node, reason)
            _note_our_drain(store, node, reason, counters)
            events.append(LogEvent("drain", CRIT, f"drained {node}: {reason} (replacing Slurm's "
                                                  f"{this.reason!r} left by our pending drain)",
                                   {**fields, "GPU_HEALTHCHECK_OUTCOME": "applied"}))
            return NodeAction("drain", reason)
        decision = decide_drain(this, nodes, effects.config.drain.max_fraction)
        if decision is DrainDecision.REFUSED:
            ours = sum(1 for n in nodes if n.drained and is_ours(n.reason))
            return _refused(effects, node, reason, events, fields,
                            f"drain of {node} refused: {ours} of {len(gpu_nodes(nodes))} GPU nodes "
                            f"already drained by gpu-healthcheck, drain.max_fraction = "
                            f"{effects.config.drain.max_fraction}; would have drained with: {reason}")
        if decision is DrainDecision.ADMIN_OWNED:
            message = f"{node} is already drained by someone else ({this.reason}); their reason is kept"
            events.append(LogEvent("drain", WARNING, message + f"; ours would be: {reason}",
                                   {**fields, "GPU_HEALTHCHECK_OUTCOME": "kept"}))
            return NodeAction("none", reason, detail=message, extra={"admin_owned": True})
        if decision is DrainDecision.ALREADY_OURS:
            _note_our_drain(store, node, this.reason or reason, counters)
            message = f"{node} is already drained by gpu-healthcheck ({this.reason})"
            events.append(LogEvent("drain", NOTICE, message, {**fields, "GPU_HEALTHCHECK_OUTCOME": "kept"}))
            return NodeAction("none", reason, detail=message, extra={"already_ours": True})
        effects.ctl.drain(node, reason)
        refused = _hold_budget(effects, node, reason, events, fields)
        if refused is not None:
            return refused
    except ScontrolError as exc:
        pending = PendingDrain(reason=reason, node=node, mode=mode.value, job_id=job_id,
                               created_at=time.time())
        earlier, _ = store.read_pending()
        try:
            if earlier is not None and earlier.node == node:
                # the first fault is the one to name (a failed prolog is followed by an epilog)
                kept = f"an earlier pending drain is kept in {store.state_dir}: {earlier.reason}"
            else:
                store.write_pending(pending)
                kept = f"pending drain kept in {store.state_dir} for the next run"
        except OSError as write_exc:
            kept = f"and the pending drain could not be written either: {write_exc}"
        message = f"cannot drain {node} now ({exc}); {kept}; reason: {reason}"
        events.append(LogEvent("pending", CRIT, message, {**fields, "GPU_HEALTHCHECK_OUTCOME": "pending"}))
        return NodeAction("drain", reason, detail=message, extra={"pending": True})
    events.append(LogEvent("drain", CRIT, f"drained {node}: {reason}",
                           {**fields, "GPU_HEALTHCHECK_OUTCOME": "applied"}))
    _note_our_drain(store, node, reason, counters)
    if job_id:
        _admin_comment(effects, job_id, reason, events)
    return NodeAction("drain", reason)


def _note_our_drain(store: StateStore, node: str, reason: str,
                    counters: Tuple[Tuple[str, int], ...] = ()) -> None:
    """So that a later run can tell an admin resumed it, or reset a GPU (its volatile ECC
    counters start over), and so dealt with its Xids."""
    from .state import OurDrain, write_our_drain

    try:
        write_our_drain(store, OurDrain(node=node, reason=reason, drained_at=time.time(),
                                        volatile_ecc=counters))
    except OSError:
        pass  # costs only the automatic acknowledgement; the drain itself stands


def _acknowledge_resets(snapshot: NodeSnapshot, config: Config, store: StateStore, node: str,
                        events: List[LogEvent]) -> NodeSnapshot:
    """GPUs reset since our drain (their volatile ECC counters started over): their Xids are
    dealt with.  The note then holds the counters as they are now, so one reset acknowledges
    once and a later Xid still counts."""
    from .state import read_our_drain, write_our_drain
    from .xidack import counters_started_over, kernel_pci

    ours = read_our_drain(store)
    if ours is None or ours.node != node or not ours.volatile_ecc:
        return snapshot
    reset = counters_started_over(ours.volatile_ecc, snapshot.gpus)
    if not reset:
        return snapshot
    indices = tuple(g.index for g in snapshot.gpus
                    if g.pci_bus_id and kernel_pci(g.pci_bus_id) in reset)
    events.append(LogEvent("resume", NOTICE, f"GPU(s) {', '.join(reset)} were reset since our drain "
                                             f"(volatile ECC counters started over): their Xids "
                                             f"count as dealt with",
                           {"GPU_HEALTHCHECK_OUTCOME": "acknowledged"}))
    snapshot = acknowledge_xids(snapshot, config, store, events, indices, by="reset")
    now = {kernel_pci(g.pci_bus_id): (g.ecc_volatile_corrected or 0) + (g.ecc_volatile_uncorrected or 0)
           for g in snapshot.gpus if g.pci_bus_id}
    try:
        write_our_drain(store, ours._replace(volatile_ecc=tuple(
            (p, now.get(p, 0) if p in reset else n) for p, n in ours.volatile_ecc)))
    except OSError:
        pass
    return snapshot


def _admin_resumed(effects: _Effects, store: StateStore, node: str, events: List[LogEvent]) -> bool:
    """Whether the node we drained is back in service: an admin resumed it, and so dealt with
    what drained it.  Asks scontrol only when we hold a note of our drain (state.OurDrain)."""
    from .scontrol import ScontrolError
    from .state import clear_our_drain, read_our_drain

    ours = read_our_drain(store)
    if ours is None or ours.node != node:
        return False
    try:
        this = next((n for n in effects.ctl.show_nodes() if n.name == node), None)
    except ScontrolError as exc:
        events.append(LogEvent("error", WARNING, f"cannot tell whether {node} was resumed: {exc}"))
        return False
    if this is None or this.drained:
        return False
    clear_our_drain(store)
    events.append(LogEvent("resume", NOTICE, f"{node} was resumed by an admin after our drain "
                                             f"({ours.reason}); the Xids seen so far count as "
                                             f"dealt with", {"GPU_HEALTHCHECK_OUTCOME": "acknowledged"}))
    return True


def acknowledge_xids(snapshot: NodeSnapshot, config: Config, store: StateStore,
                     events: List[LogEvent], gpus: Optional[Tuple[int, ...]], by: str) -> NodeSnapshot:
    """Record that the Xids in the snapshot's kernel log, on these GPUs (None: all), are dealt
    with; returns the snapshot without them.  `by`: "ack" (--ack) or "resume"."""
    from .state import read_acks, write_acks
    from .xidack import acknowledge, gpu_pcis, kernel_pci

    log = snapshot.kernel_log
    if gpus is None:
        pcis = gpu_pcis(snapshot.gpus, log.events)
    else:
        pcis = tuple(p for p in (kernel_pci(g.pci_bus_id) for g in snapshot.gpus
                                 if g.index in gpus and g.pci_bus_id) if p)
    stored, _ = read_acks(store)
    acks = acknowledge(stored, pcis, log.events, log.end or position_now(config.kernel_log),
                       boot_wallclock(), time.time(), by)
    try:
        write_acks(store, acks)
    except OSError as exc:
        events.append(LogEvent("error", ERR, f"cannot record the Xid acknowledgement in "
                                             f"{store.state_dir}: {exc}; the Xids still count"))
        return snapshot
    dealt = [e for e in log.events if e.pci in pcis]
    if dealt:
        events.append(LogEvent("resume", NOTICE, "Xids acknowledged (" + by + "): " + ", ".join(
            f"{e.pci} Xid {e.xid if e.xid is not None else 'off-bus'} x{e.occurrences}" for e in dealt),
                               {"GPU_HEALTHCHECK_OUTCOME": "acknowledged"}))
    return snapshot._replace(kernel_log=log._replace(events=tuple(e for e in log.events if e.pci not in pcis)),
                             xid_ack_counts=tuple(sorted((p, a.count) for p, a in acks.items())))


def ack(config: Config, gpus: Optional[Tuple[int, ...]]) -> Tuple[int, List[str], List[LogEvent]]:
    """`gpu-healthcheck --ack [--gpus LIST]`: the admin has dealt with the Xids seen so far on
    these GPUs (all by default).  Returns (exit code, lines to print, log events)."""
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
        config.kernel_log, _xid_window(Mode.NODE, snapshot, config.xid_window_s)))
    if snapshot.kernel_log.error:
        return 3, [f"gpu-healthcheck: --ack: {snapshot.kernel_log.error}; nothing acknowledged"], events
    snapshot = _without_acknowledged(snapshot, config, store, events)
    before = snapshot.kernel_log.events
    try:
        after = acknowledge_xids(snapshot, config, store, events, gpus, by="ack")
    except OSError as exc:
        return 3, [f"gpu-healthcheck: --ack: cannot use {store.state_dir}: {exc}"], events
    if any(e.kind == "error" for e in events):
        return 3, [e.message for e in events if e.kind == "error"], events
    dealt = [e for e in before if e not in after.kernel_log.events]
    which = "every GPU" if gpus is None else "GPU(s) " + ",".join(map(str, gpus))
    lines = [f"acknowledged the Xids so far on {which} of {host}: "
             + (", ".join(f"{e.pci} Xid {e.xid if e.xid is not None else 'off-bus'} x{e.occurrences}"
                          for e in dealt) or "none were counting")]
    counts = dict(after.xid_ack_counts)
    worn = [f"{p} ({c})" for p, c in sorted(counts.items()) if c >= config.xid_escalate_after]
    if worn:
        lines.append(f"a new failing Xid on {', '.join(worn)} will escalate to RMA "
                     f"(xid_escalate_after = {config.xid_escalate_after})")
    return 0, lines, events


def _report_only(node: str, reason: Optional[str], mode: Mode, events: List[LogEvent],
                 fields: Dict[str, str]) -> NodeAction:
    """`[drain] report_only = true`: no scontrol call; say what would have been done."""
    if reason is None:
        return NodeAction("none", dry_run=True, extra={"report_only": True})
    effect = "drain" if mode is Mode.NODE else f"drain (and fail the {mode.value})"
    message = f"report_only: would {effect} {node}: {reason}"
    events.append(LogEvent("drain", WARNING, message,
                           {**fields, "GPU_HEALTHCHECK_OUTCOME": "report_only"}))
    return NodeAction("none", reason, dry_run=True, detail=message, extra={"report_only": True})


def _note_refusal(effects: _Effects, node: str, reason: str, events: List[LogEvent]) -> None:
    """A refused drain must not vanish: note it in the node's Comment, which `--cluster`
    lists (the node runs jobs, so its Reason stays empty).  Best effort."""
    from .scontrol import ScontrolError
    from .verdict import refused_comment

    try:
        effects.ctl.set_comment(node, refused_comment(reason, _iso(time.time())))
    except ScontrolError as exc:
        events.append(LogEvent("error", WARNING, f"cannot note the refused drain in the Comment "
                                                 f"of {node}: {exc}"))


def _hold_budget(effects: _Effects, node: str, reason: str, events: List[LogEvent],
                 fields: Dict[str, str]) -> Optional[NodeAction]:
    """Our drain is in: re-read and step back if concurrent drains took the budget first.
    None when the drain stands."""
    from .scontrol import ScontrolError, hold_budget

    max_fraction = effects.config.drain.max_fraction
    try:
        check = hold_budget(effects.ctl, node, reason, max_fraction)
    except ScontrolError as exc:
        events.append(LogEvent("error", ERR, f"drained {node}, but the drain budget could not be "
                                             f"re-checked ({exc}); the drain stays", fields))
        return None
    if check.kept:
        return None
    first = ", ".join(check.ahead) or "earlier drains"
    if not check.resumed:
        message = (f"{node} is past the drain budget ({check.drained} of {check.total} nodes drained by "
                   f"gpu-healthcheck, drain.max_fraction = {max_fraction}, {first} first), but its "
                   f"reason is no longer ours; left as it is")
        events.append(LogEvent("drain", WARNING, message, {**fields, "GPU_HEALTHCHECK_OUTCOME": "kept"}))
        return NodeAction("none", reason, detail=message, extra={"admin_owned": True})
    return _refused(effects, node, reason, events, fields,
                    f"drain of {node} refused: {check.drained} of {check.total} GPU nodes drained by "
                    f"gpu-healthcheck at once, drain.max_fraction = {max_fraction}; {first} drained "
                    f"first, so {node} resumed itself; would have drained with: {reason}")


def _refused(effects: _Effects, node: str, reason: str, events: List[LogEvent],
             fields: Dict[str, str], message: str) -> NodeAction:
    """A drain the budget refused: logged critical, noted on the node (--cluster lists it)."""
    events.append(LogEvent("refused", CRIT, message, {**fields, "GPU_HEALTHCHECK_OUTCOME": "refused"}))
    _note_refusal(effects, node, reason, events)
    return NodeAction("none", reason, detail=message, extra={"refused": True})


def _admin_comment(effects: _Effects, job_id: str, reason: str, events: List[LogEvent]) -> None:
    """Tie the job's own record to the GPU at fault; best effort, bounded by the timeout."""
    from .scontrol import ScontrolError

    try:
        effects.ctl.set_admin_comment(job_id, reason)
    except ScontrolError as exc:
        events.append(LogEvent("error", WARNING, f"cannot set AdminComment of job {job_id}: {exc}"))


def apply_pending(effects: _Effects, store: StateStore, node: str, events: List[LogEvent]) -> Optional[str]:
    """A drain an earlier run could not apply goes first.  Returns its reason if applied."""
    pending, error = store.read_pending()
    if error:
        events.append(LogEvent("error", ERR, f"{error}; ignoring it"))
        return None
    if pending is None or pending.node != node:
        return None
    fields = {"GPU_HEALTHCHECK_PENDING_FROM": pending.mode, "SLURMD_NODENAME": node}
    if pending.job_id:
        fields["SLURM_JOB_ID"] = pending.job_id
    from .scontrol import ScontrolError

    try:
        this = next((n for n in effects.ctl.show_nodes() if n.name == node), None)
    except ScontrolError as exc:
        events.append(LogEvent("pending", CRIT, f"cannot apply the pending drain of {node} yet "
                                                f"({exc}); kept: {pending.reason}", fields))
        return None
    if this is not None and not this.drained:
        # The pending drain stood for a node that our failed exit took out of service.  It is in
        # service now: an admin resumed it (or Slurm never drained it, as after HealthCheckProgram).
        # Applying it would undo the admin's decision with an old verdict; this run's own checks
        # decide instead, and drain again if the fault is still there.
        store.clear_pending(expected=pending)
        events.append(LogEvent("pending", WARNING, f"pending drain of {node} from "
                                                   f"{_iso(pending.created_at)} dropped: the node is "
                                                   f"in service ({this.state}), so its state changed "
                                                   f"after the drain was recorded; this run's checks "
                                                   f"decide. Was: {pending.reason}",
                               {**fields, "GPU_HEALTHCHECK_OUTCOME": "dropped"}))
        return None
    action = _drain(effects, store, node, pending.reason, Mode(pending.mode), None, events,
                    fields, replace_slurm_reason=True)
    if action.extra.get("pending"):
        return None
    store.clear_pending(expected=pending)
    if action.taken == "drain" and pending.job_id:
        _admin_comment(effects, pending.job_id, pending.reason, events)
    return pending.reason


def run(request: RunRequest, config: Config, node_name: Optional[str] = None) -> RunOutcome:
    started, t0 = time.time(), time.monotonic()
    mode = request.mode
    events: List[LogEvent] = [LogEvent("error", CRIT, w) for w in config.warnings]
    environ = request.environ
    host = os.uname().nodename.split(".")[0]
    node = node_name or config.node_name or environ.get("SLURMD_NODENAME") or host
    store = StateStore(config.state_dir)
    acting = mode is not Mode.NODE or request.act
    probe_cap: Optional[Callable[[], float]] = None
    if mode is Mode.NODE and request.act:
        # HealthCheckProgram: Slurm kills it after 60 s, and a killed run drains nothing
        config = fit_to_budget(config)
        ends_at = (request.started_monotonic or t0) + config.act_budget_s
        effects = _Effects(config, environ)

        def probe_cap() -> float:
            # keep room for the scontrol calls after the probe (show nodes, drain or resume),
            # unless scontrol already proved unanswering (then those fail at once)
            calls = 0 if effects.ctl_unanswered() else 2
            return ends_at - time.monotonic() - calls * config.scontrol_timeout_s - MARGIN_S
    else:
        effects = _Effects(config, environ)
    report_only = acting and config.drain.report_only
    if acting and not report_only:
        apply_pending(effects, store, node, events)
    resumed_by_admin = (mode is Mode.NODE and request.act and not report_only
                        and _admin_resumed(effects, store, node, events))

    snapshot, selected = read_node(request, config, host, store, events, probe_cap, node)
    if resumed_by_admin:
        snapshot = acknowledge_xids(snapshot, config, store, events, None, by="resume")
    elif mode is Mode.NODE and request.act and not report_only:
        snapshot = _acknowledge_resets(snapshot, config, store, node, events)
    findings, crashes, verdict = judge(snapshot, config, request, selected)
    job_id = snapshot.job.job_id if snapshot.job else None
    reason = drain_reason(findings, snapshot.gpus, mode, job_id)
    base_fields = {"GPU_HEALTHCHECK_MODE": mode.value, "SLURMD_NODENAME": node}
    if job_id:
        base_fields["SLURM_JOB_ID"] = job_id

    if mode is Mode.PROLOG and job_id:
        _write_baseline(store, snapshot, job_id, config, events)

    action = NodeAction("none", dry_run=not acting and reason is not None, reason=reason)
    if report_only:
        action = _report_only(node, reason, mode, events, base_fields)
    elif acting and reason:
        from .xidack import volatile_ecc

        action = _drain(effects, store, node, reason, mode, job_id, events, base_fields,
                        counters=volatile_ecc(snapshot.gpus))
    elif mode is Mode.NODE and request.act and verdict is not Verdict.FAIL:
        action = _maybe_resume(effects, node, findings, snapshot, events, base_fields, config,
                               request)

    if mode is Mode.EPILOG and job_id and snapshot.baseline is not None:
        store.remove_baseline(job_id)

    if mode is Mode.NODE:
        exit_code = node_exit(verdict)
    elif mode is Mode.PROLOG:
        # a refused or report-only drain lets the job start: exit 1 would make Slurm drain
        must_not_start = (reason is not None and not action.extra.get("refused")
                          and not action.extra.get("report_only"))
        exit_code = prolog_exit(must_not_start)
    else:
        exit_code = epilog_exit(action.taken == "drain")

    report = build_report(snapshot, findings, verdict, action, mode, job_id, node, started,
                          time.monotonic() - t0, request)
    for finding in findings:
        if finding.severity is not Severity.INFO or mode is Mode.NODE:
            events.append(LogEvent("finding", _priority(finding.severity), finding.message,
                                   {**base_fields, **finding_fields(finding, snapshot)}))
    for crash in crashes:
        events.append(LogEvent("error", CRIT, f"check {crash.check} crashed:\n{crash.traceback}",
                               base_fields))
    events.append(LogEvent("summary", _summary_priority(verdict),
                           f"{mode.value} on {node}: {verdict.value}, {len(findings)} finding(s)"
                           + (f", action {action.taken}" if action.taken != "none" else "")
                           + (f": {action.reason}" if action.taken != "none" else ""),
                           {**base_fields, "GPU_HEALTHCHECK_VERDICT": verdict.value}))
    # every entry findable by job and node (journalctl SLURM_JOB_ID=...), whoever made it
    events = [e._replace(fields={**base_fields, **{k: v for k, v in e.fields.items() if v}})
              for e in events]
    return RunOutcome(exit_code, report, events, snapshot, findings, crashes)


def judge_as_drained(snapshot: NodeSnapshot, config: Config, reason: Optional[str],
                     level: str) -> Tuple[Optional[str], List[Finding]]:
    """The findings of this snapshot judged in the context our drain reason names (prolog or
    epilog), on every GPU (pure).  A prolog-only fault (memory.leaked, processes.leftover) is
    a warning by hand but failed the prolog: resuming because `--node` calls it a warning would
    drain the node again at the next job start, and so on."""
    from .verdict import parse_reason

    fields = parse_reason(reason or "") or {}
    context = fields.get("context")
    if context not in (Mode.PROLOG.value, Mode.EPILOG.value):
        return None, []
    ctx = CheckContext(config=config, mode=Mode(context), level=level, selected=None)
    return context, run_checks(snapshot, ctx)[0]


def _maybe_resume(effects: _Effects, node: str, findings: List[Finding], snapshot: NodeSnapshot,
                  events: List[LogEvent], fields: Dict[str, str], config: Config,
                  request: RunRequest) -> NodeAction:
    from .scontrol import ScontrolError

    try:
        nodes = effects.ctl.show_nodes()
        this = next((n for n in nodes if n.name == node), None)
        if this is not None and refused_reason(this.comment) and request.gpus is None:
            # the refused drain's cause is gone (this full check does not drain)
            effects.ctl.set_comment(node, "")
            events.append(LogEvent("resume", NOTICE, f"{node}: a full check passes; the note of "
                                                     f"a refused drain is cleared (was: {this.comment})",
                                   {**fields, "GPU_HEALTHCHECK_OUTCOME": "cleared"}))
        if this is None or not this.drained:
            return NodeAction("none")
        context, as_drained = judge_as_drained(snapshot, config, this.reason, request.level)
        why_not = may_resume(this, findings, snapshot.gpus, partial=request.gpus is not None,
                             drain_context=context, context_findings=as_drained)
        if why_not:
            events.append(LogEvent("resume", INFO, f"{node} stays drained: {why_not}",
                                   {**fields, "GPU_HEALTHCHECK_OUTCOME": "kept"}))
            return NodeAction("none", this.reason, detail=why_not)
        effects.ctl.resume(node)
        from .state import clear_our_drain

        clear_our_drain(StateStore(config.state_dir))
    except ScontrolError as exc:
        events.append(LogEvent("error", ERR, f"cannot resume {node}: {exc}", fields))
        return NodeAction("none", detail=str(exc))
    events.append(LogEvent("resume", NOTICE, f"resumed {node}: checks pass (was: {this.reason})",
                           {**fields, "GPU_HEALTHCHECK_OUTCOME": "applied"}))
    return NodeAction("resume", this.reason)


def _write_baseline(store: StateStore, snapshot: NodeSnapshot, job_id: str, config: Config,
                    events: List[LogEvent]) -> None:
    # a baseline field is the snapshot field of the same name
    gpus = tuple(GpuBaseline(**{name: getattr(g, name) for name in GpuBaseline._fields})
                 for g in snapshot.gpus if g.uuid and g.lost is None)
    baseline = Baseline(job_id=job_id, taken_at=time.time(), gpus=gpus,
                        kernel_log=position_now(config.kernel_log))
    try:
        store.write_baseline(baseline)
    except OSError as exc:
        events.append(LogEvent("error", ERR, f"cannot write the baseline for job {job_id} in "
                                             f"{store.state_dir}: {exc}; the epilog will judge "
                                             f"absolute counters"))


def _priority(severity: Severity) -> int:
    return {Severity.FAIL: ERR, Severity.UNKNOWN: WARNING, Severity.WARN: WARNING,
            Severity.INFO: INFO}[severity]


def _summary_priority(verdict: Verdict) -> int:
    return {Verdict.FAIL: ERR, Verdict.UNKNOWN: WARNING, Verdict.WARN: WARNING,
            Verdict.PASS: INFO}[verdict]


def finding_fields(finding: Finding, snapshot: NodeSnapshot) -> Dict[str, str]:
    fields = {"GPU_HEALTHCHECK_CHECK": finding.check,
              "GPU_HEALTHCHECK_SEVERITY": finding.severity.value,
              "GPU_HEALTHCHECK_ACTION": finding.action.value}
    if finding.value is not None:
        fields["GPU_HEALTHCHECK_VALUE"] = str(finding.value)
    gpu = snapshot.gpu(finding.gpu) if finding.gpu is not None else None
    if finding.gpu is not None:
        fields["GPU_INDEX"] = str(finding.gpu)
    if gpu is not None:
        for key, value in (("GPU_UUID", gpu.uuid), ("GPU_SERIAL", gpu.serial),
                           ("GPU_PCI_BUS_ID", gpu.pci_bus_id)):
            if value:
                fields[key] = value
    return fields


def build_report(snapshot: NodeSnapshot, findings: List[Finding], verdict: Verdict,
                 action: NodeAction, mode: Mode, job_id: Optional[str], node: str,
                 started: float, duration_s: float, request: RunRequest) -> Dict[str, Any]:
    """The JSON document of CONTRACTS §3 (fields may be added, never renamed)."""
    gpus = snapshot.gpus
    if mode is Mode.NODE and request.gpus is not None:
        gpus = tuple(g for g in gpus if g.index in request.gpus)
    return {
        "schema": 1,
        "tool_version": __version__,
        "host": snapshot.host,
        "node": node,
        "mode": mode.value,
        "job_id": job_id,
        "started_at": _iso(started),
        "duration_s": round(duration_s, 3),
        "verdict": verdict.value,
        "level": request.level,
        "driver_version": snapshot.driver_version,
        "driver_age_s": snapshot.driver_age_s,
        "nvml_error": snapshot.nvml_error,
        "gpus": [{"index": g.index, "uuid": g.uuid, "serial": g.serial,
                  "pci_bus_id": g.pci_bus_id, "name": g.name, "minor_number": g.minor_number,
                  "lost": g.lost, "under_test": g.index in snapshot.selected,
                  "ecc_volatile_uncorrected": g.ecc_volatile_uncorrected,
                  "ecc_volatile_corrected": g.ecc_volatile_corrected,
                  "ecc_aggregate_uncorrected": g.ecc_aggregate_uncorrected,
                  "ecc_aggregate_corrected": g.ecc_aggregate_corrected,
                  "remap_correctable": g.remap_correctable,
                  "remap_uncorrectable": g.remap_uncorrectable,
                  "remap_pending": g.remap_pending, "remap_failure": g.remap_failure,
                  "retired_sbe": g.retired_sbe, "retired_dbe": g.retired_dbe,
                  "retired_pending": g.retired_pending,
                  "memory_total_mib": g.memory_total_mib, "memory_used_mib": g.memory_used_mib,
                  "temperature_c": g.temperature_c,
                  # what the GPU is doing, whoever runs there (another container's processes
                  # are not in a process list, but their load shows here)
                  "utilization_gpu_pct": g.utilization_gpu_pct,
                  "utilization_memory_pct": g.utilization_memory_pct, "pstate": g.pstate,
                  "power_mw": g.power_mw, "mig_mode": g.mig_mode,
                  "mig_devices": None if g.mig_devices is None else [
                      {"index": m.index, "uuid": m.uuid, "memory_total_mib": m.memory_total_mib}
                      for m in g.mig_devices],
                  "fabric": None if g.fabric_state is None else {
                      "state": g.fabric_state, "status": g.fabric_status,
                      "clique_id": g.fabric_clique_id, "cluster_uuid": g.fabric_cluster_uuid,
                      "health_mask": g.fabric_health_mask,
                      "health_summary": g.fabric_health_summary},
                  "nvlink": None if not g.nvlink_links else {
                      "links": g.nvlink_links, "down": list(g.nvlink_down or ()),
                      "crc_errors": g.nvlink_crc_errors, "replay_errors": g.nvlink_replay_errors,
                      "recovery_errors": g.nvlink_recovery_errors},
                  "pcie_replay": g.pcie_replay,
                  "memory_temperature_c": g.memory_temperature_c,
                  "remap_histogram": None if g.remap_histogram is None else dict(
                      zip(("max", "high", "partial", "low", "none"), g.remap_histogram)),
                  "recovery_action": g.recovery_action}
                 for g in gpus],
        "probes": [{"gpu": p.index, "status": p.status.value, "cu_result": p.cu_result,
                    "cu_name": p.cu_name, "bytes_tested": p.bytes_tested,
                    "duration_s": round(p.duration_s, 3), "detail": p.detail,
                    "device": p.device}
                   for p in snapshot.probes],
        "findings": [{"check": f.check, "severity": f.severity.value, "gpu": f.gpu,
                      "value": f.value, "threshold": f.threshold, "message": f.message,
                      "action": f.action.value} for f in findings],
        "action": {"taken": action.taken, "reason": action.reason, "dry_run": action.dry_run,
                   "detail": action.detail or None, **{k: v for k, v in action.extra.items()}},
    }
