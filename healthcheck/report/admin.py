"""Read-only tools for an admin: `--list-checks` and `--check-config` (CONTRACTS §1).

    list_checks(as_json=False, out=sys.stdout) -> 0
    check_config("/etc/gpu-healthcheck/config.toml", os.environ, as_json=False,
                 out=sys.stdout, err=sys.stderr) -> 0 valid, 1 not

--list-checks prints the registry: each check's id (the name `[checks] disabled` takes), the
worst severity it reports and the action that calls for, the config key of its limit, and the
first sentence of its docstring.  --check-config validates the file the checker would read, as
root would read it (ownership included), and prints every key's effective value and where it
came from.  Neither touches NVML, Slurm or the state directory.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, TextIO, Tuple

from ..config import (CONFIG_ENV, Config, ConfigError, UNSET_MEANS,
                     config_path, config_value, describe_schema, keys_set, parse_config,
                     read_config_file, unsafe_ownership)
from ..decide.exitcodes import check_config_exit, done_exit


def catalogue_rows() -> List[Dict[str, Any]]:
    """One dict per registered check, in the order they run; the multi-node checks last."""
    from ..checks import CATALOGUE, INTERNODE

    return [{"check": spec.check_id, "scope": spec.scope, "severity": spec.severity.value,
             "action": spec.action.value, "threshold_key": spec.threshold_key,
             "summary": spec.summary} for spec in (*CATALOGUE.values(), *INTERNODE.values())]


def list_checks(as_json: bool, out: TextIO) -> int:
    rows = catalogue_rows()
    if as_json:
        json.dump({"schema": 1, "checks": rows}, out, indent=2)
        out.write("\n")
        return done_exit(True)
    table = [("CHECK", "SCOPE", "SEVERITY", "ACTION", "THRESHOLD KEY", "WHAT IT CATCHES")]
    table += [(r["check"], r["scope"], r["severity"], r["action"], r["threshold_key"] or "-",
               r["summary"]) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[5] + "\n")
    out.write("\nseverity/action: the worst the check reports and what that calls for; "
              "a gpu or node check id goes in [checks] disabled; the internode checks are the "
              "fabric sweep's and the gang check's.\n")
    return done_exit(True)


def _chosen_by(cli_path: Optional[str], environ: Mapping[str, str]) -> str:
    if cli_path:
        return "--config"
    if environ.get(CONFIG_ENV):
        return f"environment {CONFIG_ENV}"
    return "default path"


def _toml(value: Any) -> str:
    """A value as it would be written in the config file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def effective_values(config: Config, from_file: frozenset, source: Optional[str]
                     ) -> List[Tuple[str, Any, str]]:
    """(key, value, where it came from) for every key: the file's path, or "default"."""
    rows = []
    for key, _type, _default in describe_schema():
        origin = source if source and key in from_file else "default"
        rows.append((key, config_value(config, key), origin))
    return rows


def path_warnings(config: Config, environ: Mapping[str, str]) -> List[str]:
    """The paths a run reads that are not there (warnings: a node may lack them by design)."""
    from ..read.gres import gres_conf_path

    warnings = []
    for key, path, means in (
            ("kernel_log", config.kernel_log, "no Xid can be read: the Xid checks are unknown"),
            ("sysfs_root", config.sysfs_root, "GPUs that fell off the bus cannot be counted"),
            ("gres_conf", gres_conf_path(config.gres_conf, dict(environ)),
             "a job's gres indices cannot be mapped: unknown, never probed, never a drain; set "
             "the config key gres_conf to the gres.conf slurmd reads (config-less sites: "
             "slurmd's conf-cache copy, <SlurmdSpoolDir>/conf-cache/gres.conf, by default "
             "/var/spool/slurmd/conf-cache/gres.conf)")):
        if not os.path.exists(path):
            warnings.append(f"{key}: {path} does not exist: {means}")
    return warnings


def deep_floor_models(config: Config) -> Tuple[str, ...]:
    """The GPU models --level deep has a floor for: the published table and the site's own."""
    from ..checks.floors import models

    site = {entry.rpartition(":")[0].strip() for entry in config.deep.floors}
    return tuple(sorted(set(models()) | site))


def check_config(cli_path: Optional[str], environ: Mapping[str, str], as_json: bool,
                 out: TextIO, err: TextIO, gres: bool = False) -> int:
    """Validate the config the checker would read: every error in one pass (on err), then
    warnings for paths it reads that are missing; with `gres`, this node's gres map.  0 when
    valid, else the status --node has for the same file (CONFIG_ERROR)."""
    path, explicit = config_path(cli_path, environ)
    chosen_by = _chosen_by(cli_path, environ)
    errors: List[str] = []
    config = Config()
    from_file: frozenset = frozenset()
    source: Optional[str] = None
    try:
        found = read_config_file(path, explicit)
        if found is not None:
            st, text = found
            source = path
            # Judged as the root prolog would judge it, whoever runs this.
            problem = unsafe_ownership(st, running_as_root=True)
            if problem:
                errors.append(f"{path}: {problem}: gpu-healthcheck running as root refuses "
                              f"this file and runs with built-in defaults")
            from ..checks import CATALOGUE

            collected: List[ConfigError] = []
            config = parse_config(text, path, CATALOGUE, errors=collected)
            errors.extend(str(e) for e in collected)
            from_file = keys_set(text, path)
    except ConfigError as exc:
        errors.append(str(exc))
    warnings = list(config.deprecated) + path_warnings(config, environ)
    gres_doc = None
    if gres:
        from .gresmap import gres_map

        gres_doc = gres_map(config, environ)
    floors = deep_floor_models(config)
    if as_json:
        doc = {"file": path, "chosen_by": chosen_by, "exists": source is not None,
               "valid": not errors, "errors": errors, "warnings": warnings,
               "values": {k: {"value": list(v) if isinstance(v, tuple) else v, "source": o}
                          for k, v, o in effective_values(config, from_file, source)},
               "deep_floors": list(floors)}
        if gres_doc is not None:
            doc["gres"] = gres_doc
        json.dump(doc, out, indent=2)
        out.write("\n")
    else:
        state = ("invalid" if errors else "valid" if source
                 else "absent: every key takes its default")
        out.write(f"config file: {path} ({chosen_by}; {state})\n")
        if not errors:
            rows = [(k, _toml(v) if v is not None else f"(unset: {UNSET_MEANS.get(k, 'none')})", o)
                    for k, v, o in effective_values(config, from_file, source)]
            widths = [max(len(r[i]) for r in rows + [("KEY", "VALUE", "SOURCE")]) for i in range(2)]
            for k, v, o in [("KEY", "VALUE", "SOURCE")] + rows:
                out.write(f"{k.ljust(widths[0])}  {v.ljust(widths[1])}  {o}\n")
            out.write(f"--level deep floors ({len(floors)} models; any other model is judged "
                      f"against its siblings only): {', '.join(floors)}\n")
        if gres_doc is not None:
            from .gresmap import write_gres_map

            write_gres_map(gres_doc, out)
    for problem in errors:
        err.write(f"gpu-healthcheck: config error: {problem}\n")
    for warning in warnings:
        err.write(f"gpu-healthcheck: config warning: {warning}\n")
    return check_config_exit(not errors)
