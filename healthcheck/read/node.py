"""The node snapshot: every reader, once, in one record (changes nothing).

    snapshot, selected = read_node(request, config, host, node, inputs)

The readers are NVML, sysfs, procfs, the Slurm environment and gres.conf, the kernel log and
the CUDA probe: the kernel log as it is (commands/node.py then leaves out the Xids an admin
acknowledged).  What comes from state_dir (the prolog's baseline, the GPUs named before)
and from slurmctld (`scontrol listpids`) is handed in through NodeInputs by the command (commands/node.py),
which owns those doors: a reader never opens scontrol or writes the state store.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from ..config import Config
from ..logmodel import KernelLogWindow
from ..model import (ERR, NOTICE, WARNING, Baseline, DoorError, GpuSnapshot, GresLayout, JobContext,
                     LogEvent, Mode, NodeSnapshot, ProbeResult, ProbeStatus, RunRequest, UsageError,
                     co_tenant_mib)
from ..staterecords import KnownGpu
from ..netmodel import NetworkRead
from ..pci import function_form, normalise_pci, nvml_form
from ..records import NamedTuple
from ..logmodel import window_since
from .kernlog import boot_wallclock, current_boot, read_kernel_log
from .nvml import read_nvml
from .slurmenv import job_from_env
from .sysfs import read_driver_age, read_sysfs_nvidia


MapGpus = Callable[[Sequence[str], Sequence[GpuSnapshot], Optional[GresLayout]],
                   Tuple[Tuple[int, ...], Optional[str]]]


class NodeInputs(NamedTuple):
    """What read_node needs from the command: how long the probe may take, and the answers of
    doors it does not own (optional: None = not asked)."""

    # (level, the largest GPU's MiB) -> (the probe children's deadline within the run's budget,
    # None: no time left to probe; their own deadline): decide/budget.probe_timeout, which the
    # command applies with the run's budget (HealthCheckProgram, the SPANK plugin's deadline)
    probe_limits: Callable[[str, int], Tuple[Optional[float], float]]
    # Slurm's GPU ids of a job -> (NVML indices, why they cannot be told apart): how slurmd
    # numbers them is decide/gpumap.map_job_gpus's rule, which the command hands in
    map_gpus: MapGpus

    # the epilog's baseline: (baseline, why it is missing) from the state store
    baseline: Optional[Callable[[str], Tuple[Optional[Baseline], Optional[str]]]] = None
    # pid -> job id on this node (scontrol listpids); raises DoorError when slurmd cannot say
    listpids: Optional[Callable[[str], Mapping[int, str]]] = None
    # the GPUs earlier --node --act runs listed (known, error) from the state store, read only
    # where a GPU may need its name from them (_needs_known)
    known: Optional[Callable[[], Tuple[Tuple[KnownGpu, ...], Optional[str]]]] = None


def read_node(request: RunRequest, config: Config, host: str, node: str,
              inputs: NodeInputs, events: List[LogEvent]) -> Tuple[NodeSnapshot, Optional[Tuple[int, ...]]]:
    """Every reader, once.  Returns the snapshot and the GPUs under test (None = all)."""
    mode = request.mode
    job: Optional[JobContext] = job_from_env(request.environ) if mode is not Mode.NODE else None
    raw_job_id = request.environ.get("SLURM_JOB_ID") or request.environ.get("SLURM_JOBID")
    if job is not None and job.job_id is None and raw_job_id is not None:
        events.append(LogEvent("error", ERR, f"SLURM_JOB_ID={raw_job_id[:40]!r} is not a Slurm job id: "
                                             f"no baseline, AdminComment or job in the reason for it"))
    nvml = read_nvml(config.nvml_timeout_s)
    sysfs = read_sysfs_nvidia(config.sysfs_root)
    sysfs_gpus, sysfs_error = sysfs.gpus, sysfs.error
    from .procinfo import with_owners

    gpus = name_lost_gpu(with_owners(nvml.gpus, config.proc_root), sysfs_gpus)
    gone: Tuple[GpuSnapshot, ...] = ()
    if inputs.known is not None and nvml.error is None and _needs_known(gpus, sysfs_gpus, config):
        known, why = inputs.known()
        if why:
            events.append(LogEvent("error", WARNING, f"{why}: a GPU gone from NVML is not named"))
        gpus, gone = with_known(gpus, known)
    selected: Optional[Tuple[int, ...]] = request.gpus
    if request.gpus is not None and nvml.error is None:
        missing = sorted(set(request.gpus) - {g.index for g in gpus})
        if missing:
            raise UsageError(f"--gpus {','.join(map(str, missing))}: this node has "
                             f"{len(gpus)} GPU(s), NVML indices 0-{len(gpus) - 1}"
                             if gpus else "--gpus: this node has no GPUs")
    layout = None
    if job is not None:
        if job.gpu_ids is not None:
            if any(i.isdigit() for i in job.gpu_ids):
                layout = job_layout(config, request, job, host, events)
            selected, error = inputs.map_gpus(job.gpu_ids, gpus, layout) if nvml.error is None else ((), None)
            if error:
                job = job._replace(gpu_ids_error=f"{job.gpu_ids_source}={','.join(job.gpu_ids)}: {error}")
                selected = ()
        else:
            selected = ()  # malformed list: probe nothing, judge with NVML only
        if gpus and layout is None:
            layout = job_layout(config, request, job, host, events)
        gpus = with_slurm_jobs(gpus, selected or (), inputs.listpids, inputs.map_gpus, node, events,
                               layout, job.job_id, config.proc_root)
    from .sysfs import read_unbound

    excluded = out_of_service(gpus, config.exclude_gpus, layout)
    snapshot = NodeSnapshot(host=host, nvml_error=nvml.error, driver_version=nvml.driver_version,
                            gpus=gpus, sysfs_gpus=sysfs_gpus, sysfs_error=sysfs_error, job=job,
                            driver_age_s=read_driver_age(config.proc_root), out_of_service=excluded,
                            sysfs_unbound=read_unbound(config.sysfs_root, sysfs_gpus or ()),
                            sysfs_nvswitches=sysfs.nvswitches, missing_gpus=gone,
                            selected=tuple(selected) if selected is not None else tuple(g.index for g in gpus),
                            network=read_network(config, gpus),
                            shared_gres=layout.shared if layout is not None else ())

    if mode is Mode.EPILOG and job is not None and job.job_id and inputs.baseline is not None:
        baseline, why = inputs.baseline(job.job_id)
        snapshot = snapshot._replace(baseline=baseline, baseline_error=why)
        if why:
            events.append(LogEvent("error" if "corrupt" in why or "cannot" in why else "finding",
                                   WARNING, why))
    if mode is not Mode.PROLOG:
        snapshot = snapshot._replace(kernel_log=read_kernel_log(
            config.kernel_log, xid_window(mode, snapshot, config.xid_window_s)))
    if mode is not Mode.EPILOG and config.probe.enabled and config.enabled("cuda.probe"):
        snapshot = snapshot._replace(probes=probe(snapshot, config, request.level, inputs.probe_limits))
    if request.level == "deep" and mode is not Mode.EPILOG:
        started = (time.monotonic(), time.time())
        if config.deep.enabled:
            snapshot = snapshot._replace(deep=deep(snapshot, config))
        from .dcgm import read_dcgm
        from .dcgmmap import attribute

        snapshot = snapshot._replace(dcgm=attribute(read_dcgm(config, diag=True), snapshot.gpus))
        if snapshot.deep is not None:  # what the tests provoked is judged by this run
            from .deepafter import after_deep

            window = xid_window(mode, snapshot, config.xid_window_s) if mode is not Mode.PROLOG else None
            snapshot = after_deep(snapshot, config, started[0], started[1], window)
    elif mode is Mode.NODE and config.dcgm.enabled != "false":
        from .dcgm import read_dcgm
        from .dcgmmap import attribute

        snapshot = snapshot._replace(dcgm=attribute(read_dcgm(config, diag=False), snapshot.gpus))
    return snapshot, selected


def read_network(config: Config, gpus: Tuple[GpuSnapshot, ...]) -> Optional[NetworkRead]:
    """The RDMA ports; None on a node without /sys/class/infiniband, which costs that node one
    failed listdir and no import (the prolog's path)."""
    root = os.path.join(config.sysfs_root, "class", "infiniband")
    try:
        hcas = os.listdir(root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return NetworkRead(error=f"cannot list {root}: {exc.strerror or exc}")
    from ..pci import function_form
    from .infiniband import read_infiniband

    pcis = []
    for gpu in gpus:
        try:
            if gpu.pci_bus_id:
                pcis.append(function_form(gpu.pci_bus_id))
        except ValueError:
            continue  # an address NVML garbled links no port, it judges nothing
    return read_infiniband(config.sysfs_root, hcas, pcis, config.network.gpudirect != "false")


def job_layout(config: Config, request: RunRequest, job: JobContext, host: str,
               events: List[LogEvent]) -> Any:
    """This node's gres layout (read/gres.py), with what it had to assume logged."""
    from .gres import gres_conf_path, read_layout

    layout = read_layout(gres_conf_path(config.gres_conf, dict(request.environ)),
                         job.node_name or config.node_name or host, config.state_dir)
    if layout.note:
        events.append(LogEvent("error", NOTICE, f"{layout.source}: {layout.note}"))
    return layout


def out_of_service(gpus: Tuple[GpuSnapshot, ...], exclude: Tuple[str, ...],
                   layout: Any) -> Tuple[Tuple[int, str], ...]:
    """The GPUs the admin took out of service (pure): named in `exclude_gpus` by serial, UUID or
    PCI id, or (a job's run, with a gres.conf whose File= list is certain) on a device no gres
    record names, which slurmd never gives to a job."""
    wanted = {e.strip().lower() for e in exclude}
    pcis = set()
    for entry in wanted:
        try:
            pcis.add(normalise_pci(entry))
        except ValueError:
            pass  # a serial or UUID
    from ..model import NVIDIA_AUTODETECT, autodetect_kind, file_minors

    in_gres = None
    if (layout is not None and not layout.error and not layout.uncertain and layout.files
            and autodetect_kind(layout.autodetect) not in NVIDIA_AUTODETECT):
        in_gres = set(file_minors(layout))
    found = []
    for gpu in gpus:
        ids = {(gpu.serial or "").lower(), (gpu.uuid or "").lower()} - {""}
        try:
            pci = normalise_pci(gpu.pci_bus_id) if gpu.pci_bus_id else None
        except ValueError:
            pci = None
        if ids & wanted or (pci is not None and pci in pcis):
            found.append((gpu.index, "exclude_gpus"))
        elif in_gres is not None and gpu.minor_number is not None and gpu.minor_number not in in_gres:
            found.append((gpu.index, f"/dev/nvidia{gpu.minor_number} is in no gres record of {layout.source}"))
    return tuple(found)


def deep(snapshot: NodeSnapshot, config: Config) -> Any:
    """The deep level's on-device tests of the GPUs under test (read/deep.py), whole GPUs only:
    a MIG-enabled GPU gets a not_run result (its MIG devices share its memory and SMs)."""
    from ..deepmodel import DeepGpu, DeepRun
    from .cudaprobe import ProbeTarget
    from .deep import DeepPlan, run_deep

    targets, skipped = [], []
    for gpu in snapshot.gpus:
        if gpu.index not in snapshot.selected or gpu.lost is not None:
            continue
        if gpu.mig_mode or not gpu.uuid:
            skipped.append(DeepGpu(gpu.index, "not_run", detail="MIG is on" if gpu.mig_mode else "no UUID"))
            continue
        targets.append(ProbeTarget(gpu.index, gpu.uuid, co_tenant_mib(gpu, snapshot)))
    if not targets:
        return DeepRun(gpus=tuple(skipped))
    import tempfile

    from .deeplinks import host_gates

    topology, pairs = peer_plan(snapshot, [t.index for t in targets])
    tested = [g for g in snapshot.gpus if g.index in {t.index for t in targets}]
    with tempfile.TemporaryDirectory(prefix="gpu-healthcheck-deep-") as tmp:
        gates = host_gates(tested, config.sysfs_root, os.path.join(tmp, "host-copies.lock"))
        plan = DeepPlan(fraction=config.probe.full_fraction, bandwidth_mib=config.deep.bandwidth_mib,
                        host_gates=gates, duration_s=config.deep.duration_s,
                        memtest_passes=config.deep.memtest_passes)
        run = run_deep(targets, pairs, plan, config.deep.timeout_s)
    if topology is not None and topology.error and not run.peers:
        run = run._replace(peer_detail=f"NVLink topology not read: {topology.error}")
    return run._replace(gpus=run.gpus + tuple(skipped), topology=topology)


def peer_plan(snapshot: NodeSnapshot, tested: List[int]) -> Tuple[Any, Tuple[Any, ...]]:
    """NVML's topology of the GPUs under test (read/nvmltopo.py) and the peer copies planned
    from it (read/deeptopo.py); (None, ()) where fewer than two are under test."""
    if len(tested) < 2:
        return None, ()
    from .deeptopo import plan_pairs
    from .nvmltopo import read_topology

    topology = read_topology([g for g in snapshot.gpus if g.index in tested])
    return topology, plan_pairs(topology, tested)


def with_slurm_jobs(gpus: Tuple[GpuSnapshot, ...], selected: Tuple[int, ...],
                    listpids: Optional[Callable[[str], Mapping[int, str]]], map_gpus: MapGpus, node: str,
                    events: List[LogEvent], layout: Any = None, this_job: Optional[str] = None,
                    proc_root: str = "/proc") -> Tuple[GpuSnapshot, ...]:
    """With gres/mps or gres/shard several live jobs share a GPU.  On such a node only, a
    process of another job on the job's GPUs is looked up in what slurmd says runs here (one
    `scontrol listpids` call, made only when such a process exists): a job it names is live
    (a job cgroup alone may be a stale one), and that job's SLURM_JOB_GPUS says which GPUs it
    was given.  model.not_a_co_tenant decides from these (checks/processes.py)."""
    from ..model import is_mps_daemon

    shared = layout.shared if layout is not None else ()
    others = [p for g in gpus if g.index in selected and g.processes for p in g.processes
              if not is_mps_daemon(p) and p.job_id != this_job]
    if not shared or not others or listpids is None:
        return gpus  # the common case: scontrol is never imported
    try:
        jobs = listpids(node)
    except DoorError as exc:
        events.append(LogEvent("error", WARNING, f"cannot ask slurmd which jobs run on {node} "
                                                 f"({exc}); processes on the job's GPUs count as "
                                                 f"leftovers"))
        return gpus
    from .procinfo import job_gpus_of

    live = set(jobs.values())

    def judged(proc: Any) -> Any:
        job_id = proc.job_id or jobs.get(proc.pid)
        if not job_id or job_id == this_job or is_mps_daemon(proc):
            return proc._replace(job_id=job_id)
        ids = job_gpus_of(proc.pid, proc_root) if job_id in live else None
        given = map_gpus(ids, gpus, layout) if ids is not None else None
        return proc._replace(job_id=job_id, job_live=job_id in live,
                             job_gpus=given[0] if given is not None and given[1] is None else None)

    return tuple(g._replace(processes=tuple(judged(p) for p in g.processes))
                 if g.index in selected and g.processes else g for g in gpus)


def name_lost_gpu(gpus: Tuple[GpuSnapshot, ...],
                  sysfs_gpus: Optional[Tuple[str, ...]]) -> Tuple[GpuSnapshot, ...]:
    """A lost GPU that NVML can no longer identify gets its PCI address from sysfs, when that is
    unambiguous (exactly one such GPU, exactly one NVIDIA function no other GPU accounts for),
    so the drain reason still says which board to pull (pure)."""
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
    address = nvml_form(spare[0])
    return tuple(g._replace(pci_bus_id=address) if g is nameless[0] else g for g in gpus)


def _needs_known(gpus: Tuple[GpuSnapshot, ...], sysfs_gpus: Optional[Tuple[str, ...]],
                 config: Config) -> bool:
    """Whether a GPU may need its name from the known GPUs: one is lost without a serial, or
    fewer are listed than expected_gpus or sysfs counts.  A healthy node's run (every
    prolog's) never reads the file."""
    return (any(g.lost is not None and not g.serial for g in gpus)
            or (config.expected_gpus is not None and len(gpus) < config.expected_gpus)
            or len(sysfs_gpus or ()) > len(gpus))


def with_known(gpus: Tuple[GpuSnapshot, ...], known: Tuple[KnownGpu, ...]
               ) -> Tuple[Tuple[GpuSnapshot, ...], Tuple[GpuSnapshot, ...]]:
    """The GPUs with what earlier runs knew of them, and the known GPUs NVML lists no more
    (pure).  A lost GPU NVML can no longer identify gets its serial (and PCI address) from the
    entry at its address, else at its index where that entry's address is no other GPU's; a
    known GPU at an address no GPU answers from, whose serial no GPU has, is missing."""
    def where(pci: Optional[str]) -> object:
        try:
            return normalise_pci(pci) if pci else None
        except ValueError:
            return pci
    present = {where(g.pci_bus_id) for g in gpus if g.pci_bus_id}
    by_pci = {where(k.pci): k for k in known}
    filled = []
    for g in gpus:
        entry = by_pci.get(where(g.pci_bus_id)) if g.pci_bus_id else next(
            (k for k in known if k.index == g.index and where(k.pci) not in present), None)
        if g.lost is not None and not g.serial and entry is not None:
            g = g._replace(serial=entry.serial or None, pci_bus_id=g.pci_bus_id or entry.pci)
        filled.append(g)
    here = {where(g.pci_bus_id) for g in filled if g.pci_bus_id}
    serials = {g.serial for g in filled if g.serial}
    missing = tuple(GpuSnapshot(index=k.index, serial=k.serial or None, uuid=k.uuid or None, pci_bus_id=k.pci)
                    for k in known if where(k.pci) not in here and not (k.serial and k.serial in serials))
    return tuple(filled), missing


def xid_window(mode: Mode, snapshot: NodeSnapshot, window_s: float) -> KernelLogWindow:
    """The stretch of the kernel log a run judges: the job's own (epilog, from the prolog's
    position), the last `xid_window_s` (--node), else the whole boot."""
    if mode is Mode.EPILOG and snapshot.baseline and snapshot.baseline.kernel_log:
        pos = snapshot.baseline.kernel_log
        return window_since(pos, current_boot().boot_id if pos.seq is not None else None)
    if mode is Mode.NODE and window_s > 0:
        return KernelLogWindow(since_monotonic_s=time.monotonic() - window_s,
                               since_wallclock=time.time() - window_s)
    return KernelLogWindow(since_wallclock=boot_wallclock())


def probe(snapshot: NodeSnapshot, config: Config, level: str,
          limits: Callable[[str, int], Tuple[Optional[float], float]]) -> Tuple[ProbeResult, ...]:
    """The CUDA probe of the GPUs under test, one killable child per device."""
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
            # NVML answered the GPU but not its UUID (an error on that one query, a replayed
            # excerpt without it): CUDA takes the device by its PCI address instead
            address = _cuda_pci(gpu.pci_bus_id)
            if address is None:
                skipped.append(ProbeResult(gpu.index, ProbeStatus.NOT_RUN,
                                           detail="NVML gave neither a UUID nor a PCI bus id"))
                continue
            targets.append(ProbeTarget(gpu.index, "", co_tenant_mib(gpu, snapshot), address))
            continue
        targets.append(ProbeTarget(gpu.index, gpu.uuid, co_tenant_mib(gpu, snapshot)))
    if not targets:
        return tuple(skipped)
    size = ProbeSize(quick_mib=config.probe.quick_mib,
                     full_fraction=config.probe.full_fraction if level == "full" else None)
    largest_mib = max((g.memory_total_mib or 0) for g in snapshot.gpus if g.index in snapshot.selected)
    timeout_s, own_s = limits(level, largest_mib)
    if timeout_s is None:
        # nothing left of the run's budget (act_budget_s, or the SPANK plugin's deadline):
        # not checked (unknown), never a drain
        return _with_devices(tuple(
            ProbeResult(t.index, ProbeStatus.NOT_RUN,
                        detail=f"no time left within the run's budget (act_budget_s = "
                               f"{config.act_budget_s:g} s under --node --act, else the SPANK "
                               f"plugin's deadline)")
            for t in targets), targets) + tuple(skipped)
    # own_s, its own deadline: where the budget cut it shorter, a probe still moving at the
    # cut is unknown (the budget ended it), never a hung GPU
    return _with_devices(run_probes(targets, size, timeout_s, own_s), targets) + tuple(skipped)


def _cuda_pci(nvml_bus_id: Optional[str]) -> Optional[str]:
    """NVML's "00000000:10:1C.0" in the form CUDA prints ("0000:10:1c.0"), or None."""
    try:
        return function_form(nvml_bus_id) if nvml_bus_id else None
    except ValueError:
        return None


def _with_devices(results: Tuple[ProbeResult, ...], targets: List[Any]) -> Tuple[ProbeResult, ...]:
    """One result per probed device: a MIG-enabled GPU has one per MIG device, named by its
    MIG- UUID (checks/probe.py judges the GPU by the worst of them)."""
    return tuple(r._replace(device=t.uuid) if t.uuid.upper().startswith("MIG-") else r
                 for r, t in zip(results, targets))
