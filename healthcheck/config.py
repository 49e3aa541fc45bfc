"""Configuration: one TOML file, validated at load time against a schema.

    # /etc/gpu-healthcheck/config.toml
    state_dir = "/var/lib/gpu-healthcheck"
    kernel_log = "/dev/kmsg"
    expected_gpus = 8
    [drain]
    max_fraction = 0.1
    [probe]
    quick_mib = 256
    [checks]
    disabled = ["pcie.width_degraded"]
    [thresholds]
    ecc_volatile_corrected = 1000

A missing key takes its default; an unknown key, a wrong type or an unreadable file raises
ConfigError naming the file and the key.  The config names checks and thresholds, never code.
"""

from __future__ import annotations

import math
import os
import stat
from typing import Any, Collection, Dict, FrozenSet, List, Mapping, Optional, Tuple, Union

from .configsections import (DEEP_FLOOR_METRICS, PORT_NAME_CHARS, ConfigError, DcgmConfig,  # noqa: F401  (re-exported)
                             DeepConfig, NetworkConfig, count_or_share, floor_entry, port_list)
from .configsections import (FABRIC_BOUNDS, FABRIC_COLLECTIVES, FABRIC_NON_NEGATIVE, FABRIC_UNSET_MEANS, FabricConfig,
                             fabric_floors_problem)
from .configsections import SUSPECTS_BOUNDS, SUSPECTS_FRACTIONS, SUSPECTS_UNSET_MEANS, SuspectsConfig
from .records import NamedTuple

DEFAULT_CONFIG_PATH = "/etc/gpu-healthcheck/config.toml"
CONFIG_ENV = "GPU_HEALTHCHECK_CONFIG"


class DrainConfig(NamedTuple):
    # Share of the cluster's GPU nodes this tool may hold drained at once.  At least one node
    # may always be drained, so a small cluster is still protected from one bad GPU.
    max_fraction: float = 0.1
    # Never drain or resume: log and report what would have been done (a first rollout).
    report_only: bool = False


class ProbeConfig(NamedTuple):
    enabled: bool = True
    quick_mib: int = 256  # MiB allocated, written and read back per GPU at --level quick
    full_fraction: float = 0.9  # share of free memory tested at --level full
    timeout_s: float = 30.0  # deadline for one GPU's probe child, from its start


class RepairConfig(NamedTuple):
    # The repair loop (README "Repair"): off unless a site turns it on; `--repair` runs it anyway.
    enabled: bool = False
    # The same GPU repaired this many times within window_s marks the node rma.
    max_attempts: int = 2
    window_s: float = 7 * 86400.0
    # At most one repair attempt per node within this many seconds.
    cooldown_s: float = 3600.0
    # Nodes resetting or rebooting at once, cluster-wide (held like the drain budget): a count,
    # or a share of the cluster's GPU nodes (0.05 or "5%"; at least one node).
    max_concurrent: Union[int, float] = 1
    # nvidia-bug-report.sh for the RMA evidence: its path (None: on PATH, else
    # /usr/bin/nvidia-bug-report.sh; absent: the ledger alone), deadline and size cap.
    bug_report: Optional[str] = None
    bug_report_timeout_s: float = 300.0
    bug_report_max_bytes: int = 64 << 20
    # it runs outside the run's budget, as a transient systemd unit started by this systemd-run
    # (None: on PATH, else /usr/bin/systemd-run; absent: a detached process of its own)
    systemd_run: Optional[str] = None


class ChecksConfig(NamedTuple):
    disabled: Tuple[str, ...] = ()


