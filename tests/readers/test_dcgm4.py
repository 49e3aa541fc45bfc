"""DCGM 4.x `dcgmi diag -j` (root "DCGM Diagnostic", entity ids, entity_groups with serials,
test_summary) and `dcgmi health -c -j` incidents, read into results on NVML's GPUs.

The 4.x document is the real one of DCGM-215 (an 8-GPU `diag -r 3`, DCGM 4: the `diagnostic`
test's object, verbatim in tests/fixtures/dcgm/) placed in DCGM's tree as dcgmi/Diag.cpp writes
it; every document a test builds is first checked against DCGM's own schema
(testing/python3/dcgm_diag_schema.json of DCGM 4.6.0, in tests/fixtures/dcgm/)."""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Dict, List, Optional

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config
from healthcheck.deepmodel import DcgmRead
from healthcheck.model import GpuSnapshot, Mode, NodeSnapshot
from healthcheck.read.dcgm import parse_health, read_diag
from healthcheck.read.dcgmmap import attribute

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
SCHEMA = json.loads((FIX / "NVIDIA-DCGM-4.6.0__dcgm_diag_schema.json").read_text())
# the schema names no draft ("http://json-schema.org/schema#"); draft 7 reads every keyword it uses
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
FRAGMENT = FIX / "issue-DCGM-215__dcgmi-diag-r3-4.x-json-8gpu__fragment.txt"
SERIALS = [f"165232104{i:04d}" for i in range(8)]
# DCGM_FR_ROW_REMAP_FAILURE (80): DCGM_ERROR_RESET, DCGM_FR_EC_HARDWARE_MEMORY (dcgmlib/dcgm_errors.h,
# dcgmlib/src/dcgm_errors.c of DCGM 4.6.0), in DCGM's own words for GPU 3
ROW_REMAP_FAILURE = {"warning": "GPU 3 had uncorrectable memory errors and row remapping failed.",
                     "error_id": 80, "error_category": 10, "error_severity": 6}


def real_test() -> Dict:
    """The `diagnostic` test of DCGM-215 (the fragment ends in the comma that followed it)."""
    return json.loads(FRAGMENT.read_text().rstrip().rstrip(","))


def document(test: Dict, serials: Optional[List[Optional[str]]] = None) -> str:
    """The test in DCGM 4.x's tree (HelperJsonBuildOutput: entity_groups, metadata, categories),
    validated against DCGM's schema before use."""
    ids = [r["entity_id"] for r in test["results"]]
    serials = serials if serials is not None else [SERIALS[i] if i < 8 else None for i in ids]
    entities = [{"entity_id": i, "device_id": "2330", **({"serial_num": s} if s else {})}
                for i, s in zip(ids, serials)]
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]},
           "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": entities}],
           "metadata": {"version": "4.2.3", "Driver Version Detected": "570.124.06"}}
    VALIDATOR.validate(doc)
    return json.dumps(doc, indent=4)


def failing_on(test: Dict, entity: int, warning: Dict = ROW_REMAP_FAILURE) -> Dict:
    test = copy.deepcopy(test)
    for result in test["results"]:
        if result["entity_id"] == entity:
            result.update(status="Fail", warnings=[warning])
    # the summary carries every error of the test (HelperJsonAddTestSummary: includeAllErrors)
    test["test_summary"] = {"status": "Fail", "warnings": [warning]}
    return test


def node_of(gpus: int = 8, serials: List[str] = SERIALS) -> NodeSnapshot:
    return NodeSnapshot(host="h", gpus=tuple(GpuSnapshot(i, uuid=f"GPU-{i}", serial=serials[i])
                                            for i in range(gpus)))


def findings(text: str, node: NodeSnapshot):
    results, entities, error = read_diag(text)
    read = attribute(DcgmRead(diag=results, diag_error=error, diag_ran=True, entities=entities), node.gpus)
    found, crashes = run_checks(node._replace(dcgm=read), CheckContext(Config(), Mode.NODE, level="deep"))
    assert not crashes
    return [f for f in found if f.check.startswith("dcgm.")]


def test_dcgm4_schema_is_dcgms_and_refuses_a_3x_document():
    VALIDATOR.validate(json.loads(document(real_test())))
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate({"DCGM GPU Diagnostic": {"test_categories": []}})


