"""The repair loop blames the right GPU and only what ran (decide.repair, act.repair, act.ledger):
a ledger stamp from the future counts as now; a finding on a GPU the node does not have, or an
excluded GPU, is never a reset; a reset that never ran is no attempt.  Decisions are pure; the
Repairer runs against the in-process scontrol door (tests/lib/slurmdoor.py) and a real
state_dir."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List

from hypothesis import given, strategies as st

from healthcheck.act import ledger
from healthcheck.act.repair import Repairer
from healthcheck.act.slurm import Slurm
from healthcheck.act.state import StateStore
from healthcheck.config import Config, RepairConfig
from healthcheck.decide import repair as rd
from healthcheck.decide.verdict import NodeState
from healthcheck.model import Action, Finding, GpuSnapshot, LogEvent, NodeSnapshot, Severity

from tests.lib.slurmdoor import FakeDoor

OURS = "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=SN2 ecc.volatile_uncorrected=1 epilog job=7"
CFG = RepairConfig(enabled=True, cooldown_s=3600, window_s=7 * 86400, max_attempts=2, max_concurrent=1)
DAY = 86400.0


def gpus(n: int = 4) -> List[GpuSnapshot]:
    return [GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}", pci_bus_id=f"00000000:{0x18 + 16 * i:02X}:00.0")
            for i in range(n)]


def dbe(gpu):
    return Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=gpu, value=1, action=Action.RESET)


def attempt(at: float, gpu: int = 2, outcome: str = "still_failing: ecc.volatile_uncorrected") -> rd.Attempt:
    return rd.Attempt(at=at, action="reset", trigger="ecc.volatile_uncorrected=1", outcome=outcome,
                      node="gpu-a", gpu=gpu, pci=gpus()[gpu].pci_bus_id or "", serial=f"SN{gpu}")


def this(reason: str = OURS) -> NodeState:
    return NodeState(name="gpu-a", state="IDLE+DRAIN", reason=reason)


def decide(findings, attempts=None, now=1_800_000_000.0, excluded=(), n=4, nvswitch=False):
    node = this()
    return rd.decide_repair(node, [node], list(findings), gpus(n), attempts or {}, now, CFG,
                            nvswitch, excluded=excluded)


def repairer(tmp_path: Path, door: FakeDoor, events: List[LogEvent], **repair: object) -> Repairer:
    config = Config(state_dir=str(tmp_path / "state"), repair=CFG._replace(**repair),  # type: ignore[arg-type]
                    nvidia_smi=str(tmp_path / "no-nvidia-smi"))
    slurm = Slurm(config, {}, ctl=door, sleep=lambda s: None)
    return Repairer(config, slurm, StateStore(config.state_dir), "gpu-a", events, {})


# --- a stamp from the future (the clock stepped back) --------------------------------------

def test_repair_ledger_attempt_stamped_in_the_future_counts_as_now_is_restamped_and_logged(tmp_path):
    now = time.time()
    key = rd.ledger_key(gpus()[2])
    ledger.write_ledger(str(tmp_path / "state"), key, [attempt(now + 30 * DAY)])
    door, events = FakeDoor([this()]), []
    rep = repairer(tmp_path, door, events)
    assert rep.start(NodeSnapshot(host="gpu-a", gpus=tuple(gpus())), [dbe(2)], False) is False
    # in cooldown from now (repair.cooldown_s), never for the 30 days until the clock catches up
    assert rep.plan is not None and rep.plan.state == "cooldown", rep.plan
    assert "-2592000" not in rep.plan.why and rep.plan.why.startswith("last repair 0 s ago"), rep.plan.why
    [stamped] = ledger.read_ledger(str(tmp_path / "state"), key)
    assert now - 5 <= stamped.at <= time.time()
    warned = [e.message for e in events if "after now (the clock stepped back?)" in e.message]
    assert len(warned) == 1 and key in warned[0] and "2592000 s after now" in warned[0].replace("2591999", "2592000"), warned
    # once repair.cooldown_s has passed from the restamp, the GPU is repaired again
    later = decide([dbe(2)], {key: [stamped]}, now=stamped.at + CFG.cooldown_s + 1)
    assert (later.action, later.gpus) == (rd.RESET, (2,))


def test_repair_future_stamp_counts_as_now_in_the_window_and_the_cooldown():
    now = 1_800_000_000.0
    key = rd.ledger_key(gpus()[2])
    plan = decide([dbe(2)], {key: [attempt(now + 30 * DAY)]}, now=now)
    assert plan.state == "cooldown" and plan.why.startswith("last repair 0 s ago"), plan.why
    assert rd.in_window([attempt(now + 30 * DAY)], now, CFG.window_s) != []
    assert rd.from_the_future([attempt(now + 30), attempt(now + 30 * DAY), attempt(now - 5)], now) == [1]


# --- a finding on a GPU the node does not have; an excluded GPU ----------------------------

def test_repair_dcgm_failure_naming_no_gpu_of_this_node_resets_nothing():
    # dcgm.diag on DCGM's GPU 9 of a 4-GPU node: the check finds no GPU 9, the finding names none
    stray = Finding("dcgm.diag", Severity.FAIL, "GPU 9: DCGM diagnostic memory: fail", gpu=None,
                    value="fail", action=Action.RESET)
    plan = decide([stray])
    assert plan.action == rd.NONE and plan.gpus == () and "names no GPU of this node" in plan.why
    assert decide([Finding("xid", Severity.FAIL, "x", gpu=9, value=48, action=Action.RESET)]).action == rd.NONE
    # nor with a real finding beside it: never every GPU, and no reset on a guess
    assert decide([dbe(2), stray]).action == rd.NONE


def test_repair_dcgm_gpu_ids_9_on_a_4_gpu_node_is_unknown_never_a_drain_or_a_reset():
    from healthcheck.decide.judge import judge
    from healthcheck.deepmodel import DcgmRead, DcgmResult
    from healthcheck.model import Mode, Verdict

    snapshot = NodeSnapshot(host="gpu-a", gpus=tuple(gpus()), sysfs_gpus=(), selected=(0, 1, 2, 3),
                            dcgm=DcgmRead(diag=(DcgmResult(9, "Memory", "fail", "bad bits"),), diag_ran=True),
                            out_of_service=((3, "exclude_gpus"),))
    findings, _, verdict = judge(snapshot, Config(), Mode.NODE, "deep", None)
    [found] = [f for f in findings if f.check == "dcgm.diag"]
    assert (found.severity, found.action, found.gpu) == (Severity.UNKNOWN, Action.NONE, None), found
    assert "GPU 9, which this node does not have" in found.message
    assert verdict is not Verdict.FAIL
    assert decide(findings, excluded=(3,)).action == rd.NONE


def test_repair_never_touches_an_excluded_gpu():
    plan = decide([dbe(1), dbe(2)], excluded=(2,))
    assert (plan.action, plan.gpus) == (rd.RESET, (1,))
    only = decide([dbe(2)], excluded=(2,))
    assert only.action == rd.NONE and "exclude_gpus" in only.why
    # an NVSwitch node, where only a reboot would do, is not rebooted for an excluded GPU either
    assert decide([dbe(2)], excluded=(2,), nvswitch=True).action == rd.NONE


def test_repair_excluded_gpu_is_passed_from_the_snapshot_and_nothing_runs(tmp_path):
    door, events = FakeDoor([this()]), []
    rep = repairer(tmp_path, door, events, cooldown_s=0)
    snapshot = NodeSnapshot(host="gpu-a", gpus=tuple(gpus()), out_of_service=((2, "exclude_gpus"),))
    assert rep.start(snapshot, [dbe(2)], False) is False
    assert rep.plan is not None and rep.plan.action == rd.NONE and "exclude_gpus" in rep.plan.why
    assert door.changes() == []  # no claim, nothing reset
    assert not (tmp_path / "state" / "repair").exists()


# --- only a reset that ran counts -----------------------------------------------------------

def test_repair_blocked_attempts_count_neither_for_rma_nor_for_the_cooldown():
    now = 1_800_000_000.0
    key = rd.ledger_key(gpus()[2])
    blocked = [attempt(now - 60 * i, outcome="blocked: In use by another client (nv-hostengine pid 7)")
               for i in range(1, 4)]
    plan = decide([dbe(2)], {key: blocked}, now=now)
    assert (plan.action, plan.gpus) == (rd.RESET, (2,)), plan
    assert rd.in_window(blocked, now, CFG.window_s) == []



# --- the ledger's key: serial and PCI address, escaped; old files still read -----------------

def test_repair_ledger_two_gpus_with_one_serial_or_serials_differing_in_non_utf8_bytes_never_share_a_ledger():
    a, b = gpus(2)
    twins = [a._replace(serial="1650522003800"), b._replace(serial="1650522003800")]
    assert rd.ledger_key(twins[0]) != rd.ledger_key(twins[1])
    # what the NVML reader makes of serials with bytes that are not UTF-8 (U+FFFD each), and
    # two serials the old key turned into the same "16_"
    mangled = [a._replace(serial="16\ufffd"), b._replace(serial="16\ufffd")]
    assert rd.ledger_key(mangled[0]) != rd.ledger_key(mangled[1])
    e, u = a._replace(serial="16\xe9"), a._replace(serial="16\xfc")
    assert rd.ledger_of(e).legacy == rd.ledger_of(u).legacy == "16_"  # the old key collided
    assert rd.ledger_key(e) == "16_C3_A9@0000-18-00.0" and rd.ledger_key(u) == "16_C3_BC@0000-18-00.0"
    assert rd.ledger_key(a._replace(serial="a_b")) != rd.ledger_key(a._replace(serial="a/b"))


@given(st.text(max_size=300), st.text(max_size=300))
def test_repair_ledger_key_escape_is_injective_and_a_file_name(x, y):
    ex, ey = rd.escape_key_part(x), rd.escape_key_part(y)
    assert (ex == ey) == (x == y)
    allowed = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_~")
    assert len(ex) <= rd.KEY_PART_MAX and set(ex) <= allowed


def test_repair_ledger_old_file_keyed_by_serial_is_read_split_by_gpu_and_nothing_is_lost(tmp_path):
    state = str(tmp_path)
    a, b = (g._replace(serial="1650522003800") for g in gpus(2))  # one serial, two boards
    old = [attempt(1.0, gpu=0)._replace(serial=a.serial, pci=a.pci_bus_id or ""),
           attempt(2.0, gpu=1)._replace(serial=b.serial, pci=b.pci_bus_id or ""),
           attempt(3.0, gpu=0)._replace(serial=a.serial, pci=a.pci_bus_id or "")]
    legacy = ledger.write_ledger(state, "1650522003800", old)  # what the older version wrote
    assert legacy.endswith("/repair/1650522003800.json")
    assert [x.at for x in ledger.read_ledger(state, rd.ledger_of(a))] == [1.0, 3.0]
    assert [x.at for x in ledger.read_ledger(state, rd.ledger_of(b))] == [2.0]
    # a new attempt goes into the GPU's own file, with the old ones; the other GPU's stay
    ledger.append_attempt(state, rd.ledger_of(a), attempt(4.0, gpu=0))
    assert [x.at for x in ledger.read_ledger(state, rd.ledger_of(a))] == [1.0, 3.0, 4.0]
    assert [x.at for x in ledger.read_ledger(state, rd.ledger_of(b))] == [2.0]
    assert (tmp_path / "repair" / f"{rd.ledger_key(a)}.json").exists()
    assert len(ledger.read_ledger(state, "1650522003800")) == 3  # the old file as it was
    # the decision reads them: GPU 0 has used its two attempts within the window
    now = 10.0
    attempts = ledger.read_ledgers(state, [rd.ledger_of(g) for g in (a, b)])
    node = this()
    plan = rd.decide_repair(node, [node], [dbe(0)], [a, b], attempts, now, CFG._replace(cooldown_s=0), False)
    assert (plan.action, plan.rma_gpu) == (rd.RMA, 0)




# --- a GPU gone from the bus: named, counted in its own ledger, never GPU 0's ------------------

def eight():
    return gpus(8)


def seven_without_3():
    """NVML after GPU 3 left the bus: seven GPUs, renumbered (the old GPU 4 is index 3 now)."""
    old = eight()
    return [g._replace(index=i) for i, g in enumerate(old[:3] + old[4:])]


def test_gpu_count_names_the_missing_gpu_from_the_known_gpus_and_the_reason_carries_it():
    from healthcheck.act.state import known_after
    from healthcheck.decide.judge import judge
    from healthcheck.decide.verdict import drain_reason
    from healthcheck.model import Mode
    from healthcheck.read.node import with_known

    known = known_after((), NodeSnapshot(host="gpu-a", gpus=tuple(eight())), 1.0)
    assert [k.serial for k in known] == [f"SN{i}" for i in range(8)]
    now, missing = with_known(tuple(seven_without_3()), known)
    assert [(m.index, m.serial, m.pci_bus_id) for m in missing] == [(3, "SN3", "00000000:48:00.0")]
    snapshot = NodeSnapshot(host="gpu-a", gpus=now, sysfs_gpus=(), missing_gpus=missing,
                            selected=tuple(range(7)))
    findings, _, _ = judge(snapshot, Config(expected_gpus=8), Mode.NODE, "quick", None)
    [count] = [f for f in findings if f.check == "gpu.count" and f.drains]
    assert (count.gpu, count.pci, count.serial, count.value) == (None, "00000000:48:00.0", "SN3", 7)
    assert "SN SN3; GPU 3 when last listed" in count.message
    reason = drain_reason(findings, now, Mode.NODE, None)
    assert reason == "gpu-healthcheck: pci=00000000:48:00.0 sn=SN3 gpu.count=7 node", reason
    # the record keeps the missing GPU until a board answers at its address
    assert known_after(known, snapshot, 2.0)[3].serial == "SN3"
    back = known_after(known, NodeSnapshot(host="gpu-a", gpus=tuple(eight())), 3.0)
    assert [k.serial for k in back] == [f"SN{i}" for i in range(8)]


def test_gpu_lost_without_identity_gets_its_serial_and_address_from_the_known_gpus():
    from healthcheck.act.state import known_after
    from healthcheck.read.node import with_known

    known = known_after((), NodeSnapshot(host="gpu-a", gpus=tuple(eight())), 1.0)
    lost = [g if g.index != 3 else GpuSnapshot(index=3, lost="GPU_IS_LOST") for g in eight()]
    now, missing = with_known(tuple(lost), known)
    assert (now[3].serial, now[3].pci_bus_id, missing) == ("SN3", "00000000:48:00.0", ())
    assert rd.ledger_key(now[3]) == rd.ledger_key(eight()[3])  # one ledger, lost or not


def test_repair_reboot_for_a_missing_gpu_counts_in_its_ledger_and_rma_names_it_not_gpu_0():
    from healthcheck.decide.verdict import drain_reason
    from healthcheck.model import Mode

    present = seven_without_3()
    gone = eight()[3]
    count = Finding("gpu.count", Severity.FAIL, "missing", value=7, threshold=8, action=Action.REBOOT,
                    pci=gone.pci_bus_id, serial=gone.serial)
    node = this("gpu-healthcheck: pci=00000000:48:00.0 sn=SN3 gpu.count=7 node")
    plan = rd.decide_repair(node, [node], [count], present, {}, 1e9, CFG, False, missing=[gone])
    assert plan.action == rd.REBOOT
    assert [r.key for r in plan.ledgers] == [rd.ledger_key(gone)], plan.ledgers  # GPU 3's alone
    two = {rd.ledger_key(gone): [attempt(1e9 - 9000, gpu=3), attempt(1e9 - 8000, gpu=3)]}
    # GPU 0 with a ledger of its own repairs plays no part
    two[rd.ledger_key(present[0])] = [attempt(1e9 - 7000, gpu=0)]
    rma = rd.decide_repair(node, [node], [count], present, two, 1e9, CFG, False, missing=[gone])
    assert (rma.action, rma.rma_gpu, rma.rma_ledger and rma.rma_ledger.key) == (rd.RMA, None, rd.ledger_key(gone))
    reason = drain_reason([rd.rma_finding(rma.rma_gpu, 2, count, rma.rma_ledger)], present, Mode.NODE, None)
    assert reason == "gpu-healthcheck: pci=00000000:48:00.0 sn=SN3 repair.attempts=2 rma node", reason


def test_repair_reboot_for_a_fault_naming_no_gpu_counts_in_the_node_ledger():
    driver = Finding("nvml.init", Severity.FAIL, "mismatch", value="LIB_RM_VERSION_MISMATCH", action=Action.REBOOT)
    plan = decide([driver])
    assert plan.action == rd.REBOOT and [r.key for r in plan.ledgers] == ["~node-gpu-a"]


def test_repair_rma_names_the_gpu_whose_fault_recurs_after_the_repair_not_the_one_repaired_more():
    refs = [rd.ledger_of(g) for g in gpus(8) if g.index in (2, 5)]
    after = [dbe(5)]  # GPU 2 came back clean, GPU 5's DBE recurs
    failing = rd.still_failing(after, refs)
    assert list(failing) == [refs[1].key] and failing[refs[1].key].gpu == 5
    assert rd.still_failing([Finding("gpu.count", Severity.FAIL, "x", value=7, action=Action.REBOOT)], refs) == {}


# --- a reset that never ran is "repair blocked", never an attempt -----------------------------

def test_repair_missing_nvidia_smi_is_blocked_never_an_attempt_shown_in_cluster_and_metrics(tmp_path):
    from healthcheck.act.metricsrepair import repair_samples, update_repair
    from collections import defaultdict

    door, events = FakeDoor([this()]), []
    snapshot = NodeSnapshot(host="gpu-a", gpus=tuple(gpus()))
    for _ in range(3):  # three runs, repair.max_attempts = 2: never rma, for no reset ran
        rep = repairer(tmp_path, door, events, cooldown_s=0)
        assert rep.start(snapshot, [dbe(2)], False) is False
        assert rep.plan is not None and rep.plan.action == rd.RESET, rep.plan
    outcomes = [a.outcome for a in ledger.read_ledger(str(tmp_path / "state"), rd.ledger_of(gpus()[2]))]
    assert len(outcomes) == 3 and all(o.startswith("blocked: nvidia-smi is not at ") for o in outcomes), outcomes
    assert "(config key nvidia_smi)" in outcomes[0]
    node = door.nodes["gpu-a"]
    assert "rma" not in (node.reason or "").split() and node.comment.startswith("gpu-healthcheck: repair blocked gpus=2 ")
    assert rd.cluster_state(node, [node], 1) == rd.BLOCKED
    assert rd.active_claim(node) is None  # a blocked node holds no repair budget
    blocked = [e for e in events if e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") == "reset_blocked"]
    assert len(blocked) == 3 and blocked[0].fields["GPU_HEALTHCHECK_REPAIR_BLOCKED"] == rd.NO_NVIDIA_SMI
    assert "repair blocked: no reset of GPU(s) 2 was run" in blocked[0].message
    state = update_repair(None, events, 1.0)
    out = defaultdict(list)
    repair_samples(state, out)
    assert out["gpu_healthcheck_repairs_blocked_total"] == [({"action": "reset", "cause": "no_nvidia_smi"}, 3)]
    assert ({"state": "blocked"}, 1) in out["gpu_healthcheck_repair_state"]
    from healthcheck.act.metrics import count_actions
    assert count_actions(events)["repairs_attempted_reset"] == 0


def test_repair_gpu_held_by_a_process_is_blocked_naming_it_and_nothing_is_run(tmp_path):
    from healthcheck.model import GpuProcess

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho ran >> " + str(tmp_path / "smi-calls") + "\n")
    smi.chmod(0o755)
    held = [g._replace(processes=(GpuProcess(4242, 0, "root", "/usr/bin/nv-hostengine -n"),))
            if g.index == 2 else g for g in gpus()]
    door, events = FakeDoor([this()]), []
    config = Config(state_dir=str(tmp_path / "state"), repair=CFG._replace(cooldown_s=0), nvidia_smi=str(smi))
    rep = Repairer(config, Slurm(config, {}, ctl=door, sleep=lambda s: None), StateStore(config.state_dir),
                   "gpu-a", events, {})
    assert rep.start(NodeSnapshot(host="gpu-a", gpus=tuple(held)), [dbe(2)], False) is False
    assert not (tmp_path / "smi-calls").exists()  # no nvidia-smi at all: no -pm 0, no reset
    [step] = [e for e in events if e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") == "reset_blocked"]
    assert step.fields["GPU_HEALTHCHECK_REPAIR_HELD_BY"].startswith("nv-hostengine pid 4242 (DCGM's host engine")
    assert step.fields["GPU_HEALTHCHECK_REPAIR_BLOCKED"] == rd.IN_USE
    assert door.nodes["gpu-a"].comment.endswith(" by=nv-hostengine_pid_4242"), door.nodes["gpu-a"].comment
    [entry] = ledger.read_ledger(str(tmp_path / "state"), rd.ledger_of(gpus()[2]))
    assert entry.outcome.startswith("blocked: held by nv-hostengine pid 4242") and not rd.counted(entry)


def test_repair_blocked_mark_is_dropped_once_the_node_is_back_in_service(tmp_path):
    mark = rd.mark_text(rd.BLOCKED, [2], "2026-01-01T00:00:00+00:00") + " by=nv-hostengine_pid_7"
    back = NodeState(name="gpu-a", state="IDLE", reason=None, comment=mark)
    assert rd.cluster_state(back, [back], 1) is None
    door = FakeDoor([back])
    rep = repairer(tmp_path, door, [])
    rep.start(NodeSnapshot(host="gpu-a", gpus=tuple(gpus())), [], False)
    assert door.nodes["gpu-a"].comment is None


@given(st.sets(st.integers(0, 7)), st.sets(st.integers(0, 7)))
def test_known_gpus_missing_are_exactly_the_known_ones_no_gpu_answers_for(was, now):
    from healthcheck.act.state import known_after
    from healthcheck.read.node import with_known

    universe = eight()
    known = known_after((), NodeSnapshot(host="gpu-a", gpus=tuple(universe[i] for i in sorted(was))), 1.0)
    present = tuple(universe[i]._replace(index=n) for n, i in enumerate(sorted(now)))  # renumbered
    filled, missing = with_known(present, known)
    assert filled == present
    assert {m.serial for m in missing} == {f"SN{i}" for i in was - now}
    after = known_after(known, NodeSnapshot(host="gpu-a", gpus=present), 2.0)
    assert {k.serial for k in after} == {f"SN{i}" for i in was | now}
