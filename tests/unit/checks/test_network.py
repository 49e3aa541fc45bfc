"""The network checks (checks/network.py) on plain records: port state, rate, error counters
against the prolog's baseline, RoCE, GPUDirect; and how their findings travel (drain reason,
journald fields, metrics, the baseline file)."""

from __future__ import annotations

import json
import re

import pytest

from tests.lib.snapshots import catalogue_cases

from healthcheck.act.metrics import empty_state, render, update_state
from healthcheck.act.state import baseline_from_json, baseline_to_json
from healthcheck.checks import CATALOGUE, CheckContext, run_checks
from healthcheck.config import ConfigError, parse_config
from healthcheck.decide.verdict import drain_reason, parse_reason, verdict_of
from healthcheck.model import Baseline, GpuSnapshot, JobContext, Mode, NodeSnapshot, RunOutcome, Severity
from healthcheck.netmodel import IbPort, NetworkRead, PortBaseline
from healthcheck.report.document import finding_fields

NETWORK_CHECKS = ("ib.port_state", "ib.rate", "ib.link_layer", "ib.errors", "gpudirect.rdma")
GPU0 = GpuSnapshot(index=0, uuid="GPU-0", pci_bus_id="00000000:18:00.0")


def port(name: str = "mlx5_0:1", **kw) -> IbPort:
    hca, _, number = name.partition(":")
    fields = dict(hca=hca, port=int(number), pci="0000:1a:00.0", hca_type="MT4129",
                  link_layer="InfiniBand", state=4, state_name="ACTIVE", phys_state=5,
                  phys_state_name="LinkUp", rate_gbps=400.0, rate="400 Gb/sec (4X NDR)",
                  symbol_error=0, link_error_recovery=0, link_downed=0, port_rcv_errors=0,
                  local_link_integrity_errors=0, excessive_buffer_overrun_errors=0)
    fields.update(kw)
    return IbPort(**fields)


def base_of(p: IbPort) -> PortBaseline:
    return PortBaseline(**{f: getattr(p, f) for f in PortBaseline._fields})


def snap(*ports: IbPort, baseline=(), peermem="nvidia_peermem", gpus=(GPU0,), job="42") -> NodeSnapshot:
    return NodeSnapshot(host="node07", gpus=gpus, selected=tuple(g.index for g in gpus),
                        network=NetworkRead(ports=ports, peermem=peermem),
                        job=JobContext(job_id=job),
                        baseline=Baseline(job_id=job, taken_at=0.0, ports=tuple(baseline)))


def network_findings(node: NodeSnapshot, mode: Mode = Mode.NODE, config: str = ""):
    ctx = CheckContext(parse_config(config, known_checks=CATALOGUE), mode)
    findings, crashes = run_checks(node, ctx)
    assert crashes == []
    return [f for f in findings if f.check in NETWORK_CHECKS]


def test_ib_port_state_the_checks_are_registered_in_the_catalogue_in_order():
    ids = list(CATALOGUE)
    assert [i for i in ids if i in NETWORK_CHECKS] == list(NETWORK_CHECKS)
    assert CATALOGUE["ib.errors"].threshold_key == "network.link_downed_per_job"


def test_ib_port_state_no_network_no_finding_at_all():
    node = NodeSnapshot(host="n", gpus=(GPU0,), selected=(0,))
    for mode in Mode:
        assert network_findings(node, mode, "[network]\ngpudirect = true\nexpected_ports = 2\n") == []


def test_ib_port_state_healthy_ports_give_nothing_in_every_mode():
    ports = (port("mlx5_0:1", gpus=("0000:18:00.0",)), port("mlx5_1:1"))
    node = snap(*ports, baseline=[base_of(p) for p in ports])
    for mode in Mode:
        assert network_findings(node, mode, '[network]\nexpected_ports = ["mlx5_0:1", "mlx5_1:1"]\n') == []


