"""Pure decisions: verdict order, drain reasons, ownership, the drain budget, exit codes."""

from hypothesis import given, settings, strategies as st

from healthcheck.model import Action, Finding, GpuSnapshot, Mode, Severity, Verdict
from healthcheck.decide.exitcodes import node_exit
from healthcheck.decide.verdict import (beyond_budget, DrainDecision, NodeState, decide_drain, drain_budget,
                                        drain_reason, may_resume, parse_reason, sanitise, verdict_of)

GPU3 = GpuSnapshot(index=3, uuid="GPU-3", serial="1650522003820", pci_bus_id="00000000:41:00.0")


def f(check, severity, gpu=None, value=None, action=Action.NONE):
    return Finding(check=check, severity=severity, message="m", gpu=gpu, value=value, action=action)


def test_verdict_order_fail_unknown_warn_pass():
    assert verdict_of([]) is Verdict.PASS
    assert verdict_of([f("a", Severity.INFO)]) is Verdict.PASS
    assert verdict_of([f("a", Severity.WARN)]) is Verdict.WARN
    assert verdict_of([f("a", Severity.WARN), f("b", Severity.UNKNOWN)]) is Verdict.UNKNOWN
    assert verdict_of([f("a", Severity.UNKNOWN), f("b", Severity.FAIL, action=Action.RESET)]) is Verdict.FAIL


def test_reason_names_gpu_pci_serial_check_value_context_job_and_more():
    findings = [f("ecc.volatile_uncorrected", Severity.FAIL, 3, 2, Action.RESET),
                f("thermal.slowdown", Severity.WARN, 3, 90),
                f("remap.pending", Severity.FAIL, 3, True, Action.RESET)]
    reason = drain_reason(findings, [GPU3], Mode.EPILOG, "1234")
    assert reason == ("gpu-healthcheck: gpu3 pci=00000000:41:00.0 sn=1650522003820 "
                      "ecc.volatile_uncorrected=2 epilog job=1234 (+1 more)")
    assert parse_reason(reason)["gpu"] == "3"
    assert parse_reason(reason)["job"] == "1234"
    assert parse_reason(reason)["check"] == "ecc.volatile_uncorrected"


def test_rma_outranks_reset_and_is_marked():
    findings = [f("ecc.volatile_uncorrected", Severity.FAIL, 3, 2, Action.RESET),
                f("remap.failure", Severity.FAIL, 3, True, Action.RMA)]
    reason = drain_reason(findings, [GPU3], Mode.PROLOG, "7")
    assert "remap.failure=1 rma prolog job=7" in reason
    assert parse_reason(reason)["rma"] == "rma"


def test_node_wide_reason_and_no_reason_without_draining_findings():
    assert drain_reason([f("nvml.init", Severity.FAIL, None, "DRIVER_NOT_LOADED", Action.DRAIN)],
                        [], Mode.NODE, None) == "gpu-healthcheck: nvml.init=DRIVER_NOT_LOADED node"
    assert drain_reason([f("xid", Severity.WARN, 3, 94)], [GPU3], Mode.EPILOG, "1") is None
    assert drain_reason([f("xid", Severity.UNKNOWN)], [], Mode.EPILOG, "1") is None


@settings(max_examples=300)
@given(st.text(max_size=600))
def test_sanitised_text_is_printable_quote_free_and_bounded(text):
    out = sanitise(text)
    assert len(out.encode()) <= 255
    assert all(" " <= c <= "~" for c in out)
    assert not set("\"'`\\\n") & set(out)
    assert out == out.strip()  # Slurm strips a reason: ours must come back as written


def test_a_reason_cut_at_its_limit_never_ends_in_a_blank():
    assert sanitise("a" * 254 + " b") == "a" * 254


@settings(max_examples=200)
@given(st.text(max_size=80), st.text(max_size=80))
def test_reason_is_bounded_whatever_the_gpu_identity(serial, job):
    gpu = GpuSnapshot(index=0, serial=serial, pci_bus_id="00000000:01:00.0")
    reason = drain_reason([f("gpu.lost", Severity.FAIL, 0, "GPU_IS_LOST", Action.REBOOT)] * 3,
                          [gpu], Mode.PROLOG, job)
    assert reason.startswith("gpu-healthcheck:") and len(reason.encode()) <= 255


def nodes(*states):
    return [NodeState(f"n{i}", s, r) for i, (s, r) in enumerate(states)]


def test_drain_budget_counts_only_our_drains_and_allows_at_least_one():
    assert drain_budget(3, 0.1) == 1
    assert drain_budget(100, 0.1) == 10
    cluster = nodes(("IDLE+DRAIN", "gpu-healthcheck: gpu1 x"), ("IDLE", None),
                    ("IDLE+DRAIN", "admin: bad fan"), ("MIXED", None))
    assert decide_drain(cluster[1], cluster, 0.25) is DrainDecision.REFUSED
    assert decide_drain(cluster[1], cluster, 0.5) is DrainDecision.APPLY


