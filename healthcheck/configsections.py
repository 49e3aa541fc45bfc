"""The config sections of the newer subsystems (the deep level, DCGM, the network), in a leaf of
their own so that config.py stays under 500 lines; config.py re-exports them.  Each key's
meaning and default are documented beside it, as in config.py."""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Iterable, Optional, Tuple, Union

from .records import NamedTuple


class DeepConfig(NamedTuple):
    """--level deep (README, "The deep level"; checks/deep.py has the sources)."""

    enabled: bool = True
    timeout_s: float = 300.0  # deadline for one GPU's deep child (and for the peer child)
    # A GPU below this share of its same-model siblings' median warns; below the second, fails.
    sibling_ratio_warn: float = 0.85
    sibling_ratio_fail: float = 0.7
    floor_fraction: float = 0.6  # share of the datasheet peak (checks/floors.py FLOORS) below which it fails
    pcie_fraction: float = 0.4  # share of the link's current gen x width rate, per direction
    # site floors: "MODEL:METRIC=VALUE", METRIC one of hbm_gbps, gflops, nvlink_gbps (per
    # direction, all links), nvlink_link_gbps (per link, per direction): datasheet peaks the
    # floor_fraction applies to, e.g. "NVIDIA H100 80GB HBM3:hbm_gbps=3350"
    floors: Tuple[str, ...] = ()
    bandwidth_mib: int = 1024  # each HBM bandwidth buffer
    # seconds of back-to-back compute launches per GPU (FP32 FMA, and the tensor-core GEMM on
    # sm_80 and newer): power and thermal throttling take seconds to show.  A GPU's deadline is
    # timeout_s plus this.
    duration_s: float = 30.0
    memtest_passes: int = 1  # times the whole memory test runs (each pass its own patterns)


class DcgmConfig(NamedTuple):
    """The DCGM bridge (read/dcgm.py): `dcgmi diag` at --level deep, `dcgmi health` on --node."""

    enabled: str = "auto"  # auto: where dcgmi is installed; true: missing dcgmi is unknown; false
    level: int = 2  # dcgmi diag -r N
    timeout_s: float = 1800.0  # dcgmi diag -r 2 takes minutes, -r 4 tens of minutes
    health_timeout_s: float = 10.0


class NetworkConfig(NamedTuple):
    """[network]: the RDMA ports (checks/network.py; README "Network checks" gives each
    default's source)."""

    # The ports that must be up: a count, or names like ["mlx5_0:1", "mlx5_1:1"].  None: a
    # port that is down only warns, except one that was up at the prolog and is down at the
    # epilog, which fails.
    expected_ports: Optional[Union[int, Tuple[str, ...]]] = None
    # A port slower than this (Gb/s, the kernel's `rate`) warns; 0 = off (the comparison with
    # the node's fastest port of the same HCA model still applies).
    min_rate_gbps: float = 0.0
    # GPUDirect RDMA expected (the nvidia_peermem module): "auto" where a port shares a PCIe
    # switch with a GPU, "true" on every node with GPUs and RDMA ports, "false" never.
    gpudirect: str = "auto"
    # Growth during one job (epilog against the prolog's baseline) above which ib.errors fails.
    # rdma-core's ibqueryerrors defaults (infiniband-diags/etc/error_thresholds: 10 each), except
    # link_downed: one link-down breaks every connection over the port, so any fails.
    symbol_error_per_job: int = 10
    link_error_recovery_per_job: int = 10
    link_downed_per_job: int = 0
    port_rcv_errors_per_job: int = 10
    local_link_integrity_errors_per_job: int = 10
    excessive_buffer_overrun_errors_per_job: int = 10


