"""Configuration: one TOML file, validated at load time against the schema (configschema.py).

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

A missing key takes its default; an unknown key, a wrong type, a value out of its key's bounds or
an unreadable file raises ConfigError naming the file and the dotted key.  Every key's type,
default, bounds and meaning are one entry of configschema.KEYS, keyed by its full dotted path.
The config names checks and thresholds, never code.
"""

from __future__ import annotations

import math
import os
import stat
from typing import Any, Collection, Dict, FrozenSet, List, Mapping, Optional, Tuple

from .configschema import ALIASES, DEFAULTS as _D, KEYS, SECTIONS, Key
from .configschema import MAX_GPU_MIB, PROBE_LEVELS  # noqa: F401  (re-exported)
from .configsections import (DEEP_FLOOR_METRICS, INTERNODE_COLLECTIVES, PORT_NAME_CHARS,  # noqa: F401  (re-exported)
                             SHAPES, ChecksConfig, ConfigError, DcgmConfig, DeepConfig, DrainConfig,
                             InternodeConfig, NetworkConfig, ProbeConfig, RepairConfig, SuspectsConfig, Thresholds,
                             count_or_share, floor_entry, port_list)
from .records import NamedTuple

DEFAULT_CONFIG_PATH = "/etc/gpu-healthcheck/config.toml"
CONFIG_ENV = "GPU_HEALTHCHECK_CONFIG"


class Config(NamedTuple):
    """The whole config; each key's meaning is its configschema.KEYS entry."""

    state_dir: str = _D["state_dir"]
    kernel_log: str = _D["kernel_log"]
    kernel_log_marker: bool = _D["kernel_log_marker"]
    scontrol: Optional[str] = _D["scontrol"]
    scontrol_timeout_s: float = _D["scontrol_timeout_s"]
    sysfs_root: str = _D["sysfs_root"]
    proc_root: str = _D["proc_root"]
    node_name: Optional[str] = _D["node_name"]
    gres_conf: Optional[str] = _D["gres_conf"]
    expected_gpus: Optional[int] = _D["expected_gpus"]
    expected_nvlinks: Optional[int] = _D["expected_nvlinks"]
    nvml_timeout_s: float = _D["nvml_timeout_s"]
    expect_ecc: Optional[bool] = _D["expect_ecc"]
    exclude_gpus: Tuple[str, ...] = _D["exclude_gpus"]
    dcgmi: Optional[str] = _D["dcgmi"]
    nvidia_smi: Optional[str] = _D["nvidia_smi"]
    nvidia_smi_timeout_s: float = _D["nvidia_smi_timeout_s"]
    act_budget_s: float = _D["act_budget_s"]
    boot_grace_s: float = _D["boot_grace_s"]
    xid_window_s: float = _D["xid_window_s"]
    xid_escalate_after: int = _D["xid_escalate_after"]
    job_levels: Tuple[str, ...] = _D["job_levels"]
    history_file: Optional[str] = _D["history_file"]
    history_max_bytes: int = _D["history_max_bytes"]
    metrics_file: Optional[str] = _D["metrics_file"]
    hpc_job_mapping_dir: Optional[str] = _D["hpc_job_mapping_dir"]
    journal: bool = _D["journal"]
    drain: DrainConfig = DrainConfig()
    probe: ProbeConfig = ProbeConfig()
    deep: DeepConfig = DeepConfig()
    dcgm: DcgmConfig = DcgmConfig()
    repair: RepairConfig = RepairConfig()
    checks: ChecksConfig = ChecksConfig()
    thresholds: Thresholds = Thresholds()
    network: NetworkConfig = NetworkConfig()
    internode: InternodeConfig = InternodeConfig()
    suspects: SuspectsConfig = SuspectsConfig()
    source: Optional[str] = None  # the file this came from, for messages
    # "PATH: fabric.partners is deprecated, read as internode.partners: ...": each key the file
    # set by a name it had before (configschema.ALIASES), for stderr and --check-config's warnings
    deprecated: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()  # problems found while loading that did not stop us
    # "PATH: world-writable": the file was refused (unsafe_ownership); the built-in defaults
    # stand in, with report_only set, and no mode acts (refusal_line says so on stdout)
    refused: Optional[str] = None

    def history_path(self) -> str:
        return self.history_file or os.path.join(self.state_dir, "history.jsonl")

    def enabled(self, check_id: str) -> bool:
        return check_id not in self.checks.disabled


