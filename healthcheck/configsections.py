"""The config's section records: what the rest of the code reads (`config.probe.timeout_s`).

Each field's type is written here for mypy; its default, bounds and meaning are the schema's
(configschema.KEYS, keyed by the full dotted path), and tests/unit/test_configschema.py checks
that every record has exactly the schema's keys, with matching types.  The entry validators of
the keys whose values have a shape of their own (ports, floors, a count or a share) are here
too; config.py names the file and key of what they refuse.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

from .configschema import DEFAULTS as _D
from .configschema import DEEP_FLOOR_METRICS, INTERNODE_COLLECTIVES, MAX_NODES  # noqa: F401  (re-exported)
from .records import NamedTuple


class DrainConfig(NamedTuple):
    """[drain]: how much of the cluster this tool may hold drained."""

    max_fraction: float = _D["drain.max_fraction"]
    report_only: bool = _D["drain.report_only"]


class ProbeConfig(NamedTuple):
    """[probe]: the CUDA allocation probe."""

    enabled: bool = _D["probe.enabled"]
    quick_mib: int = _D["probe.quick_mib"]
    full_fraction: float = _D["probe.full_fraction"]
    timeout_s: float = _D["probe.timeout_s"]


class DeepConfig(NamedTuple):
    """[deep]: --level deep (README, "The deep level"; checks/deep.py has the sources)."""

    enabled: bool = _D["deep.enabled"]
    timeout_s: float = _D["deep.timeout_s"]
    sibling_ratio_warn: float = _D["deep.sibling_ratio_warn"]
    sibling_ratio_fail: float = _D["deep.sibling_ratio_fail"]
    floor_fraction: float = _D["deep.floor_fraction"]
    pcie_fraction: float = _D["deep.pcie_fraction"]
    floors: Tuple[str, ...] = _D["deep.floors"]
    bandwidth_mib: int = _D["deep.bandwidth_mib"]
    duration_s: float = _D["deep.duration_s"]
    memtest_passes: int = _D["deep.memtest_passes"]


class DcgmConfig(NamedTuple):
    """[dcgm]: the DCGM bridge (read/dcgm.py): `dcgmi diag` at --level deep, `dcgmi health`
    on --node."""

    enabled: str = _D["dcgm.enabled"]
    level: int = _D["dcgm.level"]
    timeout_s: float = _D["dcgm.timeout_s"]
    health_timeout_s: float = _D["dcgm.health_timeout_s"]


class RepairConfig(NamedTuple):
    """[repair]: the repair loop (docs/repair.md)."""

    enabled: bool = _D["repair.enabled"]
    max_attempts: int = _D["repair.max_attempts"]
    window_s: float = _D["repair.window_s"]
    cooldown_s: float = _D["repair.cooldown_s"]
    max_concurrent: Union[int, float] = _D["repair.max_concurrent"]
    bug_report: Optional[str] = _D["repair.bug_report"]
    bug_report_timeout_s: float = _D["repair.bug_report_timeout_s"]
    bug_report_max_bytes: int = _D["repair.bug_report_max_bytes"]
    systemd_run: Optional[str] = _D["repair.systemd_run"]


class ChecksConfig(NamedTuple):
    """[checks]: which checks run."""

    disabled: Tuple[str, ...] = _D["checks.disabled"]


class Thresholds(NamedTuple):
    """[thresholds]: the limits of the node's checks (checks/*.py give each source)."""

    ecc_volatile_corrected: int = _D["thresholds.ecc_volatile_corrected"]
    retired_pages: int = _D["thresholds.retired_pages"]
    memory_leaked_mib: int = _D["thresholds.memory_leaked_mib"]
    pcie_width_min: int = _D["thresholds.pcie_width_min"]
    thermal_margin_c: int = _D["thresholds.thermal_margin_c"]
    nvlink_errors_per_job: int = _D["thresholds.nvlink_errors_per_job"]
    pcie_replay_per_job: int = _D["thresholds.pcie_replay_per_job"]


class NetworkConfig(NamedTuple):
    """[network]: the RDMA ports (checks/network.py; docs/network.md gives each default's
    source)."""

    expected_ports: Optional[Union[int, Tuple[str, ...]]] = _D["network.expected_ports"]
    min_rate_gbps: float = _D["network.min_rate_gbps"]
    gpudirect: str = _D["network.gpudirect"]
    symbol_error_per_job: int = _D["network.symbol_error_per_job"]
    link_error_recovery_per_job: int = _D["network.link_error_recovery_per_job"]
    link_downed_per_job: int = _D["network.link_downed_per_job"]
    port_rcv_errors_per_job: int = _D["network.port_rcv_errors_per_job"]
    local_link_integrity_errors_per_job: int = _D["network.local_link_integrity_errors_per_job"]
    excessive_buffer_overrun_errors_per_job: int = _D["network.excessive_buffer_overrun_errors_per_job"]


