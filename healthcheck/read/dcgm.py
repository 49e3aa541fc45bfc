"""The DCGM door: `dcgmi diag -r N -j` (--level deep) and `dcgmi health -c -j` (--node), with
deadlines.  A dcgmi that is missing, hangs, fails or prints what we cannot read gives an error
string (the checks make it unknown), never a finding that drains.

    read = read_dcgm(config, diag=True)   # -> deepmodel.DcgmRead, or None (not enabled / absent)

Formats (tests/fixtures/dcgm/, real outputs): the text table of `diag` without -j (2.x/3.x/4.x,
read/dcgmtext.py); `diag -j` is {"DCGM GPU Diagnostic":
{"test_categories": [{"category", "tests": [{"name", "results": [{"gpu_ids" | "gpu_id",
"status", "info" | "warnings"}]}]}]}}; DCGM 3.1 writes null entries between tests and may print a
warning line before the JSON.  `health -c -j` is {"body": {"Overall Health": {"value"}, ...},
"header": [...]}, with one entry per GPU and incident where the watch found any.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, List, Optional, Tuple

from ..config import Config
from ..deepmodel import DcgmRead, DcgmResult
from ..outside import run_bounded

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
        results, why = parse_diag(out) if error is None else ((), error)
        read = read._replace(diag=results, diag_error=why, diag_ran=True)
    out, error = run_dcgmi([path, "health", "-c", "-j"], config.dcgm.health_timeout_s)
    health, why = parse_health(out) if error is None else ((), error)
    return read._replace(health=health, health_error=why, health_ran=True)


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
    """Each test's result per GPU, or why the output cannot be read.  Output that is no JSON
    document but holds dcgmi's text table (a dcgmi or wrapper that ignores -j) is read as the
    table (read/dcgmtext.py); one cut short keeps its results but is not judged."""
    if '"DCGM GPU Diagnostic"' not in text:
        from .dcgmtext import has_table, parse_diag_text

        if has_table(text) or "{" not in text:
            return parse_diag_text(text)
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


def _words(value: Any) -> str:
    if isinstance(value, list):
        return "; ".join(str(v.get("warning", v) if isinstance(v, dict) else v) for v in value)
    if isinstance(value, dict):
        return str(value.get("warning", "") or value)
    return str(value or "")


def parse_health(text: str) -> Tuple[Tuple[DcgmResult, ...], Optional[str]]:
    """The health watch's verdict and incidents.  "Healthy" gives one pass result."""
    try:
        doc = _json_object(text)
        body = doc["body"]
        overall = str(body["Overall Health"]["value"]).strip().lower()
        results = [DcgmResult(None, "Overall Health", _health_status(overall), str(body["Overall Health"]["value"]))]
        for key, value in body.items():
            if key == "Overall Health" or not isinstance(value, dict):
                continue
            gpu = int(key.split()[-1]) if key.split()[-1].isdigit() else None
            for system, entry in (value.get("children") or value).items():
                if not isinstance(entry, dict) or "value" not in entry:
                    continue
                results.append(DcgmResult(gpu, str(system), _health_status(str(entry["value"]).lower()),
                                          _words(entry.get("children") or entry.get("value"))))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        return (), f"dcgmi health -c -j output not understood: {exc}"
    return tuple(results), None


def _health_status(value: str) -> str:
    if value.startswith("healthy") or value == "pass":
        return "pass"
    if value.startswith("warn"):
        return "warn"
    return "fail"
