"""Plain data that flows through gpu-healthcheck, one way.

Readers (healthcheck.read) fill these frozen records; pure functions (healthcheck.checks and
healthcheck.decide) turn them into findings, a verdict and an action; effectors (healthcheck.act)
carry the action out and healthcheck.report presents it.  Nothing here does I/O.

    snapshot = NodeSnapshot(host="node01", gpus=(GpuSnapshot(index=0, ...),), ...)
    findings = run_checks(snapshot, config, context)      # healthcheck.checks
    verdict = decide(findings)                            # healthcheck.decide.verdict

NamedTuples, not frozen dataclasses: as immutable, ten times cheaper to define (dataclass
generation was a fifth of the prolog's time).  Change one with `record._replace(field=value)`.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Union

from .logmodel import KernelLogPosition, KernelLogRead
from .netmodel import IbPort, NetworkRead, PortBaseline
from .records import NamedTuple

if TYPE_CHECKING:  # the prolog never imports the deep level's records
    from .deepmodel import DcgmRead, DeepRun

Value = Union[int, float, str, bool, None]


class UsageError(Exception):
    """A command-line mistake (an unknown option, a --gpus index the node does not have): one
    line on stderr and exit 3 (unknown), never 1 or 2, which mean warn and fail (CONTRACTS §1)."""


class Terminated(BaseException):
    """SIGTERM (slurmd's PrologEpilogTimeout, a timer's deadline, systemd): cli.py's guard raises
    it in the running command, so that probe children get killed and a fabric sweep cancels
    its jobs; str() is "stopped by SIGTERM"."""


class DoorError(Exception):
    """An outside system (scontrol, ...) could not do what we asked: missing, failed, or past its
    deadline.  Each door raises its own subclass (act.scontrol.ScontrolError)."""


# What to do when a Slurm command cannot reach slurmctld (--repair, --cluster, --internode-sweep
# say it after scontrol's or squeue's own words): the usual cause is a host without the
# cluster's slurm.conf, or a SLURM_CONF pointing elsewhere.
SLURMCTLD_ADVICE = ("if slurmctld is unreachable from here: set SLURM_CONF to the cluster's "
                    "slurm.conf, or run on a host that has the cluster's slurm.conf")


class Severity(str, enum.Enum):
    """How bad one finding is.  `unknown` means "could not check", never "bad"."""

    INFO = "info"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"


class Verdict(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"


class Action(str, enum.Enum):
    """What a finding calls for.  Anything but NONE on a FAIL finding drains the node."""

    NONE = "none"
    DRAIN = "drain"
    RESET = "reset"
    REBOOT = "reboot"
    RMA = "rma"


class Mode(str, enum.Enum):
    NODE = "node"
    PROLOG = "prolog"
    EPILOG = "epilog"


class GpuProcess(NamedTuple):
    pid: int
    used_mib: Optional[int]
    user: Optional[str] = None  # filled by psutil where the process is visible
    command: Optional[str] = None
    # The Slurm job the process belongs to: from its job cgroup (.../job_1234/...), else from
    # `scontrol listpids` on this node; None = no job we know of (a leftover).
    job_id: Optional[str] = None
    # True: `scontrol listpids` names job_id on this node now; False: it does not (a stale
    # job cgroup); None: not asked (the node shares no GPU, or slurmd could not say)
    job_live: Optional[bool] = None
    # NVML indices job_id was given (its SLURM_JOB_GPUS); None = cannot be known (gres/mps)
    job_gpus: Optional[Tuple[int, ...]] = None


class MigDevice(NamedTuple):
    """One MIG device (a compute instance) of a MIG-enabled GPU."""

    index: int  # type: ignore[assignment]  # its index under the GPU (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: Optional[str] = None  # MIG-<uuid>: how CUDA_VISIBLE_DEVICES names it
    memory_total_mib: Optional[int] = None


class GpuSnapshot(NamedTuple):
    """Everything NVML told us about one GPU.  None means "not available" (NOT_SUPPORTED)."""

    index: int  # type: ignore[assignment]  # the NVML index; tuple.index is never used here
    uuid: Optional[str] = None
    serial: Optional[str] = None
    pci_bus_id: Optional[str] = None  # NVML form: 00000000:41:00.0
    name: Optional[str] = None
    minor_number: Optional[int] = None
    # Set when the GPU answered GPU_IS_LOST / RESET_REQUIRED / UNKNOWN to a call that matters,
    # or when NVML calls on it did not return before the deadline ("TIMEOUT").
    lost: Optional[str] = None
    ecc_mode_current: Optional[bool] = None
    ecc_mode_pending: Optional[bool] = None
    ecc_volatile_corrected: Optional[int] = None
    ecc_volatile_uncorrected: Optional[int] = None
    ecc_aggregate_corrected: Optional[int] = None
    ecc_aggregate_uncorrected: Optional[int] = None
    retired_sbe: Optional[int] = None  # pages
    retired_dbe: Optional[int] = None  # pages
    retired_pending: Optional[bool] = None
    remap_correctable: Optional[int] = None  # rows
    remap_uncorrectable: Optional[int] = None  # rows
    remap_pending: Optional[bool] = None
    remap_failure: Optional[bool] = None
    sram_threshold_exceeded: Optional[bool] = None  # SRAM ECC: the field-diagnostics threshold
    sram_aggregate_uncorrected: Optional[int] = None  # SRAM uncorrectable, parity + SEC-DED
    recovery_action: Optional[int] = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    processes: Optional[Tuple[GpuProcess, ...]] = None
    temperature_c: Optional[int] = None
    temperature_slowdown_c: Optional[int] = None
    clocks_event_reasons: Optional[int] = None  # bitmask, nvmlClocksEventReason*
    pcie_gen_current: Optional[int] = None
    pcie_gen_max: Optional[int] = None
    pcie_width_current: Optional[int] = None
    pcie_width_max: Optional[int] = None
    persistence_mode: Optional[bool] = None
    mig_mode: Optional[bool] = None
    compute_mode: Optional[int] = None  # NVML_COMPUTEMODE_*: 0 default, 2 prohibited, 3 exclusive process
    power_mw: Optional[int] = None
    # What the GPU is doing, whoever runs there: processes in another PID namespace (a container)
    # are not in `processes`, but their load shows here.
    utilization_gpu_pct: Optional[int] = None  # nvmlDeviceGetUtilizationRates; None with MIG on
    utilization_memory_pct: Optional[int] = None
    pstate: Optional[int] = None  # performance state 0 (fastest) .. 15; None = unknown
    graphics_processes: Optional[Tuple[GpuProcess, ...]] = None  # G and C+G (C+G also in processes)
    mig_devices: Optional[Tuple[MigDevice, ...]] = None  # read when mig_mode is on
    # --- NVLink, the NVSwitch fabric, PCIe replays, HBM (one FieldValues batch + two calls) ---
    fabric_state: Optional[int] = None  # NVML_GPU_FABRIC_STATE_*: 0 n/a, 1 not started, 2 in progress, 3 completed
    fabric_status: Optional[int] = None  # nvmlReturn_t of the registration; valid when completed
    fabric_clique_id: Optional[int] = None
    fabric_cluster_uuid: Optional[str] = None
    fabric_health_mask: Optional[int] = None  # NVML_GPU_FABRIC_HEALTH_MASK_* bit fields
    fabric_health_summary: Optional[int] = None  # NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3 drivers)
    nvlink_links: Optional[int] = None  # links this GPU has; None or 0 = no NVLink (a PCIe board)
    nvlink_down: Optional[Tuple[int, ...]] = None  # links that report inactive
    # (link, crc, replay, recovery) for each link whose counters NVML gave
    nvlink_counters: Optional[Tuple[Tuple[int, int, int, int], ...]] = None
    nvlink_crc_errors: Optional[int] = None  # sums over the links (the baseline keeps these)
    nvlink_replay_errors: Optional[int] = None
    nvlink_recovery_errors: Optional[int] = None
    pcie_replay: Optional[int] = None  # PCIe replay counter since the driver loaded
    memory_temperature_c: Optional[int] = None  # HBM
    memory_temperature_max_c: Optional[int] = None  # "Memory Max Operating Temp": slowdown
    # row-remapper histogram: banks with (max, high, partial, low, none) remap availability
    remap_histogram: Optional[Tuple[int, int, int, int, int]] = None
    # query name -> NVML error name, for errors that are neither NOT_SUPPORTED nor fatal
    query_errors: Tuple[Tuple[str, str], ...] = ()


class ProbeStatus(str, enum.Enum):
    OK = "ok"
    INIT_ERROR = "init_error"  # cuInit / context creation failed
    ALLOC_ERROR = "alloc_error"
    COPY_ERROR = "copy_error"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # the child died of a signal or exited without a result
    NOT_RUN = "not_run"


class ProbeResult(NamedTuple):
    index: int  # type: ignore[assignment]  # NVML index, as in GpuSnapshot
    status: ProbeStatus
    cu_result: Optional[int] = None
    cu_name: Optional[str] = None
    bytes_tested: int = 0
    duration_s: float = 0.0
    detail: str = ""
    device: Optional[str] = None  # the MIG- UUID probed, where the GPU is MIG-enabled
    mps_pipe: Optional[str] = None  # CUDA_MPS_PIPE_DIRECTORY the probe ran under: an MPS client
    # TIMEOUT only: the deadline was the run's time budget, shorter than the probe's own, and the
    # child was still making progress when it was cut: not checked, never a hung GPU
    budget_cut: bool = False


class GresLayout(NamedTuple):
    """This node's gres/gpu device list as slurmd builds it (without the system GPU list)."""

    source: str  # the gres.conf path
    files: Tuple[str, ...] = ()  # device files in gres index order (AutoDetect: configured ones)
    autodetect: Optional[str] = None  # "nvml", "off", ... as written; None = not given
    uncertain: Optional[str] = None  # why the order cannot be proven; None = it can
    error: Optional[str] = None  # gres.conf could not be read or parsed
    # the device number (st_rdev's minor) of each of `files`, None where the file could not be
    # stat'ed; () = not stat'ed (a pure parse): the names' trailing digits are used then
    minors: Tuple[Optional[int], ...] = ()
    note: Optional[str] = None  # something the mapping had to assume, said in the report
    # AutoDetect=nvml with Type=: this node's gpu records in gres.conf order as
    # (type, count, files); slurmd matches each type against the NVML device names
    typed: Tuple[Tuple[str, int, Tuple[str, ...]], ...] = ()
    # the GPU-sharing gres configured for this node ("mps", "shard"), from gres.conf and
    # slurm.conf's Gres=: only then may several live jobs use one GPU
    shared: Tuple[str, ...] = ()