def test_beyond_budget_ranks_by_reason_time_then_name_the_same_on_every_node():
    ours = "gpu-healthcheck: gpu0 ecc.volatile_uncorrected=1 node"
    cluster = [NodeState("n3", "IDLE+DRAIN", ours, "2026-11-30T10:00:01"),
               NodeState("n1", "IDLE+DRAIN", ours, "2026-11-30T10:00:01"),
               NodeState("n0", "IDLE+DRAIN", ours, "2026-11-30T10:00:02"),
               NodeState("n2", "IDLE+DRAIN", "admin: PSU", "2026-11-30T09:00:00"),
               NodeState("n4", "IDLE", None), NodeState("n5", "IDLE", None)]
    # budget floor(6 * 0.34) = 2: n1 and n3 (same second, by name) keep theirs
    assert beyond_budget(cluster, 0.34) == ["n0"]
    assert beyond_budget(list(reversed(cluster)), 0.34) == ["n0"]
    assert beyond_budget(cluster, 0.1) == ["n3", "n0"]
    assert beyond_budget(cluster, 1.0) == []


def test_never_overwrite_an_admin_reason():
    this = NodeState("n0", "IDLE+DRAIN", "admin: replacing PSU")
    assert decide_drain(this, [this], 1.0) is DrainDecision.ADMIN_OWNED
    assert may_resume(this, [], []) == "drained by someone else"


def test_a_reason_left_on_a_node_in_service_does_not_stop_a_drain():
    # Slurm 24.11 keeps the last reason after State=RESUME (tests/slurm/test_slurm_versions.py)
    for reason in ("admin: replacing PSU", "gpu-healthcheck: gpu1 ecc.volatile_uncorrected=1 epilog job=7"):
        this = NodeState("n0", "IDLE", reason)
        assert decide_drain(this, [this], 1.0) is DrainDecision.APPLY
        assert may_resume(this, [], []) == "not drained"


def test_resume_only_our_clean_non_rma_drain():
    ours = NodeState("n0", "IDLE+DRAIN", "gpu-healthcheck: gpu3 ecc.volatile_uncorrected=2 epilog job=1")
    assert may_resume(ours, [], [GPU3]) is None
    assert "still failing" in may_resume(ours, [f("gpu.lost", Severity.FAIL, action=Action.RESET)], [])
    dirty = GpuSnapshot(index=3, ecc_volatile_uncorrected=1)
    assert "not clean" in may_resume(ours, [], [dirty])
    rma = NodeState("n0", "IDLE+DRAIN", "gpu-healthcheck: gpu3 remap.failure=1 rma epilog job=1")
    assert "RMA" in may_resume(rma, [], [GPU3])


def test_node_exit_codes():
    assert [node_exit(v) for v in (Verdict.PASS, Verdict.WARN, Verdict.FAIL, Verdict.UNKNOWN)] == [0, 1, 2, 3]


def test_resume_needs_a_full_check_and_the_drains_own_context_to_pass():
    from healthcheck.config import Config
    from healthcheck.model import GpuSnapshot, NodeSnapshot
    from healthcheck.decide.judge import judge_as_drained
    from healthcheck.decide.verdict import NodeState, may_resume
    drained = NodeState("gpu-a", "IDLE+DRAIN", "gpu-healthcheck: gpu4 memory.leaked=61440 prolog job=7")
    leaking = GpuSnapshot(index=4, uuid="GPU-4", memory_total_mib=81559, memory_used_mib=61440,
                          processes=())
    snapshot = NodeSnapshot(host="a", gpus=(leaking,), sysfs_gpus=(), selected=(4,))
    context, found = judge_as_drained(snapshot, Config(), drained.reason, "quick")
    assert context == "prolog" and [f.check for f in found if f.drains] == ["memory.leaked"]
    assert "would fail the prolog" in may_resume(drained, [], (leaking,), drain_context=context,
                                                 context_findings=found)
    assert "full check" in may_resume(drained, [], (leaking,), partial=True)
    healthy = snapshot._replace(gpus=(leaking._replace(memory_used_mib=4),))
    context, found = judge_as_drained(healthy, Config(), drained.reason, "quick")
    assert may_resume(drained, [], healthy.gpus, drain_context=context, context_findings=found) is None
    node_drain = drained._replace(reason="gpu-healthcheck: gpu4 gpu.lost=GPU_IS_LOST node")
    assert judge_as_drained(snapshot, Config(), node_drain.reason, "quick") == (None, [])


def test_fabric_drain_is_not_resumed_by_the_nodes_own_checks():
    """A node the fabric sweep drained passes every check of its own: it stays drained."""
    from healthcheck.decide.verdict import NodeState, is_fabric_reason, may_resume

    reason = "gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-c,gpu-e all_reduce_perf sweep"
    node = NodeState("gpu-b", "IDLE+DRAIN", reason=reason)
    assert is_fabric_reason(reason)
    why = may_resume(node, [], [])
    assert why is not None and "fabric sweep" in why
    assert may_resume(node._replace(reason="gpu-healthcheck: gpu3 ecc.volatile_uncorrected=2 node"), [], []) is None