class Thresholds(NamedTuple):
    # Volatile corrected (single-bit) ECC errors above which we warn.  Corrected errors are
    # harmless one by one; a high count since the driver loaded predicts row remaps / retirement.
    ecc_volatile_corrected: int = 1000
    # NVIDIA's RMA criterion for page retirement (pre-Ampere): 60 retired pages in total.
    retired_pages: int = 60
    # Memory in use with no process on the GPU (MiB) that we call leaked.  Real idle boards show
    # a few MiB, desktop boards with a display several hundred; a leaked context shows GiBs.
    memory_leaked_mib: int = 2048
    # PCIe link width below which we warn (0: off; narrower than the GPU's max is then info).
    # Set 16 on a fleet of SXM or x16-slot boards.
    pcie_width_min: int = 0
    # Degrees below the slowdown threshold at which we warn that the GPU is about to throttle.
    thermal_margin_c: int = 0
    # NVLink CRC and replay errors (each) and PCIe replays new during one job (epilog vs the
    # prolog's baseline) above which we warn: each is retried in hardware, this many in one job
    # means a marginal link (see checks/fabric.py and checks/board.py for the sources).
    nvlink_errors_per_job: int = 100
    pcie_replay_per_job: int = 100


class Config(NamedTuple):
    state_dir: str = "/var/lib/gpu-healthcheck"
    kernel_log: str = "/dev/kmsg"
    # The prolog takes the /dev/kmsg position by writing one marker record and reading back its
    # sequence number (read/kmsg.py); false: by reading the whole buffer (7-40 ms on a big node)
    kernel_log_marker: bool = True
    scontrol: Optional[str] = None  # None: found on PATH, else /usr/bin/scontrol
    scontrol_timeout_s: float = 10.0
    sysfs_root: str = "/sys"
    proc_root: str = "/proc"  # where the uptime is read (the boot grace)
    node_name: Optional[str] = None  # Slurm NodeName: None = $SLURMD_NODENAME, else short hostname
    # slurmd's gres.conf, to turn SLURM_JOB_GPUS (gres indices) into GPUs; None = beside
    # $SLURM_CONF, else /etc/slurm/gres.conf (config-less sites: slurmd's conf-cache copy)
    gres_conf: Optional[str] = None
    expected_gpus: Optional[int] = None
    # NVLink links each GPU must have active; None: all the links NVML says the GPU has.  Set it
    # on SKUs with links off by design.
    expected_nvlinks: Optional[int] = None
    nvml_timeout_s: float = 10.0  # deadline for the whole NVML read
    # Whether this site runs its GPUs with ECC on: false makes ECC off info everywhere; unset,
    # ECC off is info on workstation boards that ship with it off (RTX, Quadro, GeForce,
    # TITAN) and a warning on data-centre GPUs.
    expect_ecc: Optional[bool] = None
    # GPUs the admin took out of service (serials, GPU- UUIDs or PCI ids): their findings are
    # info, never a drain, until the entry is removed
    exclude_gpus: Tuple[str, ...] = ()
    dcgmi: Optional[str] = None  # None: found on PATH, else /usr/bin/dcgmi (the DCGM bridge)
    nvidia_smi: Optional[str] = None  # None: found on PATH, else /usr/bin/nvidia-smi
    nvidia_smi_timeout_s: float = 20.0  # deadline of one nvidia-smi call (a GPU reset)
    # `--node --act` (HealthCheckProgram, which Slurm kills after 60 s): the whole run ends
    # within this many seconds; the NVML, probe and scontrol deadlines shrink to fit.
    act_budget_s: float = 50.0
    # Seconds after the NVIDIA driver loads during which fabric training, NVLink and
    # persistence state are not judged yet (they settle in the first minutes after boot).
    boot_grace_s: float = 300.0
    # --node: Xids of the last this many seconds count; 0 = since boot.  Prolog and epilog
    # always use the job's window.
    xid_window_s: float = 0.0
    # A failing Xid on a GPU whose Xids were acknowledged (--ack, or resuming our drain) this
    # many times already escalates: RMA, never resumed automatically; resets do not help it.
    xid_escalate_after: int = 3
    # The probe levels a job may ask for with --gpu-healthcheck= (SPANK_GPU_HEALTHCHECK_LEVEL in
    # the prolog's environment).  Any user can put that variable there (a SPANK plugin of their
    # own, their own plugstack.conf), so the prolog honours only these; another ask is logged
    # and runs the default level.  A --level on the prolog's command line (the SPANK plugin's,
    # bounded by its allow_full=) is the admin's, not the job's.
    job_levels: Tuple[str, ...] = ("quick",)
    history_file: Optional[str] = None  # None: <state_dir>/history.jsonl
    history_max_bytes: int = 1 << 20
    metrics_file: Optional[str] = None  # node_exporter textfile, e.g. /var/lib/node_exporter/gpu_healthcheck.prom
    journal: bool = True  # send entries to journald where its socket exists
    drain: DrainConfig = DrainConfig()
    probe: ProbeConfig = ProbeConfig()
    deep: DeepConfig = DeepConfig()
    dcgm: DcgmConfig = DcgmConfig()
    repair: RepairConfig = RepairConfig()
    checks: ChecksConfig = ChecksConfig()
    thresholds: Thresholds = Thresholds()
    network: NetworkConfig = NetworkConfig()
    fabric: FabricConfig = FabricConfig()
    suspects: SuspectsConfig = SuspectsConfig()
    source: Optional[str] = None  # the file this came from, for messages
    warnings: Tuple[str, ...] = ()  # problems found while loading that did not stop us

    def history_path(self) -> str:
        return self.history_file or os.path.join(self.state_dir, "history.jsonl")

    def enabled(self, check_id: str) -> bool:
        return check_id not in self.checks.disabled


