"""The repair budget held by a primitive slurmctld makes atomic (a reservation of a fixed name
per slot), and a claim that ends with its repair: a claim left on a node back in service holds
no budget, and the node's own next run drops it (only ours: the site's Comment stays) with its
slot.  The Repairer runs against the in-process scontrol door (tests/lib/slurmdoor.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List

from healthcheck.act import ledger
from healthcheck.act.repair import Repairer
from healthcheck.act.scontrol import parse_reservations
from healthcheck.act.slurm import Slurm
from healthcheck.act.state import StateStore
from healthcheck.config import Config, RepairConfig
from healthcheck.decide import repair as rd
from healthcheck.decide.verdict import NodeState
from healthcheck.model import Action, Finding, GpuSnapshot, LogEvent, NodeSnapshot, Severity
from healthcheck.text import iso_utc

from tests.lib.slurmdoor import FakeDoor

OURS = "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=SN2 ecc.volatile_uncorrected=1 epilog job=7"
CFG = RepairConfig(enabled=True, cooldown_s=0, max_attempts=2, max_concurrent=1)
GPUS = tuple(GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}", pci_bus_id=f"00000000:{0x18 + 16 * i:02X}:00.0")
             for i in range(4))
DBE = Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=2, value=1, action=Action.RESET)


def drained(name: str, comment=None) -> NodeState:
    return NodeState(name=name, state="IDLE+DRAIN", reason=OURS, reason_time="2027-01-15T08:00:00",
                     comment=comment)


def repairer(tmp_path: Path, door: FakeDoor, events: List[LogEvent], node: str = "gpu-a") -> Repairer:
    config = Config(state_dir=str(tmp_path / node), repair=CFG, nvidia_smi=str(tmp_path / "no-nvidia-smi"))
    return Repairer(config, Slurm(config, {}, ctl=door, sleep=lambda s: None), StateStore(config.state_dir),
                    node, events, {})


def killed_claim(until: float) -> str:
    """What a run killed after its reset leaves in the Comment, beside the site's text."""
    return "ticket 4711 | " + rd.mark_text(rd.RESETTING, [2], iso_utc(time.time() - 30), iso_utc(until))


def test_a_claim_on_a_node_back_in_service_holds_no_budget():
    now = time.time()
    back = NodeState(name="gpu-a", state="IDLE", reason=None, comment=killed_claim(now + 600))
    other = drained("gpu-b")
    assert rd.active_claim(back, now) is None and rd.busy_repairing([back, other], "gpu-b", now) == []
    plan = rd.decide_repair(other, [back, other], [DBE], GPUS, {}, now, CFG, False)
    assert plan.action == rd.RESET, plan.why  # never "repair budget spent: gpu-a repairing"
    assert rd.cluster_state(back, [back, other], 1, now) is None  # --cluster: not "resetting"
    # nor an admin's drain: no repair of ours runs there
    admins = back._replace(state="IDLE+DRAIN", reason="memtest by admin")
    assert rd.active_claim(admins, now) is None
    # a live claim on a node still drained by us does count
    assert rd.active_claim(drained("gpu-a", killed_claim(now + 600)), now) is not None


