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


