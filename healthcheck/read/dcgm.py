"""The DCGM door: `dcgmi diag -r N -j` (--level deep) and `dcgmi health -c -j` (--node), with
deadlines.  A dcgmi that is missing, hangs, fails or prints what we cannot read gives an error
string (the checks make it unknown), never a finding that drains.

    read = read_dcgm(config, diag=True)   # -> deepmodel.DcgmRead, or None (not enabled / absent)

Formats (tests/fixtures/dcgm/, real outputs): the text table of `diag` without -j (2.x/3.x/4.x,
read/dcgmtext.py); 4.x `diag -j` is {"DCGM Diagnostic": ...} with entity ids and serials
(read/dcgm4.py); 3.x `diag -j` is {"DCGM GPU Diagnostic":
{"test_categories": [{"category", "tests": [{"name", "results": [{"gpu_ids" | "gpu_id",
"status", "info" | "warnings"}]}]}]}}; DCGM 3.1 writes null entries between tests and may print a
warning line before the JSON.  `health -c -j` is {"body": {"Overall Health": {"value"},
"GPU": {"children": {"3": {"value", "children": {"Errors": {"children": {"Memory": {"value",
"overflow": [message rows]}}}}}}}}, "header": [...]} (dcgmi/Health.cpp HandleOneEntity through
DcgmiOutputJson): one entry per entity group, entity and system where the watch found any.
DCGM's ids become NVML's indices in read/dcgmmap.py.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, List, Optional, Tuple

from ..config import Config
from ..deepmodel import DcgmEntity, DcgmRead, DcgmResult
from ..outside import run_bounded
from .dcgm4 import internal_only

STATUS = {"pass": "pass", "warn": "warn", "warning": "warn", "fail": "fail", "skip": "skip"}
MAX_OUTPUT = 4 << 20
# dcgmi's own SIGTERM handler stops the diagnostic and its nvvs children; give it this long
TERM_GRACE_S = 10.0


def dcgmi_path(config: Config) -> Optional[str]:
    if config.dcgmi:
        return config.dcgmi if os.access(config.dcgmi, os.X_OK) else None
    return shutil.which("dcgmi") or (os.access("/usr/bin/dcgmi", os.X_OK) and "/usr/bin/dcgmi") or None


def read_dcgm(config: Config, diag: bool) -> Optional[DcgmRead]:
    """None where DCGM is not to be asked (enabled = false, or auto without dcgmi)."""
    setting = config.dcgm.enabled
    path = dcgmi_path(config) if setting != "false" else None
    if path is None:
        if setting == "true":
            missing = f"dcgmi not found ({config.dcgmi or 'PATH, /usr/bin/dcgmi'}); [dcgm] enabled = true"
            return DcgmRead(diag_error=missing if diag else None, health_error=missing)
        return None
    read = DcgmRead()
    if diag:
        out, error = run_dcgmi([path, "diag", "-r", str(config.dcgm.level), "-j"], config.dcgm.timeout_s)
        results, entities, why = read_diag(out) if error is None else ((), (), error)
        read = read._replace(diag=results, diag_error=why, diag_ran=True, entities=entities)
    out, error = run_dcgmi([path, "health", "-c", "-j"], config.dcgm.health_timeout_s)
    health, why = parse_health(out) if error is None else ((), error)
    read = read._replace(health=health, health_error=why, health_ran=True)
    return with_addresses(read, path, config.dcgm.health_timeout_s)


def with_addresses(read: DcgmRead, path: str, timeout_s: float) -> DcgmRead:
    """Where a warn or fail is on a DCGM GPU no serial identifies, each DCGM GPU's UUID and PCI
    address from `dcgmi discovery -l` (read/dcgmmap.py maps by them).  A discovery that fails
    leaves DCGM's ids as they are: read/dcgmmap.py then takes them as NVML's indices."""
    from .dcgmmap import needs_discovery, parse_discovery, with_discovery

    if not needs_discovery(read):
        return read
    out, error = run_dcgmi([path, "discovery", "-l"], timeout_s)
    found = parse_discovery(out) if error is None else ()
    return read._replace(entities=with_discovery(read.entities, found)) if found else read


def run_dcgmi(argv: List[str], timeout_s: float) -> Tuple[str, Optional[str]]:
    """(stdout, None), or ("", why): dcgmi exits non-zero when a test fails, so only output
    that does not parse is an error, not the exit status alone.  Past its deadline dcgmi gets
    SIGTERM, on which it stops the nvvs processes running the tests on the GPUs (a SIGKILL
    would leave them running), and SIGKILL only if it is still there after the grace period.
    Only the first MAX_OUTPUT bytes are kept (outside.run_bounded reads the rest and drops it)."""
    ran = run_bounded(argv, timeout_s, cap_bytes=MAX_OUTPUT, term_grace_s=TERM_GRACE_S)
    if ran.error:
        return "", ran.error
    text = ran.text()
    if not text.strip():
        err = ran.text("stderr")[:400].strip()
        return "", f"{' '.join(argv)} exited {ran.returncode} with no output" + (f": {err}" if err else "")
    return text, None


def _json_object(text: str) -> Any:
    """The JSON object in dcgmi's output: from the first "{" (3.1 may print a warning first)."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object")
    return json.loads(text[start:])


def parse_diag(text: str) -> Tuple[Tuple[DcgmResult, ...], Optional[str]]:
    """Each test's result per GPU (DCGM's ids), or why the output cannot be read."""
    results, _, why = read_diag(text)
    return results, why