# How slurmd reads gres.conf's names (pure; read/gres.py and decide/gpumap.py both use them)
def trailing_number(path: str) -> Optional[int]:
    """The device number slurmd takes from a file name (`_init_gres_device`: its trailing
    digits), e.g. 4 for /dev/nvidia4; None when the name ends in no digit."""
    m = re.search(r"(\d+)$", path)
    return int(m.group(1)) if m else None


def file_minors(layout: GresLayout) -> List[Optional[int]]:
    """Each File='s device number: st_rdev's minor as read/gres.py stat'ed it, else (a pure
    parse) the name's trailing digits."""
    if len(layout.minors) == len(layout.files):
        return list(layout.minors)
    return [trailing_number(f) for f in layout.files]


# AutoDetect values of NVIDIA's plugins
NVIDIA_AUTODETECT = ("nvml", "nvidia", "full")
OTHER_VENDORS = ("rsmi", "oneapi", "nrt")  # AMD, Intel, AWS Neuron: not GPUs NVML lists


def autodetect_kind(value: Optional[str]) -> Optional[str]:
    """The plugin an AutoDetect value selects, as slurmd reads it (`_handle_autodetect_flags`:
    a case-insensitive substring, `full` first, `off` exact); None = not given."""
    if value is None:
        return None
    low = value.lower()
    for kind in ("full", "nvml", "rsmi", "oneapi", "nrt", "nvidia"):
        if kind in low:
            return kind
    return "off" if low in ("off", "none") else low


