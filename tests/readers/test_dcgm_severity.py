"""DCGM's verdicts read as DCGM means them (issue 36, cases 7, 8 and 11): every error severity of
dcgm_errors.h, DCGM's own internal error, and a run that skipped every test.

Built on real outputs (tests/fixtures/dcgm/SOURCES.md): a DCGM 4.2.3 `dcgmi diag -r 1 -j` of a
GB10 whose `software` test fails only for persistence mode (`error_severity` 5, `error_id` 29),
and a DCGM 4.4.1 `dcgmi diag -r 2` table of 8 B200 whose `pcie` test fails only for "There was
an internal error during the test" (DCGM-253).  The severities and codes are DCGM 4.6.0's
(dcgmlib/dcgm_errors.h, dcgmlib/src/dcgm_errors.c)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from healthcheck.model import GpuSnapshot, NodeSnapshot
from healthcheck.read.dcgm import read_diag

from .test_dcgm4 import (ROW_REMAP_FAILURE, VALIDATOR, document, failing_on, fake_dcgmi, findings,
                         node_of, real_test)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
GB10 = FIX / "glimmer-burnin__dcgmi-diag-r1-j-4.2.3-GB10__persistence-mode-severity-5.json"
B200 = FIX / "issue-DCGM-253__dcgmi-diag-r2-4.4.1-8xB200-pcie-internal-error.txt"
# DCGM_FR_PERSISTENCE_MODE (29): DCGM_ERROR_CONFIG, DCGM_FR_EC_SOFTWARE_OTHER, in DCGM's words
PERSISTENCE = {"warning": "Persistence Mode: Persistence mode for GPU 3 is disabled. Enable persistence "
                          "mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as root.",
               "error_id": 29, "error_category": 8, "error_severity": 5}
# DCGM_FR_INTERNAL (44): DCGM_ERROR_TRIAGE, DCGM_FR_EC_INTERNAL_OTHER (DCGM-254's words)
INTERNAL = {"warning": "There was an internal error during the test: 'A child process (2378806) exited "
                       "with non-zero status 1'", "error_id": 44, "error_category": 16, "error_severity": 4}


def gb10_node() -> NodeSnapshot:
    return NodeSnapshot(host="spark", gpus=(GpuSnapshot(0, uuid="GPU-0", name="NVIDIA GB10"),))


def test_dcgm_config_severity_the_real_gb10_persistence_warning_warns_and_never_drains():
    text = GB10.read_text()
    VALIDATOR.validate(json.loads(text))
    found = findings(text, gb10_node())
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(0, "warn", "none")]
    assert not found[0].drains
    assert "configuration finding" in found[0].message
    assert 'Persistence mode for GPU 0 is disabled. Enable persistence mode by running' in found[0].message


@pytest.mark.parametrize("severity,expected", [
    (0, ("warn", "none")),      # NONE
    (1, ("warn", "none")),      # MONITOR: can perform the workload, watch it
    (2, ("fail", "reset")),     # ISOLATE: cannot perform the workload
    (3, ("unknown", "none")),   # UNKNOWN: DCGM's own "error code not recognized"
    (4, ("fail", "reset")),     # TRIAGE (DCGM's next step: reset the GPU, rerun)
    (5, ("warn", "none")),      # CONFIG: resolved by configuration
    (6, ("fail", "reset")),     # RESET: drain and reset
])
def test_dcgm_every_error_severity_of_dcgm_errors_h_is_read_as_dcgm_defines_it(severity, expected):
    # DCGM 4's schema requires a severity; 3.x gives none and its fail stays a fail
    # (test_dcgm_bridge.py::test_dcgm_diag_fail_and_warn_become_findings_with_gpu_test_and_dcgms_text)
    warning = dict(ROW_REMAP_FAILURE, error_severity=severity)
    found = findings(document(failing_on(real_test(), 3, warning)), node_of())
    assert [(f.severity.value, f.action.value) for f in found] == [expected]
    assert found[0].drains is (expected[0] == "fail")


def test_dcgm_config_severity_beside_a_hardware_error_still_fails_the_gpu():
    test = failing_on(real_test(), 3, PERSISTENCE)
    test["results"][3]["warnings"].append(ROW_REMAP_FAILURE)
    found = findings(document(test), node_of())
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(3, "fail", "reset")]


def test_dcgm_internal_error_the_real_b200_table_is_unknown_never_a_drain():
    found = findings(B200.read_text(), node_of())
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(None, "unknown", "none")]
    assert "pcie did not run: DCGM's own internal error" in found[0].message
    assert "There was an internal error during the test: 'Output of child process (11167)" in found[0].message


def test_dcgm_internal_error_in_4x_json_is_unknown_for_that_test_only():
    test = failing_on(real_test(), 5, INTERNAL)
    found = findings(document(test), node_of())
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(None, "unknown", "none")]
    assert "GPU 5" in found[0].message and "child process (2378806)" in found[0].message
    # an internal error beside a real failure does not hide it
    test["results"][5]["warnings"].append(ROW_REMAP_FAILURE)
    found = findings(document(test), node_of())
    assert [(f.gpu, f.severity.value) for f in found] == [(5, "fail")]


def test_dcgm_internal_error_in_3x_json_is_unknown():
    doc = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Integration", "tests": [
        {"name": "PCIe", "results": [{"gpu_ids": "0,1", "status": "Fail", "warnings": [
            {"warning": INTERNAL["warning"], "error_id": 44}]}]}]}]}}
    found = findings(json.dumps(doc), node_of(gpus=2))
    assert [(f.severity.value, f.drains) for f in found] == [("unknown", False), ("unknown", False)]


def test_dcgm_a_run_that_skipped_every_test_says_so():
    test = real_test()
    for result in test["results"]:
        result["status"] = "Skip"
    skipped = copy.deepcopy(test)
    skipped["name"] = "memory"
    doc = json.loads(document(test))
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"].append(skipped)
    found = findings(json.dumps(doc), node_of())
    assert [(f.severity.value, f.drains) for f in found] == [("unknown", False)]
    assert "2 of 2 DCGM tests skipped: diagnostic, memory" in found[0].message
    # one of two skipped is said, and judges nothing
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0] = real_test()
    found = findings(json.dumps(doc), node_of())
    assert [(f.severity.value, f.message) for f in found] == [("info", "1 of 2 DCGM tests skipped: memory")]


def test_dcgm_config_severity_on_the_fake_node_exits_warn_and_drains_nothing(node, tmp_path):
    dcgmi = fake_dcgmi(tmp_path, GB10.read_text())
    node.write_config(f'dcgmi = "{dcgmi}"\n[dcgm]\nenabled = "true"\n[deep]\nenabled = false\n')
    result = node.run("--node", "--level", "deep", "--json", "--act", scenario="gpus = 1\n")
    dcgm = [f for f in result.json["findings"] if f["check"] == "dcgm.diag"]
    assert [(f["gpu"], f["severity"], f["action"]) for f in dcgm] == [(0, "warn", "none")], result.stdout
    assert result.json["action"]["taken"] != "drain"
    assert result.rc != 2
    assert read_diag(GB10.read_text())[0][0].status == "config"