def read_diag(text: str) -> Tuple[Tuple[DcgmResult, ...], Tuple[DcgmEntity, ...], Optional[str]]:
    """(results, DCGM 4.x's entities, why not judged).  Output that is no JSON document but holds
    dcgmi's text table (a dcgmi or wrapper that ignores -j) is read as the table
    (read/dcgmtext.py); one cut short keeps its results but is not judged."""
    form = diag_form(text)
    if form == "v4":
        from .dcgm4 import parse_v4

        try:
            return parse_v4(_json_object(text))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            return (), (), f"dcgmi diag -j output not understood: {exc}"
    if form == "table":
        from .dcgmtext import parse_diag_text

        results, why = parse_diag_text(text)
        return results, (), why
    results, why = _parse_v3(text)
    return results, (), why


def diag_form(text: str) -> str:
    """How read_diag reads the output: "v4" (DCGM 4.x's JSON tree), "table" (dcgmi's text
    table) or "v3" (the older JSON document, and anything else holding a "{")."""
    if '"DCGM Diagnostic"' in text:
        return "v4"
    if '"DCGM GPU Diagnostic"' not in text:
        from .dcgmtext import has_table

        if has_table(text) or "{" not in text:
            return "table"
    return "v3"


def _parse_v3(text: str) -> Tuple[Tuple[DcgmResult, ...], Optional[str]]:
    try:
        doc = _json_object(text)
        categories = doc["DCGM GPU Diagnostic"]["test_categories"]
        results: List[DcgmResult] = []
        for category in categories:
            for test in category.get("tests") or ():
                if not isinstance(test, dict):
                    continue  # DCGM 3.1's null entries
                name = str(test.get("name", "?"))
                for result in test.get("results") or ():
                    if not isinstance(result, dict):
                        continue
                    status = STATUS.get(str(result.get("status", "")).strip().lower())
                    if status is None:
                        raise ValueError(f"test {name!r}: status {result.get('status')!r}")
                    words = _words(result.get("warnings")) or _words(result.get("info"))
                    if status == "fail" and internal_only(_texts(result.get("warnings"))):
                        status = "internal"  # DCGM_FR_INTERNAL: DCGM failed; the test did not run
                    for gpu in _gpus(result):
                        results.append(DcgmResult(gpu, name, status, words))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        return (), f"dcgmi diag -j output not understood: {exc}"
    if not results:
        return (), "dcgmi diag -j reported no test results"
    return tuple(results), None


def _gpus(result: dict) -> List[Optional[int]]:
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None or ids == "":
        return [None]
    return [int(i) for i in str(ids).split(",") if i.strip()]


def _texts(value: Any) -> List[str]:
    """Each warning's text (3.x: a list of {"warning", "error_id"} or of strings)."""
    if isinstance(value, list):
        return [str(v.get("warning", v) if isinstance(v, dict) else v) for v in value]
    return [str(value.get("warning", "") if isinstance(value, dict) else value)] if value else []


def _words(value: Any) -> str:
    if isinstance(value, list):
        return "; ".join(_texts(value))
    if isinstance(value, dict):
        return str(value.get("warning", "") or value)
    return str(value or "")


def parse_health(text: str) -> Tuple[Tuple[DcgmResult, ...], Optional[str]]:
    """The health watch's verdict and incidents, each on its entity (DCGM's id).  "Healthy"
    gives one pass result."""
    try:
        doc = _json_object(text)
        body = doc["body"]
        overall = str(body["Overall Health"]["value"]).strip().lower()
        results = [DcgmResult(None, "Overall Health", _health_status(overall), str(body["Overall Health"]["value"]))]
        for key, value in body.items():
            if key == "Overall Health" or not isinstance(value, dict):
                continue
            results.extend(_health_group(str(key), value))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        return (), f"dcgmi health -c -j output not understood: {exc}"
    return tuple(results), None


def _health_group(key: str, value: dict) -> List[DcgmResult]:
    """One entity group's incidents: {"children": {"3": {"value", "children": {"Errors":
    {"children": {SYSTEM: {"value", "overflow": [...]}}}}}}} (DCGM 2.x-4.x); a key "GPU 3" (one
    entity) is read the same way."""
    out: List[DcgmResult] = []
    group, _, single = key.partition(" ")
    entities = {single: value} if single.isdigit() else (value.get("children") or {})
    for ident, entity in entities.items():
        if not isinstance(entity, dict):
            continue
        gpu = int(ident) if group == "GPU" and str(ident).isdigit() else None
        name = f"{group}{ident}"
        errors = (entity.get("children") or {}).get("Errors") or {}
        systems = errors.get("children") or {}
        for system, incident in systems.items():
            if not isinstance(incident, dict):
                continue
            status = _health_status(str(incident.get("value", "")).strip().lower())
            words = " ".join(str(row) for row in incident.get("overflow") or ()) or _words(incident.get("value"))
            test = str(system) if gpu is not None else f"{system} ({name})"
            out.append(DcgmResult(gpu, test, status, words, name))
        if not systems and "value" in entity:
            status = _health_status(str(entity["value"]).strip().lower())
            out.append(DcgmResult(gpu, "Overall Health" if gpu is not None else f"Overall Health ({name})",
                                  status, str(entity["value"]), name))
    return out


def _health_status(value: str) -> str:
    if value.startswith("healthy") or value == "pass":
        return "pass"
    if value.startswith("warn"):
        return "warn"
    return "fail"