class JobContext(NamedTuple):
    """The Slurm job a prolog/epilog runs for."""

    job_id: Optional[str] = None
    node_name: Optional[str] = None
    user: Optional[str] = None
    # Slurm gres indices (positions in slurmd's gres list, see read/gres.py) or GPU-<uuid>; None = no GPUs
    gpu_ids: Optional[Tuple[str, ...]] = None
    gpu_ids_error: Optional[str] = None  # SLURM_JOB_GPUS could not be parsed
    gpu_ids_source: Optional[str] = None
    # The MIG devices (MIG-<uuid>, lower case) the job was given, where Slurm names them so
    # (CUDA_VISIBLE_DEVICES on a MIG node); their GPUs are in gpu_ids' mapping.
    mig_uuids: Tuple[str, ...] = ()
    # SLURM_JOB_SLUID (Slurm 25.11 and later): the job's id unique across the cluster's life,
    # where a job id is reused (after MaxJobId, or a new StateSaveLocation)
    sluid: Optional[str] = None


class GpuBaseline(NamedTuple):
    uuid: str
    ecc_volatile_uncorrected: Optional[int] = None
    ecc_volatile_corrected: Optional[int] = None
    ecc_aggregate_uncorrected: Optional[int] = None
    ecc_aggregate_corrected: Optional[int] = None
    retired_dbe: Optional[int] = None
    retired_sbe: Optional[int] = None
    remap_uncorrectable: Optional[int] = None
    remap_correctable: Optional[int] = None
    remap_pending: Optional[bool] = None
    nvlink_crc_errors: Optional[int] = None
    nvlink_replay_errors: Optional[int] = None
    nvlink_recovery_errors: Optional[int] = None
    pcie_replay: Optional[int] = None


