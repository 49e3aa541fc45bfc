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
every graded error as "Fail" (HelperDisplayDiagResult without DDR_DISPLAY_WARN), a warn or a
configuration finding too, so a "Fail" is read by the `error_severity` DCGM gives each of its
warnings (dcgmErrorSeverity_t, dcgmlib/dcgm_errors.h; each error code's severity is in
dcgmlib/src/dcgm_errors.c), the gravest deciding (SEVERITY_STATUS):

    0 NONE, 1 MONITOR ("can perform workload, but needs to be monitored")  -> warn
    2 ISOLATE ("cannot perform workload"), 4 TRIAGE, 6 RESET ("drain and reset")  -> fail
    5 CONFIG ("can be resolved by configuration": persistence mode off, ECC off, ...) -> config
    3 UNKNOWN (DCGM's own "error code not recognized")  -> ungraded
    a warning without a severity (DCGM before 4.x, or a field missing)  -> fail, as always

DCGM_FR_INTERNAL (44, "There was an internal error during the test: ..."; TRIAGE) is DCGM's own
failure (its helper missing, its child's output unreadable): the test did not run, so it is
"internal", whatever the severity.  The test_summary carries the test's own status and the
errors no entity carries: it becomes a result of the node where no entity shows that verdict.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..deepmodel import DcgmEntity, DcgmResult

STATUS = {"pass": "pass", "warn": "warn", "warning": "warn", "fail": "fail", "skip": "skip",
          "not run": "skip"}
# dcgmErrorSeverity_t -> our reading of a "Fail" DCGM graded so (docs/failures.md, "DCGM's
# error severities"): only the severities that say the GPU cannot do its work fail it
SEVERITY_STATUS = {0: "warn", 1: "warn", 2: "fail", 3: "ungraded", 4: "fail", 5: "config", 6: "fail"}
# the gravest of a test's warnings decides: a fail wins over a config finding beside it
STATUS_RANK = {"warn": 0, "config": 1, "internal": 2, "ungraded": 3, "fail": 4}
ERROR_INTERNAL = 44  # dcgmError_t DCGM_FR_INTERNAL
INTERNAL_TEXT = "There was an internal error during the test"  # DCGM_FR_INTERNAL_MSG's words


def is_internal(text: str) -> bool:
    """Whether a DCGM warning is DCGM_FR_INTERNAL's: DCGM failed, not the GPU (the text and
    JSON readers both ask it)."""
    return text.strip().startswith(INTERNAL_TEXT)


def internal_only(texts: List[str]) -> bool:
    """Every one of a failed test's warnings is DCGM's own internal error (and there is one)."""
    return bool(texts) and all(is_internal(t) for t in texts)


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
        # the summary repeats every entity's errors (HelperJsonAddTestSummary): only its own,
        # or a verdict no entity shows, are the node's
        carried = {str(w.get("warning")) for r in test.get("results") or () if isinstance(r, dict)
                   for w in r.get("warnings") or () if isinstance(w, dict)}
        listed = [w for w in summary.get("warnings") or () if isinstance(w, dict)]
        own = [w for w in listed if str(w.get("warning")) not in carried]
        status, words = _status(name, {**summary, "warnings": own})
        quiet = all(r.status in ("pass", "skip") for r in out)
        if not out or (status not in ("pass", "skip") and (own or (not listed and quiet))):
            out.append(DcgmResult(None, name, status, words))
    return out


def _status(test: str, result: dict) -> Tuple[str, str]:
    raw = str(result.get("status", "")).strip().lower()
    status = STATUS.get(raw)
    if status is None:
        raise ValueError(f"test {test!r}: status {result.get('status')!r}")
    warnings = [w for w in result.get("warnings") or () if isinstance(w, dict)]
    if status == "fail" and warnings:
        status = max((_graded(w) for w in warnings), key=STATUS_RANK.__getitem__)
    words = "; ".join(_warning(w) for w in warnings) or "; ".join(str(i) for i in result.get("info") or ())
    return status, words


def _graded(warning: dict) -> str:
    """What one warning of a "Fail" makes of it: by DCGM's error code where it is DCGM's own
    internal error, else by DCGM's severity; "fail" where DCGM gives no severity we know."""
    code, severity = warning.get("error_id"), warning.get("error_severity")
    if code == ERROR_INTERNAL or is_internal(str(warning.get("warning", ""))):
        return "internal"
    if isinstance(severity, bool) or not isinstance(severity, int):
        return "fail"
    return SEVERITY_STATUS.get(severity, "fail")


def _warning(warning: dict) -> str:
    text = str(warning.get("warning", "")).strip()
    code = warning.get("error_id")
    return f"{text} (DCGM error {code})" if isinstance(code, int) and code else text