class InternodeConfig(NamedTuple):
    """[internode] (old name [fabric]): the multi-node sweep (`--internode-sweep`) and the gang check (`--gang`);
    docs/network.md gives each default's source."""

    partition: Optional[str] = _D["internode.partition"]
    reservation: Optional[str] = _D["internode.reservation"]
    collective: str = _D["internode.collective"]
    nccl_tests: Optional[str] = _D["internode.nccl_tests"]
    collective_args: Tuple[str, ...] = _D["internode.collective_args"]
    srun_args: Tuple[str, ...] = _D["internode.srun_args"]
    tasks_per_node: int = _D["internode.tasks_per_node"]
    ib_write_bw: Optional[str] = _D["internode.ib_write_bw"]
    rails: Tuple[str, ...] = _D["internode.rails"]
    rail_floor_gbps: float = _D["internode.rail_floor_gbps"]
    busbw_floor_gbps: float = _D["internode.busbw_floor_gbps"]
    floors: Tuple[str, ...] = _D["internode.floors"]
    median_ratio_fail: float = _D["internode.median_ratio_fail"]
    partners: int = _D["internode.partners"]
    group_size: int = _D["internode.group_size"]
    time_limit_s: float = _D["internode.time_limit_s"]
    sbatch: Optional[str] = _D["internode.sbatch"]
    squeue: Optional[str] = _D["internode.squeue"]
    scancel: Optional[str] = _D["internode.scancel"]
    sbatch_timeout_s: float = _D["internode.sbatch_timeout_s"]
    output_dir: Optional[str] = _D["internode.output_dir"]
    gang_bytes: int = _D["internode.gang_bytes"]
    gang_timeout_s: float = _D["internode.gang_timeout_s"]
    srun: Optional[str] = _D["internode.srun"]


class ConfigError(Exception):
    """A configuration file that cannot be used, with the file and key that are wrong."""

    def __init__(self, path: str, key: Optional[str], problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        where = f"{path}: {key}: " if key else f"{path}: "
        super().__init__(where + problem)


PORT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


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


FABRIC_FLOOR_METRICS = ("busbw_gbps",)
FABRIC_FLOOR_SHAPE = "\"GRES_TYPE:busbw_gbps=GBPS\" (e.g. \"h100:busbw_gbps=360\")"
_GRES_TYPE_RE = re.compile(r"[A-Za-z0-9_.+-]+")


def internode_floor_problem(entry: object) -> Optional[str]:
    """Why one `[internode] floors` entry is not usable, or None (config.py names file and key)."""
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


def internode_floors_problem(entries: Iterable[object]) -> Optional[str]:
    """The first unusable entry of the list, or a model named twice, or None."""
    seen: Dict[str, str] = {}
    for entry in entries:
        problem = internode_floor_problem(entry)
        if problem:
            return problem
        model = str(entry).partition(":")[0].strip().lower()
        if model in seen:
            return f"{entry!r}: GPU type {model!r} already has a floor ({seen[model]!r})"
        seen[model] = str(entry)
    return None


def deep_floors_problem(entries: Iterable[object]) -> Optional[str]:
    """The first `[deep] floors` entry that does not read "MODEL:METRIC=VALUE", or None."""
    for entry in entries:
        if not floor_entry(entry):
            return (f"expected \"MODEL:METRIC=VALUE\" (METRIC one of {', '.join(DEEP_FLOOR_METRICS)}, "
                    f"VALUE > 0), got {entry!r}")
    return None


class SuspectsConfig(NamedTuple):
    """[suspects]: fleet memory, `--suspects` (decide/suspects.py; docs/suspects.md)."""

    act: bool = _D["suspects.act"]
    verify_cooldown_s: float = _D["suspects.verify_cooldown_s"]
    internode_retest: bool = _D["suspects.internode_retest"]
    sacct: Optional[str] = _D["suspects.sacct"]
    sacct_timeout_s: float = _D["suspects.sacct_timeout_s"]
    sacct_max_bytes: int = _D["suspects.sacct_max_bytes"]
    sacct_piece_s: float = _D["suspects.sacct_piece_s"]
    lookback_s: float = _D["suspects.lookback_s"]
    half_life_s: float = _D["suspects.half_life_s"]
    black_hole_s: float = _D["suspects.black_hole_s"]
    black_hole_jobs: int = _D["suspects.black_hole_jobs"]
    black_hole_users: int = _D["suspects.black_hole_users"]
    black_hole_share: float = _D["suspects.black_hole_share"]
    incident_gap_s: float = _D["suspects.incident_gap_s"]
    lemon_fdr: float = _D["suspects.lemon_fdr"]
    lemon_users: int = _D["suspects.lemon_users"]
    user_cap: float = _D["suspects.user_cap"]
    lemon_min_excess: float = _D["suspects.lemon_min_excess"]
    remediations: int = _D["suspects.remediations"]
    remediation_window_s: float = _D["suspects.remediation_window_s"]
    xid_repeat_window_s: float = _D["suspects.xid_repeat_window_s"]
    same_xid_reboots: int = _D["suspects.same_xid_reboots"]
    counter_window_s: float = _D["suspects.counter_window_s"]
    sbe_ratio: float = _D["suspects.sbe_ratio"]
    sbe_min_errors: int = _D["suspects.sbe_min_errors"]
    remap_low_growth: int = _D["suspects.remap_low_growth"]
    retired_pages_growth: int = _D["suspects.retired_pages_growth"]
    pcie_replay_growth: int = _D["suspects.pcie_replay_growth"]
    nvlink_replay_growth: int = _D["suspects.nvlink_replay_growth"]


# configschema.Key.shape -> what is wrong with a list of entries, or None
SHAPES: Dict[str, Callable[[Iterable[object]], Optional[str]]] = {
    "deep_floors": deep_floors_problem, "internode_floors": internode_floors_problem}