class Baseline(NamedTuple):
    """What the prolog recorded for the epilog to diff against."""

    job_id: str
    taken_at: float  # epoch seconds
    gpus: Tuple[GpuBaseline, ...] = ()
    kernel_log: Optional[KernelLogPosition] = None
    ports: Tuple[PortBaseline, ...] = ()  # RDMA ports (a file without them: none recorded)

    def for_uuid(self, uuid: Optional[str]) -> Optional[GpuBaseline]:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None


class NodeSnapshot(NamedTuple):
    """One read of the node, from every reader."""

    host: str
    nvml_error: Optional[str] = None  # NVML could not initialise: error name
    driver_version: Optional[str] = None
    gpus: Tuple[GpuSnapshot, ...] = ()
    sysfs_gpus: Optional[Tuple[str, ...]] = None  # PCI addresses; None = could not read
    sysfs_error: Optional[str] = None
    kernel_log: KernelLogRead = KernelLogRead()
    probes: Tuple[ProbeResult, ...] = ()
    # GPUs (NVML indices) that get the full checks; the rest get the cheap ones only
    selected: Tuple[int, ...] = ()
    baseline: Optional[Baseline] = None
    baseline_error: Optional[str] = None
    job: Optional[JobContext] = None
    # Seconds since the NVIDIA driver loaded (sysfs.read_driver_age); None = unknown.  Within
    # `boot_grace_s` of it, state that settles after boot (fabric, NVLink, persistence) is not
    # judged yet: checks ask registry.in_boot_grace().
    driver_age_s: Optional[float] = None
    # (kernel PCI address, acknowledgements that dealt with a failing Xid on it), from state_dir
    xid_ack_counts: Tuple[Tuple[str, int], ...] = ()
    network: Optional[NetworkRead] = None  # None: no /sys/class/infiniband (no RDMA device)
    # GPUs the admin took out of service, (NVML index, why): `exclude_gpus`, or (prolog and
    # epilog) outside every gres record of gres.conf; their findings are info, never a drain
    out_of_service: Tuple[Tuple[int, str], ...] = ()
    # NVIDIA GPU functions sysfs lists that are not bound to the nvidia driver, (address,
    # driver or "no driver"): vfio-pci, unbound, NVreg_ExcludedGpus; gpu.count leaves them out
    sysfs_unbound: Tuple[Tuple[str, str], ...] = ()
    # NVIDIA NVSwitch functions on the PCI bus (class 0x0680): an NVSwitch system on any GPU
    # generation, where NVML's fabric state says so only from Hopper on
    sysfs_nvswitches: Tuple[str, ...] = ()
    # GPUs an earlier run of this node listed (state_dir, act.state.remember_gpus) that NVML
    # no longer lists: their identity (index then, serial, UUID, PCI address) and nothing else
    missing_gpus: Tuple["GpuSnapshot", ...] = ()
    deep: Optional[DeepRun] = None  # --level deep: what the on-device tests measured
    dcgm: Optional[DcgmRead] = None  # what dcgmi said, where it ran
    # gres/mps or gres/shard configured for this node (prolog, epilog): GPUs shared by jobs
    shared_gres: Tuple[str, ...] = ()

    def gpu(self, index: int) -> Optional[GpuSnapshot]:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def baseline_of(self, gpu: GpuSnapshot) -> Optional[GpuBaseline]:
        """What the prolog recorded for this GPU (by UUID); None without a baseline or entry."""
        return self.baseline.for_uuid(gpu.uuid) if self.baseline else None

    def baseline_of_port(self, port: IbPort) -> Optional[PortBaseline]:
        """What the prolog recorded for this RDMA port (by name); None without one."""
        return next((p for p in self.baseline.ports if p.name == port.name), None) if self.baseline else None


