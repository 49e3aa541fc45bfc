"""`dcgmi diag -j` of DCGM 4.x, read into the same results as 3.x (read/dcgm.py calls it when
the document's root is "DCGM Diagnostic").

The layout is DCGM's own (dcgmi/Diag.cpp HelperJsonBuildOutput, NVIDIA/DCGM v4.0 through v4.6.0;
schema testing/python3/dcgm_diag_schema.json, copied into tests/fixtures/dcgm/):

    {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
         {"name": "memory",
          "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 3,
                       "status": "Fail", "warnings": [{"warning": "...", "error_id": 95,
                       "error_category": 10, "error_severity": 6}], "info": ["..."]}],
          "test_summary": {"status": "Fail", "warnings": [...], "info": [...]}}]}],
                         "runtime_error": "..."},
     "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                        "entities": [{"entity_id": 3, "serial_num": "1652...", "device_id": "2330"}]}],
     "metadata": {"version": "4.2.3", "Driver Version Detected": "570.148.08"}}

The ids are DCGM's: read/dcgmmap.py maps them to NVML's indices by serial number.  dcgmi writes
an entity's warn as "Fail" (HelperDisplayDiagResult without DDR_DISPLAY_WARN), so a "Fail" whose
every warning DCGM grades DCGM_ERROR_MONITOR ("can perform workload, but needs to be monitored",
dcgmlib/dcgm_errors.h) is read as a warn; any other severity, or none, stays a fail.  The
test_summary carries the test's own status and the errors no entity carries: it becomes a
result of the node where no entity shows that fail or warn.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..deepmodel import DcgmEntity, DcgmResult

STATUS = {"pass": "pass", "warn": "warn", "warning": "warn", "fail": "fail", "skip": "skip",
          "not run": "skip"}
ERROR_MONITOR = 1  # dcgmErrorSeverity_t DCGM_ERROR_MONITOR


def parse_v4(doc: Any) -> Tuple[Tuple[DcgmResult, ...], Tuple[DcgmEntity, ...], Optional[str]]:
    """(results, entities, None), or ((), entities, why) for a document we cannot judge.  Raises
    ValueError/KeyError/TypeError on a document of the wrong shape (the caller words it)."""
    root = doc["DCGM Diagnostic"]
    entities = _entities(doc.get("entity_groups") or ())
    if root.get("runtime_error"):
        return (), entities, f"DCGM diagnostic did not run: {root['runtime_error']}"
    results: List[DcgmResult] = []
    for category in root.get("test_categories") or ():
        for test in category.get("tests") or ():
            if isinstance(test, dict):
                results.extend(_test(test))
    if not results:
        return (), entities, "dcgmi diag -j reported no test results"
    return tuple(results), entities, None


def _entities(groups: Any) -> Tuple[DcgmEntity, ...]:
    out: List[DcgmEntity] = []
    for group in groups:
        name = str(group.get("entity_group", ""))
        for entity in group.get("entities") or ():
            serial = entity.get("serial_num")
            out.append(DcgmEntity(name, int(entity["entity_id"]), str(serial) if serial else None,
                                  str(entity["device_id"]) if entity.get("device_id") else None))
    return tuple(out)


def _test(test: dict) -> List[DcgmResult]:
    name = str(test.get("name", "?"))
    out: List[DcgmResult] = []
    for result in test.get("results") or ():
        if not isinstance(result, dict):
            continue
        status, words = _status(name, result)
        group = str(result.get("entity_group", ""))
        if "entity_id" not in result:
            out.append(DcgmResult(None, name, status, words))
            continue
        entity = f"{group}{int(result['entity_id'])}"
        if group == "GPU":
            out.append(DcgmResult(int(result["entity_id"]), name, status, words, entity))
        else:
            out.append(DcgmResult(None, f"{name} ({entity})", status, words, entity))
    summary = test.get("test_summary")
    if isinstance(summary, dict) and "status" in summary:
        status, words = _status(name, summary)
        shown = {r.status for r in out}
        if not out or (status in ("fail", "warn") and status not in shown and "fail" not in shown):
            out.append(DcgmResult(None, name, status, words))
    return out


def _status(test: str, result: dict) -> Tuple[str, str]:
    raw = str(result.get("status", "")).strip().lower()
    status = STATUS.get(raw)
    if status is None:
        raise ValueError(f"test {test!r}: status {result.get('status')!r}")
    warnings = [w for w in result.get("warnings") or () if isinstance(w, dict)]
    if status == "fail" and warnings and all(w.get("error_severity") == ERROR_MONITOR for w in warnings):
        status = "warn"
    words = "; ".join(_warning(w) for w in warnings) or "; ".join(str(i) for i in result.get("info") or ())
    return status, words


def _warning(warning: dict) -> str:
    text = str(warning.get("warning", "")).strip()
    code = warning.get("error_id")
    return f"{text} (DCGM error {code})" if isinstance(code, int) and code else text