def test_ib_port_state_expected_port_polling_fails_and_drains_naming_port_pci_and_gpus():
    down = port(state=1, state_name="DOWN", phys_state=2, phys_state_name="Polling", gpus=("0000:18:00.0",))
    [f] = network_findings(snap(down), Mode.PROLOG, '[network]\nexpected_ports = ["mlx5_0:1"]\n')
    assert (f.check, f.severity, f.port, f.pci, f.drains) == ("ib.port_state", Severity.FAIL, "mlx5_0:1",
                                                              "0000:1a:00.0", True)
    assert "node07 mlx5_0:1 (0000:1a:00.0, serves GPU 0)" in f.message and "DOWN/Polling" in f.message
    reason = drain_reason([f], [GPU0], Mode.PROLOG, "42")
    assert reason == "gpu-healthcheck: pci=0000:1a:00.0 ib.port_state=DOWN/Polling@mlx5_0:1 prolog job=42"


def test_ib_port_state_without_expected_ports_a_down_port_warns_but_up_then_down_fails_in_epilog():
    up, down = port(), port(state=1, state_name="DOWN", phys_state=2, phys_state_name="Polling")
    [warn] = network_findings(snap(down), Mode.PROLOG)
    assert warn.severity is Severity.WARN and not warn.drains
    [fail] = network_findings(snap(down, baseline=[base_of(up)]), Mode.EPILOG)
    assert fail.severity is Severity.FAIL and fail.drains and "at the prolog of job 42" in fail.message


def test_ib_port_state_expected_count_and_absent_named_port_fail():
    down = port("mlx5_1:1", state=1, state_name="DOWN", phys_state=3, phys_state_name="Disabled")
    found = network_findings(snap(port(), down), Mode.PROLOG, "[network]\nexpected_ports = 2\n")
    [count] = [f for f in found if f.severity is Severity.FAIL]
    assert (count.value, count.threshold, count.port) == (1, 2, "mlx5_1:1")
    [absent] = network_findings(snap(port()), Mode.NODE, '[network]\nexpected_ports = ["mlx5_9:1", "mlx5_0:1"]\n')
    assert absent.port == "mlx5_9:1" and absent.value == "absent" and absent.drains


def test_ib_port_state_an_unreadable_state_is_unknown_never_a_drain():
    broken = port(state=None, state_name=None, unreadable=("/sys/class/infiniband/mlx5_0/ports/1/state: Input/output error",))
    [f] = network_findings(snap(broken), Mode.PROLOG, '[network]\nexpected_ports = ["mlx5_0:1"]\n')
    assert f.severity is Severity.UNKNOWN and not f.drains and "Input/output error" in f.message
    listing = NodeSnapshot(host="n", network=NetworkRead(error="cannot list /sys/class/infiniband: Permission denied"))
    [g] = network_findings(listing)
    assert g.check == "ib.port_state" and g.severity is Severity.UNKNOWN


def test_ib_rate_below_siblings_min_rate_and_prolog_rate_warn_naming_both_rates():
    slow = port("mlx5_3:1", rate_gbps=200.0, rate="200 Gb/sec (4X HDR)")
    [f] = network_findings(snap(port(), slow))
    assert (f.check, f.severity, f.port, f.value, f.threshold) == ("ib.rate", Severity.WARN, "mlx5_3:1", 200.0, 400.0)
    assert "200 Gb/sec (4X HDR)" in f.message and "400 Gb/sec (4X NDR)" in f.message
    [g] = network_findings(snap(port()), Mode.NODE, "[network]\nmin_rate_gbps = 800\n")
    assert g.threshold == 800.0 and "min_rate_gbps = 800" in g.message
    [h] = network_findings(snap(slow, baseline=[base_of(port("mlx5_3:1"))]), Mode.EPILOG)
    assert "ran at 400 Gb/sec at the prolog" in h.message and not h.drains


def test_ib_errors_link_downed_grows_by_3_during_the_job_drains_with_the_port_in_the_reason():
    before, after = port(gpus=("0000:18:00.0",)), port(link_downed=3, gpus=("0000:18:00.0",))
    node = snap(after, baseline=[base_of(before)])
    [f] = network_findings(node, Mode.EPILOG)
    assert (f.check, f.severity, f.value, f.threshold, f.drains) == ("ib.errors", Severity.FAIL, 3, 0, True)
    assert "link_downed grew by 3 during the job (0 -> 3)" in f.message
    reason = drain_reason([f], [GPU0], Mode.EPILOG, "42")
    assert reason == "gpu-healthcheck: pci=0000:1a:00.0 ib.errors=3@mlx5_0:1 epilog job=42"
    parsed = parse_reason(reason)
    assert (parsed["check"], parsed["value"], parsed["pci"], parsed["context"], parsed["job"], parsed["gpu"]) == (
        "ib.errors", "3@mlx5_0:1", "0000:1a:00.0", "epilog", "42", None)
    assert network_findings(node, Mode.NODE) == []  # 3 < ibqueryerrors' 10: nothing by hand