_SECTIONS: Dict[str, Any] = {"drain": DrainConfig, "probe": ProbeConfig, "deep": DeepConfig,
             "dcgm": DcgmConfig, "checks": ChecksConfig, "thresholds": Thresholds,
             "network": NetworkConfig, "repair": RepairConfig, "fabric": FabricConfig,
             "suspects": SuspectsConfig}
_NON_NEGATIVE = {"xid_window_s", "history_max_bytes", "expected_gpus", "boot_grace_s",
                 "ecc_volatile_corrected", "retired_pages",
                 "memory_leaked_mib", "thermal_margin_c", "pcie_width_min", "expected_nvlinks",
                 "nvlink_errors_per_job", "pcie_replay_per_job", "min_rate_gbps",
                 "symbol_error_per_job", "link_error_recovery_per_job", "link_downed_per_job",
                 "port_rcv_errors_per_job", "local_link_integrity_errors_per_job",
                 "excessive_buffer_overrun_errors_per_job"} | FABRIC_NON_NEGATIVE
_CHOICES = {"gpudirect": ("auto", "true", "false"), "collective": FABRIC_COLLECTIVES}
_ABSOLUTE = {"state_dir"}  # keys that must name an absolute path
_FRACTIONS = {"max_fraction", "full_fraction", "sibling_ratio_warn", "sibling_ratio_fail",
              "floor_fraction", "pcie_fraction", "median_ratio_fail"} | SUSPECTS_FRACTIONS
DCGM_ENABLED = ("auto", "true", "false")
# The levels a job may ask for (cli.LEVELS; `job_levels`): what that list may hold.
PROBE_LEVELS = ("quick", "full", "deep")
_LIST_CHOICES: Dict[str, Tuple[str, ...]] = {"job_levels": PROBE_LEVELS}
# Values that cannot be meant, refused at load rather than met at run time (a zero or infinite
# deadline fails or hangs every check; a probe larger than any GPU fails every probe):
# key -> (lowest, highest), both inclusive, and why.
MAX_GPU_MIB = 288 * 1024  # the largest GPU memory shipping (B300: 288 GB)
_BOUNDS: Dict[str, Tuple[float, float, str]] = {
    "nvml_timeout_s": (0.1, 600.0, "seconds; 0 would call every GPU lost"),
    "scontrol_timeout_s": (0.1, 600.0, "seconds; 0 would fail every drain"),
    "timeout_s": (0.1, 3600.0, "seconds; 0 would fail every probe"),
    "act_budget_s": (5.0, 3600.0, "seconds; keep it below Slurm's 60 s HealthCheckProgram limit"),
    "quick_mib": (1.0, float(MAX_GPU_MIB), "MiB; no GPU has more memory"),
    "full_fraction": (0.01, 1.0, "a share of free memory"),
    "boot_grace_s": (0.0, 86400.0, "seconds"),
    "xid_escalate_after": (1, 1000, "acknowledgements"),
    "level": (1, 4, "dcgmi diag run levels"),
    "health_timeout_s": (0.1, 600.0, "seconds"),
    "bandwidth_mib": (1.0, float(MAX_GPU_MIB), "MiB"),
    "duration_s": (0.5, 3600.0, "seconds of compute load per GPU"),
    "memtest_passes": (1, 100, "passes of the memory test"),
    "nvidia_smi_timeout_s": (1.0, 3600.0, "seconds; a GPU reset takes seconds"),
    "max_attempts": (1, 1000, "repairs of one GPU"),
    "window_s": (0.0, 10 * 365 * 86400.0, "seconds"),
    "cooldown_s": (0.0, 365 * 86400.0, "seconds"),
    "bug_report_timeout_s": (1.0, 7200.0, "seconds"),
    "bug_report_max_bytes": (1024, 1 << 34, "bytes"),
    **FABRIC_BOUNDS,
    **SUSPECTS_BOUNDS,
}