def test_dcgm4_real_8gpu_pass_reads_every_gpu_with_dcgms_info():
    results, entities, error = read_diag(document(real_test()))
    assert error is None
    assert [(r.gpu, r.test, r.status, r.entity) for r in results] == [
        (i, "diagnostic", "pass", f"GPU{i}") for i in range(8)]
    assert "859.08 gigaflops" in results[3 - 3].text
    assert [e.serial for e in entities] == SERIALS
    assert findings(document(real_test()), node_of()) == []


def test_dcgm4_failure_on_gpu3_fails_only_gpu3():
    found = findings(document(failing_on(real_test(), 3)), node_of())
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(3, "fail", "reset")]
    assert "row remapping failed. (DCGM error 80)" in found[0].message


def test_dcgm4_ids_map_to_nvml_by_serial_not_by_position():
    # DCGM's id 3 is the board NVML calls GPU 6 (a host engine that enumerated another order)
    nvml = SERIALS[:3] + [SERIALS[6], SERIALS[4], SERIALS[5], SERIALS[3], SERIALS[7]]
    found = findings(document(failing_on(real_test(), 3)), node_of(serials=nvml))
    assert [(f.gpu, f.severity.value) for f in found] == [(6, "fail")]


def test_dcgm4_a_gpu_the_node_lacks_is_unknown_never_a_drain():
    test = real_test()
    extra = copy.deepcopy(test["results"][7])
    extra["entity_id"] = 9
    test["results"].append(extra)
    # by serial: DCGM's GPU 9 has a serial none of this node's GPUs has
    text = document(failing_on(test, 9), serials=SERIALS + ["1652321049999"])
    found = findings(text, node_of())
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(None, "unknown", "none")]
    assert "DCGM's GPU 9 (serial 1652321049999), which this node does not have" in found[0].message
    assert "row remapping failed" in found[0].message and not found[0].drains
    # by id: no serial, and no GPU 9 here
    found = findings(document(failing_on(test, 9), serials=[None] * 9), node_of())
    assert [(f.gpu, f.severity.value) for f in found] == [(None, "unknown")]
    # a 4-GPU node given an 8-GPU document: GPU 5's failure is on no GPU here
    found = findings(document(failing_on(real_test(), 5), serials=[None] * 8), node_of(gpus=4))
    assert [(f.gpu, f.severity.value) for f in found] == [(None, "unknown")] * 4
    assert [f.value for f in found] == ["GPU4", "GPU5", "GPU6", "GPU7"]
    assert "DCGM said fail" in found[1].message and "DCGM said pass" in found[0].message
    assert "GPU 5, which this node does not have" in found[1].message


def test_dcgm4_monitor_severity_is_a_warn_and_summary_errors_are_the_nodes():
    # dcgmi writes a warn as "Fail"; DCGM_ERROR_MONITOR (1) says the GPU can work, watched
    thermal = {"warning": "Clocks are being throttled for GPU 2 because of clock event reasons.",
               "error_id": 59, "error_category": 9, "error_severity": 1}
    found = findings(document(failing_on(real_test(), 2, thermal)), node_of())
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(2, "warn", "none")]
    test = real_test()
    test["test_summary"] = {"status": "Fail", "warnings": [
        {"warning": "The diagnostic could not run on all GPUs.", "error_id": 0, "error_category": 16,
         "error_severity": 2}]}
    found = findings(document(test), node_of())
    assert [(f.gpu, f.severity.value) for f in found] == [(None, "fail")]
    assert "could not run on all GPUs" in found[0].message


def test_dcgm4_runtime_error_and_bad_status_are_unknown():
    doc = {"DCGM Diagnostic": {"runtime_error": "Error: unable to establish a connection to the host engine"}}
    VALIDATOR.validate(doc)
    found = findings(json.dumps(doc), node_of())
    assert [f.severity.value for f in found] == ["unknown"] and "host engine" in found[0].message
    test = real_test()
    test["results"][0]["status"] = "Maybe"
    found = findings(document(test), node_of())
    assert [f.severity.value for f in found] == ["unknown"] and "'Maybe'" in found[0].message