def test_ib_errors_limits_come_from_config_and_a_saturated_counter_is_unknown():
    before, after = port(symbol_error=5), port(symbol_error=15)
    node = snap(after, baseline=[base_of(before)])
    assert network_findings(node, Mode.EPILOG) == []  # 10 new: at rdma-core's limit, not above
    [f] = network_findings(node, Mode.EPILOG, "[network]\nsymbol_error_per_job = 9\n")
    assert f.value == 10 and f.threshold == 9
    full = port(link_downed=255)
    [g] = network_findings(snap(full, baseline=[base_of(full)]), Mode.EPILOG)
    assert g.severity is Severity.UNKNOWN and g.value == "saturated" and not g.drains


def test_ib_errors_counters_reset_during_the_job_or_unknown_never_drain():
    reset = snap(port(link_downed=0), baseline=[base_of(port(link_downed=7))])
    assert network_findings(reset, Mode.EPILOG) == []
    gone = port(link_downed=None, unreadable=("/x/ports/1/counters/link_downed: Permission denied",))
    [f] = network_findings(snap(gone, baseline=[base_of(port())]), Mode.EPILOG)
    assert f.severity is Severity.UNKNOWN and not f.drains


def test_ib_link_layer_roce_port_with_its_netdev_down_fails_under_its_own_id():
    roce = port(link_layer="Ethernet", netdev="ens1np0", operstate="down", rate_gbps=200.0, rate="200 Gb/sec (4X HDR)")
    [f] = network_findings(snap(roce), Mode.PROLOG, '[network]\nexpected_ports = ["mlx5_0:1"]\n')
    assert f.check == "ib.link_layer" and f.drains and "ens1np0:down" in f.message
    healthy = roce._replace(operstate="up")
    assert network_findings(snap(healthy), Mode.PROLOG, '[network]\nexpected_ports = ["mlx5_0:1"]\n') == []


def test_gpudirect_rdma_auto_true_and_false():
    near = port(gpus=("0000:18:00.0",))
    [f] = network_findings(snap(near, peermem=None))
    assert f.check == "gpudirect.rdma" and f.severity is Severity.WARN and "mlx5_0:1" in f.message
    assert network_findings(snap(port(), peermem=None)) == []  # auto: no port on a GPU's switch
    assert len(network_findings(snap(port(), peermem=None), config='[network]\ngpudirect = "true"\n')) == 1
    assert network_findings(snap(near, peermem=None), config="[network]\ngpudirect = false\n") == []
    assert network_findings(snap(near, peermem=None, gpus=())) == []  # no GPUs: nothing to peer


def test_gpudirect_rdma_config_keys_are_validated():
    for text, key in (('[network]\ngpudirect = "maybe"\n', "network.gpudirect"),
                      ('[network]\nexpected_ports = ["mlx5_0"]\n', "network.expected_ports"),
                      ("[network]\nexpected_ports = -1\n", "network.expected_ports"),
                      ("[network]\nlink_downed_per_job = -1\n", "network.link_downed_per_job")):
        with pytest.raises(ConfigError) as err:
            parse_config(text)
        assert err.value.key == key


def test_ib_errors_baseline_keeps_the_ports_and_old_files_without_them_still_read():
    p = port(link_downed=2, rate_gbps=100.0)
    baseline = Baseline(job_id="9", taken_at=1.0, ports=(base_of(p),))
    again = baseline_from_json(baseline_to_json(baseline))
    assert again == baseline and again.ports[0].link_downed == 2
    old = json.dumps({"job_id": "9", "taken_at": 1.0, "gpus": [{"uuid": "GPU-0", "ecc_volatile_uncorrected": 0}],
                      "kernel_log": None}).encode()
    assert baseline_from_json(old).ports == ()
    with pytest.raises(ValueError):
        baseline_from_json(json.dumps({"job_id": "9", "taken_at": 1.0, "ports": [{"name": "x", "link_downed": "3"}]}).encode())