# The record each [section] is read into.
_RECORDS: Dict[str, Any] = {"drain": DrainConfig, "probe": ProbeConfig, "deep": DeepConfig,
                            "dcgm": DcgmConfig, "repair": RepairConfig, "checks": ChecksConfig,
                            "thresholds": Thresholds, "network": NetworkConfig, "internode": InternodeConfig,
                            "suspects": SuspectsConfig}
_TYPE_NAMES = {"bool": "bool", "int": "int", "float": "float", "str": "str", "path": "str",
               "list": "list of strings", "ports": "a count or a list of hca:port names",
               "nodes": 'a count of nodes or a share of the cluster (0.05 or "5%")'}


def type_name(key: Key) -> str:
    """What a key takes, as errors and the docs say it."""
    if key.type == "choice":
        return "one of " + ", ".join(key.choices)
    return _TYPE_NAMES[key.type]


def bound_text(key: Key) -> str:
    """The key's bounds as an error says them: "between 0.1 and 3600 (seconds)", ">= 0", ""."""
    if key.low is None:
        return ""
    if key.high is None:
        return f">= {key.low:g}"
    why = "; ".join(part for part in (key.unit, key.why) if part)
    return f"between {key.low:g} and {key.high:g}" + (f" ({why})" if why else "")


def _typed(key: Key, value: Any) -> Tuple[bool, Any]:
    """Whether the value has the key's type, and the value as the record holds it."""
    kind = key.type
    if kind == "bool":
        return isinstance(value, bool), value
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool), value
    if kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if kind in ("str", "path"):
        return isinstance(value, str) and value != "" and "\0" not in value, value
    if kind == "list":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    raise AssertionError(f"unhandled type {kind}")  # pragma: no cover - a schema bug


def check_value(path: str, dotted: str, key: Key, value: Any) -> Any:
    """One TOML value checked against its schema entry; ints are accepted for floats.

    Raises:
        ConfigError: naming the file, the dotted key, the value and what it should be.
    """
    if key.type == "choice":
        if isinstance(value, bool):  # enabled = true, as TOML writes it, means the word
            value = "true" if value else "false"
        if value not in key.choices:
            raise ConfigError(path, dotted, f"expected {type_name(key)}, got {value!r}")
        return value
    if key.type == "ports":
        return port_list(path, dotted, value, type_name(key))
    if key.type == "nodes":
        counted, problem = count_or_share(value)
        if counted is None:
            raise ConfigError(path, dotted, problem)
        return counted
    if key.shape and isinstance(value, list):
        shape_problem = SHAPES[key.shape](value)
        if shape_problem:
            raise ConfigError(path, dotted, shape_problem)
    ok, value = _typed(key, value)
    if not ok:
        raise ConfigError(path, dotted, f"expected {type_name(key)}, got {value!r}")
    if key.type == "list" and key.choices:
        wrong = [v for v in value if v not in key.choices]
        if wrong:
            raise ConfigError(path, dotted, f"unknown value(s) {', '.join(map(repr, wrong))} "
                                            f"(known: {', '.join(key.choices)})")
    if isinstance(value, float) and not math.isfinite(value):
        # TOML has nan and inf; a NaN deadline makes every comparison false (every GPU "lost")
        raise ConfigError(path, dotted, f"must be a finite number, got {value!r}")
    if key.low is not None and not key.low <= value <= (math.inf if key.high is None else key.high):
        raise ConfigError(path, dotted, f"must be {bound_text(key)}, got {value!r}")
    if key.type == "path" and not os.path.isabs(value):
        # a relative state_dir would follow whatever directory slurmd starts us in
        raise ConfigError(path, dotted, f"must be an absolute path, got {value!r}")
    return value


def _known(section: str) -> List[str]:
    """The names a table may hold: its keys, and at the top level the sections too."""
    names = [p.rpartition(".")[2] for p in KEYS if p.rpartition(".")[0] == section]
    return names + ([s for s in SECTIONS if s] if not section else [])