def health_doc(incidents: Dict[str, Dict[str, List[str]]], overall: str = "Warning") -> str:
    """`dcgmi health -c -j` as dcgmi/Health.cpp and DcgmiOutputJson write it: body > entity
    group > children > id > children > Errors > children > system {value, overflow}."""
    def entity(systems: Dict[str, List[str]]) -> Dict:
        errors = {system: {"value": overall, "overflow": rows} for system, rows in systems.items()}
        return {"value": overall, "children": {"Errors": {"children": errors}}}

    group = {"children": {gpu: entity(systems) for gpu, systems in incidents.items()}}
    return json.dumps({"body": {"Overall Health": {"value": overall}, "GPU": group},
                       "header": ["Health Monitor Report"]})


def test_dcgm_health_incident_is_on_its_gpu():
    text = health_doc({"5": {"Memory": ["A volatile double-bit ECC error occurred on GPU 5.",
                                        "Drain the GPU and reset it or reboot the node."]}})
    results, error = parse_health(text)
    assert error is None
    read = attribute(DcgmRead(health=results, health_ran=True), node_of().gpus)
    found, crashes = run_checks(node_of()._replace(dcgm=read), CheckContext(Config(), Mode.NODE))
    found = [f for f in found if f.check == "dcgm.health"]
    assert [(f.gpu, f.severity.value) for f in found] == [(5, "warn")]
    assert "Memory" in found[0].message and "double-bit ECC error occurred on GPU 5. Drain" in found[0].message
    # an incident on a GPU this node lacks is unknown
    results, _ = parse_health(health_doc({"11": {"PCIe": ["PCIe replays"]}}))
    read = attribute(DcgmRead(health=results, health_ran=True), node_of().gpus)
    found, _ = run_checks(node_of()._replace(dcgm=read), CheckContext(Config(), Mode.NODE))
    assert [(f.gpu, f.severity.value) for f in found if f.check == "dcgm.health"] == [(None, "unknown")]