def _annotation(cls: Any, name: str) -> str:
    """A field's annotation as written (NamedTuple keeps them as ForwardRef objects)."""
    annotation = cls.__annotations__[name]
    return str(getattr(annotation, "__forward_arg__", annotation))


def _type_name(annotation: str) -> str:
    if "Union[int, Tuple[str" in annotation:
        return "a count or a list of hca:port names"
    return (annotation.replace("Optional[", "").replace("]", "")
            .replace("Tuple[str, ...", "list of strings"))


def _coerce(path: str, key: str, annotation: str, value: Any) -> Any:
    """Check one value against its annotation; ints are accepted for floats."""
    base = annotation.replace("Optional[", "").rstrip("]") if annotation.startswith(
        "Optional[") else annotation
    ok: bool
    leaf = key.rsplit(".", 1)[-1]
    if leaf in _CHOICES:
        if isinstance(value, bool):  # gpudirect = true, as TOML writes it
            value = "true" if value else "false"
        if value not in _CHOICES[leaf]:
            raise ConfigError(path, key, f"expected one of {', '.join(_CHOICES[leaf])}, got {value!r}")
        return value
    if base.startswith("Union[int, Tuple[str"):
        return port_list(path, key, value, _type_name('Union[int, Tuple[str'))
    if base == "Union[int, float]":
        counted, problem = count_or_share(value)
        if counted is None:
            raise ConfigError(path, key, problem)
        return counted
    if key == "dcgm.enabled" and isinstance(value, bool):
        value = "true" if value else "false"  # TOML's true/false mean the same as the words
    if key == "dcgm.enabled" and value not in DCGM_ENABLED:
        raise ConfigError(path, key, f"expected auto, true or false, got {value!r}")
    if key == "deep.floors" and isinstance(value, list):
        for entry in value:
            if not floor_entry(entry):
                raise ConfigError(path, key, f"expected \"MODEL:METRIC=VALUE\" (METRIC one of "
                                             f"{', '.join(DEEP_FLOOR_METRICS)}, VALUE > 0), got {entry!r}")
    if key == "fabric.floors" and isinstance(value, list):
        floors_problem = fabric_floors_problem(value)
        if floors_problem:
            raise ConfigError(path, key, floors_problem)
    if base == "bool":
        ok = isinstance(value, bool)
    elif base == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = float(value)
    elif base == "str":
        ok = isinstance(value, str) and value != "" and "\0" not in value
    elif base.startswith("Tuple[str"):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if ok:
            value = tuple(value)
    else:  # pragma: no cover - a schema bug, not a user error
        raise AssertionError(f"unhandled annotation {annotation}")
    if not ok:
        raise ConfigError(path, key, f"expected {_type_name(annotation)}, got {value!r}")
    if leaf in _LIST_CHOICES:
        wrong = [v for v in value if v not in _LIST_CHOICES[leaf]]
        if wrong:
            raise ConfigError(path, key, f"unknown value(s) {', '.join(map(repr, wrong))} "
                                         f"(known: {', '.join(_LIST_CHOICES[leaf])})")
    if isinstance(value, float) and not math.isfinite(value):
        # TOML has nan and inf; a NaN deadline makes every comparison false (every GPU "lost")
        raise ConfigError(path, key, f"must be a finite number, got {value!r}")
    if leaf in _BOUNDS and isinstance(value, (int, float)):
        low, high, unit = _BOUNDS[leaf]
        if not low <= value <= high:
            raise ConfigError(path, key, f"must be between {low:g} and {high:g} ({unit}), got {value!r}")
    if leaf in _NON_NEGATIVE and value < 0:
        raise ConfigError(path, key, f"must be >= 0, got {value!r}")
    if leaf in _FRACTIONS and not 0.0 <= value <= 1.0:
        raise ConfigError(path, key, f"must be between 0 and 1, got {value!r}")
    return value