def test_ib_port_state_finding_journal_fields_name_the_port():
    down = port(state=1, state_name="DOWN", phys_state=2, phys_state_name="Polling")
    [f] = network_findings(snap(down), Mode.PROLOG, '[network]\nexpected_ports = ["mlx5_0:1"]\n')
    fields = finding_fields(f, snap(down))
    assert fields["GPU_HEALTHCHECK_PORT"] == "mlx5_0:1" and fields["GPU_HEALTHCHECK_PORT_PCI_BUS_ID"] == "0000:1a:00.0"
    assert "GPU_INDEX" not in fields


def test_ib_port_state_metrics_follow_the_naming_rules():
    node = snap(port(link_downed=3), port("mlx5_1:1", state=1, phys_state=2, rate_gbps=None))
    outcome = RunOutcome(exit_code=0, report={"verdict": "pass", "findings": []}, events=[], snapshot=node)
    text = render(update_state(empty_state(), outcome, "node", now=1.0))
    assert ('gpu_healthcheck_ib_port_errors_total{counter="link_downed",device="mlx5_0",link_layer="InfiniBand",'
            'pci_bus_id="0000:1a:00.0",port="1"} 3') in text
    assert 'gpu_healthcheck_ib_port_active{device="mlx5_1",link_layer="InfiniBand",pci_bus_id="0000:1a:00.0",port="1"} 0' in text
    assert "gpu_healthcheck_ib_rate_bytes_per_second{" in text and " 50000000000" in text
    kinds = dict(re.findall(r"^# TYPE (gpu_healthcheck_ib_\S+) (\S+)$", text, re.M))
    assert len(kinds) == 5
    for name, kind in kinds.items():
        assert name.endswith("_total") == (kind == "counter")
    empty = render(update_state(empty_state(), outcome._replace(snapshot=NodeSnapshot(host="n")), "node", 1.0))
    assert "gpu_healthcheck_ib_" not in empty


def test_ib_errors_verdict_of_a_healthy_network_is_pass():
    assert verdict_of(network_findings(snap(port()), Mode.EPILOG)) == verdict_of([])


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action
# for each network check, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("network"))


def test_ib_port_state_a_port_active_at_the_prolog_and_gone_at_the_epilog_fails_without_expected_ports():
    """The HCA fell off the bus during the job: its port is no longer in /sys/class/infiniband."""
    kept, lost = port("mlx5_0:1"), port("mlx5_1:1")
    node = snap(kept, baseline=[base_of(kept), base_of(lost)])
    [f] = network_findings(node, Mode.EPILOG)
    assert (f.check, f.severity, f.port, f.value) == ("ib.port_state", Severity.FAIL, "mlx5_1:1", "absent")
    assert f.drains and "was ACTIVE/LinkUp at the prolog of job 42 and is gone now" in f.message
    # every HCA gone: /sys/class/infiniband itself is gone (no network read at all)
    assert [g.port for g in network_findings(node._replace(network=None), Mode.EPILOG)] == ["mlx5_0:1", "mlx5_1:1"]
    # a port down at the prolog, or a --node run, expects nothing of it
    down = lost._replace(state=1, phys_state=2)
    assert network_findings(snap(kept, baseline=[base_of(kept), base_of(down)]), Mode.EPILOG) == []
    assert network_findings(node, Mode.NODE) == []


def test_ib_errors_a_counter_that_went_down_was_reset_and_its_new_value_is_growth_since():
    """link_downed 5 at the prolog, 2 at the epilog: cleared during the job, then the link went
    down twice."""
    node = snap(port(link_downed=2), baseline=[base_of(port(link_downed=5))])
    [f] = network_findings(node, Mode.EPILOG)
    assert (f.check, f.severity, f.value) == ("ib.errors", Severity.FAIL, 2) and f.drains
    assert "cleared during the job (5 -> 2)" in f.message
    symbols = snap(port(symbol_error=4), baseline=[base_of(port(symbol_error=900))])
    assert network_findings(symbols, Mode.EPILOG) == []  # 4 since the reset: within its limit of 10