def fake_dcgmi(tmp_path: Path, diag: str) -> str:
    (tmp_path / "diag.json").write_text(diag)
    (tmp_path / "health.json").write_text(health_doc({}, overall="Healthy"))
    path = tmp_path / "dcgmi"
    path.write_text(f'#!/bin/sh\ncase "$1" in diag) cat "{tmp_path}/diag.json"; exit 226;; '
                    f'health) cat "{tmp_path}/health.json";; esac\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_dcgm4_failure_on_gpu3_fails_only_gpu3_on_the_fake_node(node, tmp_path):
    dcgmi = fake_dcgmi(tmp_path, document(failing_on(real_test(), 3)))
    node.write_config(f'dcgmi = "{dcgmi}"\n[dcgm]\nenabled = "true"\n[deep]\nenabled = false\n')
    scenario = "gpus = 8\n" + "".join(f"gpu.{i}.serial = {s}\n" for i, s in enumerate(SERIALS))
    result = node.run("--node", "--level", "deep", "--json", scenario=scenario)
    dcgm = [f for f in result.json["findings"] if f["check"].startswith("dcgm.")]
    assert [(f["gpu"], f["severity"], f["action"]) for f in dcgm] == [(3, "fail", "reset")], result.stdout
    assert result.rc == 2
    assert {r["gpu"] for r in result.json["dcgm"]["diag"]} == set(range(8))


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 12) | st.sampled_from(
    ["Pass", "Fail", "Warn", "Skip", "GPU", "CPU", "", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["status", "entity_id", "entity_group", "warnings", "warning", "error_severity", "error_id", "info",
         "results", "tests", "name", "test_summary", "entities", "serial_num", "runtime_error"]),
        inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(tree=JSON, groups=JSON)
def test_dcgm4_any_tree_reads_to_results_or_an_error_never_a_drain_when_unread(tree, groups):
    text = json.dumps({"DCGM Diagnostic": {"test_categories": [tree]}, "entity_groups": groups})
    results, entities, error = read_diag(text)
    assert results or error
    assert all(r.status in ("pass", "fail", "warn", "skip", "config", "internal", "ungraded") for r in results)
    if error:
        assert not any(f.drains for f in findings(text, node_of()))


# --- dcgmi discovery -l: UUID and PCI address where DCGM gives no serial --------------------

DISCOVERY = FIX / "issue-DCGM-229__dcgmi-discovery-l-3.1.7-4xH100.txt"
# the 4 H100 of DCGM-229, as NVML lists them on that node
H100 = [("GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de", "00000000:4C:00.0"),
        ("GPU-75c4ee16-a840-6f6c-9a7b-5ed8f41598b8", "00000000:5D:00.0"),
        ("GPU-879a110e-54dc-22fe-9699-5babde1d450e", "00000000:CC:00.0"),
        ("GPU-5ea04b20-4cc3-4d84-0bb2-e4143be8e874", "00000000:DC:00.0")]


def test_dcgm_discovery_real_output_gives_each_gpus_uuid_and_address():
    from healthcheck.read.dcgmmap import parse_discovery

    found = parse_discovery(DISCOVERY.read_text())
    assert [(e.entity_id, e.uuid, e.pci) for e in found] == [
        (i, uuid, f"0000:{pci[9:11].lower()}:00.0") for i, (uuid, pci) in enumerate(H100)]


def four_gpu_test() -> Dict:
    test = real_test()
    test["results"] = test["results"][:4]
    return test


def test_dcgm_without_serials_maps_by_discovery_uuid_then_address(tmp_path):
    from healthcheck.read.dcgm import read_dcgm
    from healthcheck.config import DcgmConfig

    # NVML lists the boards in another order than DCGM: NVML's 0 is DCGM's 3 and the reverse
    order = [3, 1, 2, 0]
    node = NodeSnapshot(host="h", gpus=tuple(GpuSnapshot(i, uuid=H100[d][0], pci_bus_id=H100[d][1])
                                            for i, d in enumerate(order)))
    (tmp_path / "discovery.txt").write_text(DISCOVERY.read_text())
    dcgmi = fake_dcgmi(tmp_path, document(failing_on(four_gpu_test(), 3), serials=["<<<NOT_SUPPORTED>>>"] * 4))
    text = (tmp_path / "dcgmi").read_text().replace(
        "esac", f'discovery) cat "{tmp_path}/discovery.txt";; esac')
    (tmp_path / "dcgmi").write_text(text)
    read = read_dcgm(Config(dcgmi=dcgmi, dcgm=DcgmConfig(enabled="true")), diag=True)
    assert read is not None and read.diag_error is None
    assert {e.entity_id: e.uuid for e in read.entities} == {i: u for i, (u, _) in enumerate(H100)}
    read = attribute(read, node.gpus)
    found, _ = run_checks(node._replace(dcgm=read), CheckContext(Config(), Mode.NODE, level="deep"))
    assert [(f.gpu, f.severity.value) for f in found if f.check == "dcgm.diag"] == [(0, "fail")]
    # no UUIDs known: the address decides
    bare = read._replace(entities=tuple(e._replace(uuid=None) for e in read.entities), attributed=False)
    nodes = node._replace(gpus=tuple(g._replace(uuid=f"GPU-other-{g.index}") for g in node.gpus))
    found, _ = run_checks(nodes._replace(dcgm=attribute(bare._replace(diag=tuple(
        r._replace(gpu=int(r.entity[3:])) for r in bare.diag)), nodes.gpus)),
        CheckContext(Config(), Mode.NODE, level="deep"))
    assert [(f.gpu, f.severity.value) for f in found if f.check == "dcgm.diag"] == [(0, "fail")]


def test_dcgm_healthy_run_asks_no_discovery(tmp_path):
    from healthcheck.read.dcgm import read_dcgm
    from healthcheck.config import DcgmConfig

    marker = tmp_path / "asked"
    dcgmi = fake_dcgmi(tmp_path, document(four_gpu_test(), serials=["<<<NOT_SUPPORTED>>>"] * 4))
    text = (tmp_path / "dcgmi").read_text().replace("esac", f'discovery) touch "{marker}";; esac')
    (tmp_path / "dcgmi").write_text(text)
    read = read_dcgm(Config(dcgmi=dcgmi, dcgm=DcgmConfig(enabled="true")), diag=True)
    assert read is not None and read.diag_error is None and not marker.exists()


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.one_of(
    st.sampled_from(DISCOVERY.read_text().splitlines()),
    st.text(alphabet="| 0123456789abcDEF:.-GPUIDNameBusvice", max_size=60)), max_size=20))
def test_dcgm_discovery_any_text_reads_to_gpus_or_nothing_never_raises(lines):
    from healthcheck.read.dcgmmap import parse_discovery

    for entity in parse_discovery("\n".join(lines)):
        assert entity.group == "GPU" and entity.entity_id >= 0
        assert entity.uuid is None or entity.uuid.startswith("GPU-")