def _build(path: str, cls: Any, table: Mapping[str, Any], prefix: str,
           errors: Optional[List[ConfigError]] = None) -> Any:
    """The section `cls` from its TOML table.  errors: where each wrong key's ConfigError
    goes, the key left at its default, so one pass finds every error; None: raise the first."""
    known = {name: _annotation(cls, name) for name in cls._fields
             if name not in ("source", "warnings")}
    values: Dict[str, Any] = {}
    for key, value in table.items():
        dotted = prefix + key
        try:
            if key not in known:
                choices = ", ".join(sorted(k for k in known if k not in _SECTIONS or not prefix))
                raise ConfigError(path, dotted, f"unknown key (known: {choices})")
            if key in _SECTIONS and not prefix:
                if not isinstance(value, dict):
                    raise ConfigError(path, dotted, f"expected a [{key}] table, got {value!r}")
                values[key] = _build(path, _SECTIONS[key], value, dotted + ".", errors)
            else:
                values[key] = _coerce(path, dotted, str(known[key]), value)
                if key in _ABSOLUTE and not os.path.isabs(values[key]):
                    # a relative state_dir would follow whatever directory slurmd starts us in
                    raise ConfigError(path, dotted, f"must be an absolute path, got {value!r}")
        except ConfigError as exc:
            if errors is None:
                raise
            errors.append(exc)
            values.pop(key, None)
    return cls(**values)


def _load_toml(text: str, path: str) -> Dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        table: Dict[str, Any] = tomllib.loads(text)
    except (ValueError, RecursionError) as exc:
        # TOMLDecodeError is a ValueError; tomllib also lets out a plain ValueError for an
        # integer of more than 4300 digits (Python's int() limit) and a RecursionError for
        # arrays nested a few hundred deep, both found by tests/fuzz/fuzz_config.py: they
        # must be a ConfigError, not a traceback in the prolog.
        raise ConfigError(path, None, f"not valid TOML: {exc}") from None
    return table


def keys_set(text: str, path: str = "<config>") -> FrozenSet[str]:
    """The dotted keys a config text sets, e.g. {"state_dir", "thresholds.retired_pages"}."""
    keys: set = set()
    for key, value in _load_toml(text, path).items():
        if key in _SECTIONS and isinstance(value, dict):
            keys.update(f"{key}.{sub}" for sub in value)
        else:
            keys.add(key)
    return frozenset(keys)


def parse_config(text: str, path: str = "<config>",
                 known_checks: Optional[Collection[str]] = None,
                 errors: Optional[List[ConfigError]] = None) -> Config:
    """Parse TOML text into a Config (pure: no file access).

    `known_checks`: the check ids `[checks] disabled` may name (the registry's catalogue,
    checks.CATALOGUE, which every caller that runs or lists checks passes).  The config imports
    no check: it is a leaf every module may use.  None leaves the ids to the caller (the crash
    logger, which needs only the paths).  `errors`: collect every ConfigError there (each
    wrong key keeps its default; --check-config) instead of raising the first.
    """
    config: Config = _build(path, Config, _load_toml(text, path), "", errors)
    if known_checks is not None:
        unknown_checks = [c for c in config.checks.disabled if c not in known_checks]
        if unknown_checks:
            problem = ConfigError(path, "checks.disabled",
                                  f"unknown check id(s): {', '.join(unknown_checks)}")
            if errors is None:
                raise problem
            errors.append(problem)
    return config._replace(source=path)