class ConfigError(Exception):
    """A configuration file that cannot be used, with the file and key that are wrong."""

    def __init__(self, path: str, key: Optional[str], problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        where = f"{path}: {key}: " if key else f"{path}: "
        super().__init__(where + problem)


PORT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
DEEP_FLOOR_METRICS = ("hbm_gbps", "gflops", "nvlink_gbps", "nvlink_link_gbps")


def port_list(path: str, key: str, value: Any, expected: str) -> Any:
    """network.expected_ports: a count (>= 0) or a list of "hca:port" names."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(path, key, f"must be >= 0, got {value!r}")
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        for name in value:
            hca, colon, port = name.rpartition(":")
            if not colon or not hca or not port.isdigit() or not set(hca) <= PORT_NAME_CHARS:
                raise ConfigError(path, key, f"{name!r} is not a port name like \"mlx5_0:1\"")
        return tuple(value)
    raise ConfigError(path, key, f"expected {expected}, got {value!r}")


def floor_entry(entry: object) -> bool:
    """Whether a deep.floors entry reads "MODEL:METRIC=VALUE" (checks/deep.py reads it)."""
    if not isinstance(entry, str) or ":" not in entry or "=" not in entry:
        return False
    model, _, rest = entry.rpartition(":")
    metric, _, number = rest.partition("=")
    try:
        value = float(number)
    except ValueError:
        return False
    return bool(model.strip()) and metric.strip() in DEEP_FLOOR_METRICS and math.isfinite(value) and value > 0


MAX_NODES = 100000


def count_or_share(value: object) -> Tuple[Optional[Union[int, float]], str]:
    """repair.max_concurrent: a count of nodes (an int, 1..MAX_NODES) or a share of the
    cluster's GPU nodes (a float above 0 and below 1, or a string like "5%", up to "100%"); (value, "") or
    (None, what is wrong)."""
    expected = 'a count of nodes (1, 2, ...) or a share of the cluster (0.05 or "5%")'
    if isinstance(value, str):
        text = value.strip()
        share = math.nan
        if text.endswith("%"):
            try:
                share = float(text[:-1].strip()) / 100.0
            except ValueError:
                pass
        if not 0.0 < share <= 1.0:  # NaN fails this too
            return None, f"expected {expected}; a share is above 0% and at most 100%, got {value!r}"
        return share, ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"expected {expected}, got {value!r}"
    if isinstance(value, int):
        if not 1 <= value <= MAX_NODES:
            return None, f"must be between 1 and {MAX_NODES} (nodes), got {value!r}"
        return value, ""
    if not 0.0 < value < 1.0:  # NaN and inf fail this too; 2.0 is not a count
        return None, f"a share must be above 0 and below 1 (a count is an integer), got {value!r}"
    return float(value), ""


class FabricConfig(NamedTuple):
    """[fabric]: the multi-node sweep (`--fabric-sweep`) and the gang check (`--gang`);
    docs/network.md gives each default's source."""

    partition: Optional[str] = None  # where the pair jobs run; None: the cluster's default partition
    reservation: Optional[str] = None  # run the jobs only inside this (maintenance) reservation
    collective: str = "all_reduce_perf"  # or all_gather_perf (cluster-health-scanner's)
    nccl_tests: Optional[str] = None  # the directory of nccl-tests' binaries; None: on PATH
    collective_args: Tuple[str, ...] = ("-b", "1G", "-e", "4G", "-f", "2", "-g", "1")
    srun_args: Tuple[str, ...] = ()  # e.g. ["--mpi=pmix"] for an MPI build of nccl-tests
    tasks_per_node: int = 8  # srun --ntasks-per-node: one rank per GPU
    ib_write_bw: Optional[str] = None  # perftest's ib_write_bw; None: on PATH
    rails: Tuple[str, ...] = ()  # HCAs to test with ib_write_bw --use_cuda, e.g. ["mlx5_0"]
    rail_floor_gbps: float = 0.0  # a rail below this fails its pair; 0 = no ib_write_bw floor
    busbw_floor_gbps: float = 0.0  # a pair below this (GB/s) fails; 0 = the median rule only
    # per GPU model: "GRES_TYPE:busbw_gbps=GBPS", the type as Slurm's Gres=gpu:TYPE:N names it
    # (decide/fabricfloor.py), e.g. ["h100:busbw_gbps=360"]; a job takes the lowest floor of
    # its nodes, a model without an entry busbw_floor_gbps.  None built in: the site measures.
    floors: Tuple[str, ...] = ()
    median_ratio_fail: float = 0.7  # a pair below this share of its round's median fails
    partners: int = 2  # known-good partners each suspect runs with
    group_size: int = 0  # nodes per group of the optional scale round; 0 = off
    # each job's collective (and each rail's ib_write_bw) runs at most this long, under
    # timeout(1), and the job's --time is this in whole minutes plus one, as a backstop: a hang
    # ends there and fails its pair
    time_limit_s: float = 600.0
    sbatch: Optional[str] = None  # None: on PATH, else /usr/bin/sbatch (squeue, scancel alike)
    squeue: Optional[str] = None
    scancel: Optional[str] = None
    sbatch_timeout_s: float = 30.0  # deadline of one sbatch, squeue or scancel call
    # where the jobs write their output; the jobs' first nodes must share it with this host.
    # None: <state_dir>/fabric
    output_dir: Optional[str] = None
    gang_bytes: int = 256 << 20  # --gang: the collective's message size (bytes)
    gang_timeout_s: float = 120.0  # --gang: the whole check's deadline
    # --gang runs the collective with srun inside the job's own allocation (--overlap);
    # None: on PATH, else /usr/bin/srun
    srun: Optional[str] = None


FABRIC_COLLECTIVES = ("all_reduce_perf", "all_gather_perf")
FABRIC_BOUNDS = {
    "time_limit_s": (10.0, 86400.0, "seconds"),
    "sbatch_timeout_s": (1.0, 600.0, "seconds"),
    "gang_timeout_s": (5.0, 3600.0, "seconds"),
    "partners": (1, 16, "partners"),
    "group_size": (0, MAX_NODES, "nodes"),
    "tasks_per_node": (1, 1024, "tasks"),
    "gang_bytes": (8, 1 << 36, "bytes"),
}
FABRIC_NON_NEGATIVE = {"rail_floor_gbps", "busbw_floor_gbps"}
FABRIC_UNSET_MEANS = {
    "fabric.partition": "the cluster's default partition",
    "fabric.reservation": "no reservation",
    "fabric.nccl_tests": "found on PATH",
    "fabric.ib_write_bw": "found on PATH",
    "fabric.sbatch": "found on PATH, else /usr/bin/sbatch",
    "fabric.squeue": "found on PATH, else /usr/bin/squeue",
    "fabric.scancel": "found on PATH, else /usr/bin/scancel",
    "fabric.output_dir": "<state_dir>/fabric",
    "fabric.srun": "found on PATH, else /usr/bin/srun",
}


FABRIC_FLOOR_METRICS = ("busbw_gbps",)
FABRIC_FLOOR_SHAPE = "\"GRES_TYPE:busbw_gbps=GBPS\" (e.g. \"h100:busbw_gbps=360\")"
_GRES_TYPE_RE = re.compile(r"[A-Za-z0-9_.+-]+")


def fabric_floor_problem(entry: object) -> Optional[str]:
    """Why one `[fabric] floors` entry is not usable, or None (config.py names file and key)."""
    if not isinstance(entry, str):
        return f"expected {FABRIC_FLOOR_SHAPE}, got {entry!r}"
    model, colon, rest = entry.partition(":")
    metric, equals, number = rest.partition("=")
    if not colon or not equals or not _GRES_TYPE_RE.fullmatch(model.strip()):
        return f"expected {FABRIC_FLOOR_SHAPE}, got {entry!r}"
    if metric.strip() not in FABRIC_FLOOR_METRICS:
        return f"{entry!r}: unknown metric {metric.strip()!r} (known: {', '.join(FABRIC_FLOOR_METRICS)})"
    try:
        value = float(number)
    except ValueError:
        return f"{entry!r}: {number.strip()!r} is not a number of GB/s"
    if not math.isfinite(value) or value <= 0:
        return f"{entry!r}: the floor must be a number of GB/s above 0"
    return None


def fabric_floors_problem(entries: Iterable[object]) -> Optional[str]:
    """The first unusable entry of the list, or a model named twice, or None."""
    seen: Dict[str, str] = {}
    for entry in entries:
        problem = fabric_floor_problem(entry)
        if problem:
            return problem
        model = str(entry).partition(":")[0].strip().lower()
        if model in seen:
            return f"{entry!r}: GPU type {model!r} already has a floor ({seen[model]!r})"
        seen[model] = str(entry)
    return None


class SuspectsConfig(NamedTuple):
    """[suspects]: fleet memory, `--suspects` (decide/suspects.py; docs/suspects.md has each
    rule and why its default)."""

    act: bool = False  # --act sends suspects to verification only where this is also true
    sacct: Optional[str] = None  # None: on PATH, else /usr/bin/sacct
    sacct_timeout_s: float = 60.0  # deadline of one sacct call (one piece of the window)
    sacct_max_bytes: int = 64 << 20  # output kept of one call; more splits the piece in two
    sacct_piece_s: float = 86400.0  # the window is read in pieces this long
    lookback_s: float = 14 * 86400.0  # --since's default: this long before --until
    half_life_s: float = 14 * 86400.0  # a job's evidence halves every this long before --until
    black_hole_s: float = 60.0  # a job that fails within this of its start feeds a black hole
    black_hole_jobs: int = 5  # ... this many such jobs in one incident
    black_hole_users: int = 3  # ... of at least this many users
    black_hole_share: float = 0.8  # ... and at least this share of the jobs the node ran then
    incident_gap_s: float = 3600.0  # failures closer than this on one node are one incident
    lemon_fdr: float = 0.01  # false discovery rate across nodes (Benjamini-Hochberg)
    lemon_users: int = 2  # a lemon's excess failures come from at least this many users
    # the user with the largest excess of failures on a node counts at most this much more
    # than the user with the next largest
    user_cap: float = 2.0
    lemon_min_excess: float = 3.0  # decayed failures above the fleet's expectation, at least
    remediations: int = 5  # the lemon rule of our own history: this many resets/reboots ...
    remediation_window_s: float = 7 * 86400.0  # ... in this long (NVSentinel's 5 in 7 days)
    xid_repeat_window_s: float = 86400.0  # Xid 13 or 31 twice on one GPU within this
    same_xid_reboots: int = 2  # the same Xid back after this many reboots (gpud's rule)


SUSPECTS_BOUNDS = {
    "sacct_timeout_s": (1.0, 3600.0, "seconds"),
    "sacct_max_bytes": (1 << 16, 1 << 32, "bytes"),
    "sacct_piece_s": (600.0, 366 * 86400.0, "seconds"),
    "lookback_s": (3600.0, 3660 * 86400.0, "seconds"),
    "half_life_s": (3600.0, 3660 * 86400.0, "seconds"),
    "black_hole_s": (1.0, 86400.0, "seconds"),
    "black_hole_jobs": (2, 100000, "jobs"),
    "black_hole_users": (1, 10000, "users"),
    "incident_gap_s": (1.0, 30 * 86400.0, "seconds"),
    "lemon_users": (1, 10000, "users"),
    "user_cap": (0.5, 1000.0, "failures"),
    "lemon_min_excess": (0.0, 100000.0, "failures"),
    "remediations": (2, 1000, "remediations"),
    "remediation_window_s": (3600.0, 366 * 86400.0, "seconds"),
    "xid_repeat_window_s": (60.0, 366 * 86400.0, "seconds"),
    "same_xid_reboots": (1, 100, "reboots"),
}
SUSPECTS_FRACTIONS = {"black_hole_share", "lemon_fdr"}
SUSPECTS_UNSET_MEANS = {"suspects.sacct": "found on PATH, else /usr/bin/sacct"}