class Finding(NamedTuple):
    check: str
    severity: Severity
    message: str
    gpu: Optional[int] = None
    value: Value = None
    threshold: Value = None
    action: Action = Action.NONE
    port: Optional[str] = None  # an RDMA port finding: "mlx5_0:1" (gpu is then None)
    # that port's HCA PCI address; or, with gpu None and no port, the PCI address of a GPU NVML
    # no longer lists (gpu.count: a GPU gone from the bus, known from an earlier run)
    pci: Optional[str] = None
    serial: Optional[str] = None  # that missing GPU's serial, where it was known
    # a multi-node check's finding (checks/internode.py): the node it is about (gpu is then
    # None), and the partners its collectives failed with
    node: Optional[str] = None
    partners: Tuple[str, ...] = ()

    @property
    def drains(self) -> bool:
        return self.severity is Severity.FAIL and self.action is not Action.NONE


class Outcome(str, enum.Enum):
    """What became of a run's action, or of one step of it (a log event's GPU_HEALTHCHECK_OUTCOME).

    A run's NodeAction ends in one of APPLIED, PENDING, REFUSED, ADMIN_OWNED, ALREADY_OURS,
    REPORT_ONLY or NONE (a remote node's drain also ERROR); metrics and history count these,
    never the wording of a message.  A log
    event may also be KEPT (a drain left as it is), ACKNOWLEDGED (Xids dealt with), CLEARED (a
    refused drain's note removed) or DROPPED (a stale pending drain).
    """

    APPLIED = "applied"
    PENDING = "pending"  # scontrol did not answer: the drain waits in state_dir for the next run
    REFUSED = "refused"  # the drain budget is spent
    ADMIN_OWNED = "admin_owned"  # drained by someone else: their reason is kept
    ALREADY_OURS = "already_ours"  # drained by us already
    REPORT_ONLY = "report_only"  # [drain] report_only: said, not done
    NONE = "none"
    KEPT = "kept"
    ACKNOWLEDGED = "acknowledged"
    CLEARED = "cleared"
    DROPPED = "dropped"
    ERROR = "error"  # a remote drain (Slurm.drain_remote) scontrol did not answer: nothing changed


# The JSON document's flags (CONTRACTS §3) for the outcomes that have one: {"refused": true}.
OUTCOME_FLAGS = {Outcome.PENDING: "pending", Outcome.REFUSED: "refused",
                 Outcome.ADMIN_OWNED: "admin_owned", Outcome.ALREADY_OURS: "already_ours",
                 Outcome.REPORT_ONLY: "report_only"}


class NodeAction(NamedTuple):
    """What the effectors must do about this node, and what became of it."""

    taken: str  # drain | resume | none
    reason: Optional[str] = None
    dry_run: bool = False
    detail: str = ""  # why (refused by budget, admin's reason kept, pending, ...)
    outcome: Outcome = Outcome.NONE

    @property
    def flags(self) -> Dict[str, bool]:
        """The outcome as the JSON document's action flag ({"refused": True}), if it has one."""
        flag = OUTCOME_FLAGS.get(self.outcome)
        return {flag: True} if flag else {}

    @property
    def said(self) -> str:
        """The outcome as its word ("applied", "refused", ...), a remote drain's error with
        scontrol's message ("error: ..."): what the sweep's and the gang check's output print."""
        return f"error: {self.detail}" if self.outcome is Outcome.ERROR else self.outcome.value