def unsafe_ownership(st: os.stat_result, running_as_root: bool) -> Optional[str]:
    """Why a config file must not be trusted by a root process, or None.

    A root tool that drains nodes must not take orders from a file another user can change.
    """
    if not running_as_root:
        return None
    if st.st_uid != 0:
        return f"owned by uid {st.st_uid}, not root"
    if st.st_mode & stat.S_IWOTH:
        return "world-writable"
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"writable by group {st.st_gid}"
    return None


def config_path(cli_path: Optional[str], environ: Mapping[str, str]) -> Tuple[str, bool]:
    """The config file to read and whether the user named it explicitly."""
    if cli_path:
        return cli_path, True
    env_path = environ.get(CONFIG_ENV)
    if env_path:
        return env_path, True
    return DEFAULT_CONFIG_PATH, False


def load_config(cli_path: Optional[str], environ: Mapping[str, str],
                known_checks: Optional[Collection[str]] = None) -> Config:
    """Read and validate the config file.

    The default path may be absent (defaults apply); a file the user named must exist.
    A file an unprivileged user could have written is refused when we run as root: the checks
    then run with defaults and the refusal is carried in Config.warnings for a critical log.

    Raises:
        ConfigError: unreadable, invalid TOML, unknown key, wrong type.
    """
    path, explicit = config_path(cli_path, environ)
    found = read_config_file(path, explicit)
    if found is None:
        return Config()
    st, text = found
    problem = unsafe_ownership(st, os.geteuid() == 0)
    if problem:
        return Config(source=path, warnings=(
            f"{path}: refused: {problem}; running with built-in defaults",))
    return parse_config(text, path, known_checks)


def read_config_file(path: str, explicit: bool) -> Optional[Tuple[os.stat_result, str]]:
    """The file's status and text; None when the default path is absent (defaults apply).

    Raises:
        ConfigError: a named file that is missing, unreadable or not UTF-8.
    """
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            raw = handle.read()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(path, None, "no such file") from None
        return None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        return st, raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, None, f"not UTF-8: {exc}") from None


# What a key left unset (None) means, for --check-config.
UNSET_MEANS = {
    "scontrol": "found on PATH, else /usr/bin/scontrol",
    "node_name": "$SLURMD_NODENAME, else the short hostname",
    "gres_conf": "gres.conf beside $SLURM_CONF, else /etc/slurm/gres.conf",
    "expected_gpus": "not checked: sysfs and NVML are compared instead",
    "history_file": "<state_dir>/history.jsonl",
    "metrics_file": "no node_exporter textfile",
    "dcgmi": "found on PATH, else /usr/bin/dcgmi",
    "nvidia_smi": "found on PATH, else /usr/bin/nvidia-smi",
    "repair.bug_report": "found on PATH, else /usr/bin/nvidia-bug-report.sh",
    "repair.systemd_run": "found on PATH, else /usr/bin/systemd-run; absent: a detached process",
    **FABRIC_UNSET_MEANS,
    **SUSPECTS_UNSET_MEANS,
}


def config_value(config: Config, key: str) -> Any:
    """The value of a dotted key, e.g. config_value(c, "thresholds.retired_pages")."""
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def describe_schema() -> List[Tuple[str, str, str]]:
    """(key, type, default) for every key, for docs and --help."""
    rows: List[Tuple[str, str, str]] = []
    for name in Config._fields:
        if name in ("source", "warnings"):
            continue
        if name in _SECTIONS:
            section = _SECTIONS[name]
            for sub in section._fields:
                rows.append((f"{name}.{sub}", _type_name(_annotation(section, sub)),
                             repr(section._field_defaults[sub])))
        else:
            rows.append((name, _type_name(_annotation(Config, name)),
                         repr(Config._field_defaults[name])))
    return rows