def _build(path: str, table: Mapping[str, Any], section: str, errors: Optional[List[ConfigError]],
           aliases: Mapping[str, str], deprecated: List[str], shown: str = "") -> Dict[str, Any]:
    """The values of one table (the top level, or a [section]) by field name.

    errors: where each wrong key's ConfigError goes, the key left at its default, so one pass
    finds every error; None: raise the first.  aliases: old dotted names (a section or a key)
    read as the names they were given since (configschema.ALIASES).  deprecated: where a line
    naming the file, the old name and the new goes for each key set by an old name.  shown: the
    table's name as the file spells it, for errors.
    """
    values: Dict[str, Any] = {}
    written: Dict[str, str] = {}  # field name -> the dotted name the file gave it
    prefix = section + "." if section else ""
    for spelled, value in table.items():
        dotted_as_written = (shown or section) + "." + spelled if section else spelled
        dotted = aliases.get(prefix + spelled, prefix + spelled)
        name = dotted.rpartition(".")[2]
        try:
            if name in written:  # the old name and the new: which one is meant?
                raise ConfigError(path, dotted_as_written, f"set twice, here and as {written[name]} "
                                                           f"(one is the old name of the other)")
            written[name] = dotted_as_written
            if not section and name in SECTIONS:
                if not isinstance(value, dict):
                    raise ConfigError(path, dotted_as_written, f"expected a [{spelled}] table, got {value!r}")
                if spelled != name and not value:  # an empty old section: no key to name
                    deprecated.append(deprecation_line(path, f"[{spelled}]", f"[{name}]"))
                values[name] = _RECORDS[name](**_build(path, value, name, errors, aliases, deprecated, spelled))
            elif dotted in KEYS:
                values[name] = check_value(path, dotted_as_written, KEYS[dotted], value)
                if dotted_as_written != dotted:
                    deprecated.append(deprecation_line(path, dotted_as_written, dotted))
            else:
                raise ConfigError(path, dotted_as_written,
                                  f"unknown key (known: {', '.join(sorted(_known(section)))})")
        except ConfigError as exc:
            if errors is None:
                raise
            errors.append(exc)
    return values


def deprecation_line(path: str, old: str, new: str) -> str:
    """What a file that still uses an old name is told (stderr, --check-config's warnings)."""
    return f"{path}: {old} is deprecated, read as {new}: rename it (docs/configuration.md#old-names)"


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


def keys_set(text: str, path: str = "<config>", aliases: Mapping[str, str] = ALIASES) -> FrozenSet[str]:
    """The dotted keys a config text sets, e.g. {"state_dir", "thresholds.retired_pages"}, by
    their names now (an old name, aliases, counts as the key it names)."""
    keys: set = set()
    for key, value in _load_toml(text, path).items():
        key = aliases.get(key, key)
        if key in SECTIONS and isinstance(value, dict):
            keys.update(aliases.get(f"{key}.{sub}", f"{key}.{sub}") for sub in value)
        else:
            keys.add(key)
    return frozenset(keys)


def parse_config(text: str, path: str = "<config>",
                 known_checks: Optional[Collection[str]] = None,
                 errors: Optional[List[ConfigError]] = None,
                 aliases: Mapping[str, str] = ALIASES) -> Config:
    """Parse TOML text into a Config (pure: no file access).

    `known_checks`: the check ids `[checks] disabled` may name (the registry's catalogue,
    checks.CATALOGUE, which every caller that runs or lists checks passes).  The config imports
    no check: it is a leaf every module may use.  None leaves the ids to the caller (the crash
    logger, which needs only the paths).  `errors`: collect every ConfigError there (each
    wrong key keeps its default; --check-config) instead of raising the first.  `aliases`: the
    old names still read (configschema.ALIASES).
    """
    deprecated: List[str] = []
    config = Config(**_build(path, _load_toml(text, path), "", errors, aliases, deprecated),
                    deprecated=tuple(deprecated))
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


def refusal_line(refused: str) -> str:
    """What a run on a refused config says on stdout (and --check-config on stderr)."""
    return (f"gpu-healthcheck: CONFIG REFUSED: {refused}: a root process takes no orders from a file "
            f"another user can change; nothing was acted on (no drain, resume, reset, reboot or RMA). "
            f"Make it owned by root, not world-writable, and group-writable only by group root "
            f"(chown root:root; chmod 0644, 0640 or 0600)")


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
    then run with the built-in defaults under `report_only` (a refused config never leads to
    a drain, resume, reset, reboot or RMA, whatever the defaults say), the refusal is carried
    in Config.refused and in Config.warnings for a critical log.

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
        return Config(source=path, refused=f"{path}: {problem}", drain=DrainConfig(report_only=True),
                      warnings=(f"{path}: refused: {problem}; running the checks with built-in defaults "
                                f"and acting on nothing",))
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
UNSET_MEANS = {path: key.unset for path, key in KEYS.items() if key.unset}


def config_value(config: Config, key: str) -> Any:
    """The value of a dotted key, e.g. config_value(c, "thresholds.retired_pages")."""
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def describe_schema() -> List[Tuple[str, str, str]]:
    """(key, type, default) for every key, in the schema's order (--check-config's)."""
    return [(path, type_name(key), repr(key.default)) for path, key in KEYS.items()]