def test_the_next_run_on_a_resumed_node_drops_only_our_claim_and_its_slot_and_counts_the_reset(tmp_path):
    now = time.time()
    back = NodeState(name="gpu-a", state="IDLE", reason=None, comment=killed_claim(now + 600))
    door, events = FakeDoor([back, drained("gpu-b")]), []
    door.reservations = {"gpu-healthcheck-repair-0": ("gpu-a",)}  # the killed run's slot
    rep = repairer(tmp_path, door, events)
    ref = rd.ledger_of(GPUS[2])
    ledger.append_attempt(rep.config.state_dir, ref, rd.Attempt(now - 30, "reset", "ecc.volatile_uncorrected=1",
                                                                "started", "gpu-a", 2, GPUS[2].pci_bus_id or "", "SN2"))
    assert rep.start(NodeSnapshot(host="gpu-a", gpus=GPUS), [], False) is False
    assert door.nodes["gpu-a"].comment == "ticket 4711"  # the site's text stays
    assert door.reservations == {}  # its jobs are not kept off until the claim's expiry
    assert [a.outcome for a in ledger.read_ledger(rep.config.state_dir, ref)] == ["killed"]
    [step] = [e for e in events if e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") == "stale_claim"]
    assert "no longer drained by us" in step.message, step.message


def test_a_slot_held_by_another_node_steps_the_claim_back_and_leaves_no_trace(tmp_path):
    door, events = FakeDoor([drained("gpu-a"), drained("gpu-b")]), []
    # gpu-b took the only slot; its Comment claim has not landed yet (a slow RPC)
    door.reservations = {"gpu-healthcheck-repair-0": ("gpu-b",)}
    rep = repairer(tmp_path, door, events)
    assert rep.start(NodeSnapshot(host="gpu-a", gpus=GPUS), [DBE], False) is False
    steps = [e for e in events if e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") == "budget"]
    assert steps and "every slot of the repair budget is held (gpu-b (gpu-healthcheck-repair-0)" in steps[0].message
    assert door.nodes["gpu-a"].comment is None and door.reservations == {"gpu-healthcheck-repair-0": ("gpu-b",)}
    assert not any(e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") == "claimed" for e in events)


def test_a_free_slot_is_taken_for_the_repair_and_given_back_when_it_ends(tmp_path):
    door, events = FakeDoor([drained("gpu-a")]), []
    rep = repairer(tmp_path, door, events)
    # nvidia-smi is absent: the reset is blocked, which holds no budget either
    assert rep.start(NodeSnapshot(host="gpu-a", gpus=GPUS), [DBE], False) is False
    creates = [c for c in door.calls if c[:2] == ("create", "reservation")]
    assert creates and creates[0][2] == "ReservationName=gpu-healthcheck-repair-0", door.calls
    assert door.reservations == {}


def test_reservation_lines_parse_on_every_version():
    text = ("ReservationName=gpu-healthcheck-repair-0 StartTime=2026-12-04T16:38:10 EndTime=2026-12-04T16:39:25 "
            "Duration=00:01:15 Nodes=gpu-a NodeCnt=1 CoreCnt=16 Features=(null) PartitionName=(null) "
            "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=16 Users=root Groups=(null)\n")
    [r] = parse_reservations(text).values()
    assert (r.name, r.nodes, r.end_time) == ("gpu-healthcheck-repair-0", "gpu-a", "2026-12-04T16:39:25")
    assert parse_reservations("No reservations in the system\n") == {}


def test_a_place_whose_reservation_ended_is_taken_under_its_next_name_never_beside_a_live_one(tmp_path):
    from healthcheck.act.scontrol import Reservation

    assert [rd.slot_of(n) for n in ("gpu-healthcheck-repair-0", "gpu-healthcheck-repair-2.3",
                                    "gpu-healthcheck-retest-gpu-a", "gpu-healthcheck-repair-x")] == [0, 2, None, None]
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))  # noqa: E731
    assert rd.place_live(stamp(now - 5), now)  # within the clocks' margin: still held
    assert not rd.place_live(stamp(now - 60), now) and rd.place_live(None, now)

    class Lingering(FakeDoor):
        """slurmctld keeps an ended reservation listed (and its name taken) until it drops it."""

        ended: dict = {}

        def show_reservations(self):
            live = super().show_reservations()
            return {**{n: Reservation(n, node, stamp(now - 60)) for n, node in self.ended.items()}, **live}

        def create_reservation(self, name, nodes, users, flags, seconds=None):
            if name in self.ended:
                self._call("create", "reservation", f"ReservationName={name}")
                from healthcheck.act.scontrol import ScontrolError
                raise ScontrolError(["scontrol"], "exit status 1: Error creating the reservation: "
                                                  "Duplicate reservation name")
            super().create_reservation(name, nodes, users, flags, seconds)

    door, events = Lingering([drained("gpu-a")]), []
    door.ended = {"gpu-healthcheck-repair-0": "gpu-b"}  # a killed run's place, ended a minute ago
    rep = repairer(tmp_path, door, events)
    assert rep._take_slot(1) == "gpu-healthcheck-repair-0.1"
    rep._free_slot()
    # a live reservation under another name of the place holds it
    door.reservations = {"gpu-healthcheck-repair-0.1": ("gpu-b",)}
    assert rep._take_slot(1) is None and door.reservations == {"gpu-healthcheck-repair-0.1": ("gpu-b",)}