# journald priorities (syslog levels)
CRIT, ERR, WARNING, NOTICE, INFO = 2, 3, 4, 5, 6


class LogEvent(NamedTuple):
    """One thing worth a journal entry; kind picks its MESSAGE_ID."""

    kind: str  # summary | finding | drain | resume | refused | pending | error
    priority: int
    message: str
    fields: Dict[str, str] = {}  # never mutated: replaced whole
    outcome: Optional[Outcome] = None  # journald's GPU_HEALTHCHECK_OUTCOME

    @property
    def journal_fields(self) -> Dict[str, str]:
        """The entry's own fields, with its outcome as GPU_HEALTHCHECK_OUTCOME."""
        if self.outcome is None:
            return self.fields
        return {**self.fields, "GPU_HEALTHCHECK_OUTCOME": self.outcome.value}


class RunRequest(NamedTuple):
    mode: Mode
    environ: Mapping[str, str]
    level: str = "quick"
    act: bool = False  # --node --act; prolog and epilog always act
    gpus: Optional[Tuple[int, ...]] = None  # --gpus
    started_monotonic: Optional[float] = None  # when the process started: the budget counts from it
    repair: bool = False  # --repair (or [repair] enabled with --node --act): the repair step runs


class RunOutcome(NamedTuple):
    exit_code: int
    report: Dict[str, Any]
    events: List[LogEvent]
    snapshot: Optional[NodeSnapshot] = None
    findings: List[Finding] = []
    crashes: List[Any] = []  # checks.registry.CheckCrash


MPS_DAEMON = "nvidia-cuda-mps-server"


def is_mps_daemon(proc: GpuProcess) -> bool:
    """NVML lists the MPS server (started for gres/mps by the site, in no job) on a shared GPU."""
    return bool(proc.command) and MPS_DAEMON in (proc.command or "").split(" ", 1)[0]


def not_a_co_tenant(proc: GpuProcess, gpu_index: int, shared: Tuple[str, ...],
                    this_job: Optional[str]) -> Optional[str]:
    """Why a process on a job's GPU is not a co-tenant of it (a leftover); None = it is (pure).

    A co-tenant needs all of: a node whose GPUs are shared (gres/mps or gres/shard), a job that
    slurmd still runs (`scontrol listpids`; a job cgroup alone may be stale), and, where its
    SLURM_JOB_GPUS says, this GPU in that job's allocation.  The MPS server needs the first."""
    mps = is_mps_daemon(proc)
    if not mps and (not proc.job_id or proc.job_id == this_job):
        return "in no live job" if not proc.job_id else "of this job, before or after it ran"
    if not shared:
        what = "the MPS server" if mps else f"job {proc.job_id}'s"
        return f"{what}, but no GPU of this node is shared (no gres/mps or gres/shard)"
    if mps:
        return None
    if proc.job_live is not True:
        return (f"job {proc.job_id} no longer runs here (slurmd does not list it: a stale job cgroup)"
                if proc.job_live is False else f"slurmd could not say whether job {proc.job_id} runs")
    if proc.job_gpus is not None and gpu_index not in proc.job_gpus:
        given = ",".join(map(str, proc.job_gpus)) or "none"
        return f"job {proc.job_id} was given GPU(s) {given}, not this one"
    return None


def co_tenant_mib(gpu: GpuSnapshot, snapshot: NodeSnapshot) -> int:
    """The memory live co-tenants hold on a shared GPU (pure): processes of other live jobs
    given it, and the MPS server, on a node with gres/shard or gres/mps (not_a_co_tenant).
    It is not free for the probe (read/node.py sizes it below), and an OUT_OF_MEMORY behind it
    is no fault (checks/probe.py): sized as if it were free, the allocation fails on a GPU a
    co-tenant has filled, or takes the co-tenant's last memory."""
    if not snapshot.shared_gres or not gpu.processes:
        return 0
    this_job = snapshot.job.job_id if snapshot.job else None
    return sum(p.used_mib or 0 for p in gpu.processes
               if not_a_co_tenant(p, gpu.index, snapshot.shared_gres, this_job) is None)
