"""The repair budget's claim in the node's Comment, held as decide.repair's docstring says: ask,
then hold, each written and re-read; the claim's expiry; a stale claim of this node cleared; our
part of the Comment kept beside the site's.  Repairer (act.repair) is a ClaimMixin."""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..config import Config
from ..decide import repair as rd
from ..decide.verdict import NodeState, with_our_comment
from ..model import NOTICE, WARNING, DoorError, NodeSnapshot
from ..text import iso_utc
from . import ledger

SETTLE_S = 1.0  # after our ask, before the re-read: concurrent claims become visible
# The budget's slot reservations: MAINT (slurmctld shows and accounts the node as in
# maintenance, and lets the slot overlap the node's other reservations), IGNORE_JOBS (a job
# still completing does not make slurmctld refuse it with "Requested nodes are busy", which
# would read as no free slot).  Only the repairing node is in it: no other node's jobs wait.
SLOT_FLAGS = "MAINT,IGNORE_JOBS"
SLOT_SAFETY_S = 5.0


class ClaimMixin:
    """The claim steps of a Repairer; the attributes below are Repairer's."""

    config: Config
    slurm: object
    node: str
    ends_at: float
    seen: Optional[NodeState]
    comment: Optional[str]
    slot: Optional[str]  # the budget's slot reservation this run holds

    @property
    def ctl(self) -> object:
        return self.slurm.ctl  # type: ignore[attr-defined]

    def _log(self, step: str, priority: int, message: str, action: str = "", **extra: str) -> None:
        raise NotImplementedError

    def _set_outcome(self, keys: Sequence[rd.LedgerRef], outcome: str) -> None:
        raise NotImplementedError

    def _claim(self, plan: rd.RepairPlan, retry: bool = True) -> bool:
        """Claim the repair budget in two steps, each written, then re-read from slurmctld
        (decide.repair's docstring): ask, then hold (once more after a collision of holds).
        Then the node must still be as the repair was decided on: drained by us with the
        same reason, and no job on it."""
        state = {rd.RESET: rd.RESETTING, rd.VERIFY: rd.VERIFYING}.get(plan.action, rd.REBOOTING)
        budget = self.config.repair.max_concurrent
        now = time.time()
        at, until = iso_utc(now), iso_utc(self._claim_until())
        try:
            self._write_ours(rd.mark_text(state, plan.gpus, at, until, asking=True))
            self.slurm._sleep(SETTLE_S)  # type: ignore[attr-defined]
            this, cluster = self._reread()
            past = rd.repairs_beyond_budget(cluster, budget, time.time())
            if self.node in past:
                ahead = [n for n in rd.claim_order(cluster, time.time()) if n not in past]
                return self._step_back(plan, f"stepped back: {', '.join(ahead) or 'other nodes'} "
                                             f"claimed the repair budget first (repair.max_concurrent "
                                             f"= {budget})")
            # a reboot's claim is ended by slurmctld's reboot state, not by this run's deadline
            self._write_ours(rd.mark_text(state, plan.gpus, at, until if state in rd.EXPIRING else None))
            this, cluster = self._reread()
            held = rd.held_past_budget(cluster, budget, time.time())
            if held and retry:
                # every node that holds at once steps back; the one first by name asks again
                # first, so nodes in lock step do not step back together for ever
                self.release(reread=False)
                self.slurm._sleep(SETTLE_S * (1 + sorted(held).index(self.node)))  # type: ignore[attr-defined]
                return self._claim(plan, retry=False)
            if held:
                return self._step_back(plan, f"stepped back: {', '.join(held)} hold repair claims "
                                             f"at once, more than repair.max_concurrent = {budget}")
            # the mutex: a reservation of a fixed name per place of the budget (decide.repair.slot_name)
            if self._take_slot(rd.repair_budget(cluster, budget)) is None:
                return self._step_back(plan, f"stepped back: every slot of the repair budget is "
                                             f"held ({self._slot_words()}; repair.max_concurrent "
                                             f"= {budget})")
            this, cluster = self._reread()
            crowd = rd.over_budget(self.node, self._slot_holders(), cluster, budget, time.time())
            if crowd:
                return self._step_back(plan, f"stepped back: {', '.join(n for n in crowd if n != self.node)} "
                                             f"repairing (a slot held, or a reboot under way; "
                                             f"repair.max_concurrent = {budget})")
            changed = rd.changed_since(self.seen, this) if self.seen is not None else None
            if changed:
                return self._step_back(plan, f"backed off: after the claim, {changed}: nothing "
                                             f"done", step="backed_off")
        except DoorError as exc:
            self._log("skipped", WARNING, f"cannot claim the repair budget ({exc}): nothing done",
                      plan.action)
            self.release()
            return False
        self._log("claimed", NOTICE, f"{plan.action} of GPU(s) {','.join(map(str, plan.gpus)) or 'all'}: "
                                     f"{plan.why}", plan.action, GPU_HEALTHCHECK_REPAIR_UNTIL=until if state in rd.EXPIRING else "")
        return True

    def _take_slot(self, places: int) -> Optional[str]:
        """The first free place of the repair budget, as a reservation of this node that ends
        with this run's deadline (a run killed mid-repair holds it no longer: others take the
        place CLAIM_MARGIN_S later, when its claim expires), or None when every place is held.
        Raises DoorError for any failure but a name slurmctld has already."""
        import math
        import pwd

        from .scontrol import DUPLICATE_RESERVATION

        seconds = max(1, math.ceil(self.ends_at - time.monotonic()))
        user = pwd.getpwuid(os.getuid()).pw_name
        for place in range(places):
            for rename in range(rd.SLOT_NAMES):
                name = rd.slot_name(place, rename)
                try:
                    self.ctl.create_reservation(name, [self.node], user, SLOT_FLAGS,  # type: ignore[attr-defined]
                                                seconds)
                except DoorError as exc:
                    if DUPLICATE_RESERVATION not in str(exc):
                        raise
                    if any(rd.slot_of(n) == place for n in self._slots()):
                        break  # held: the next place
                    continue  # ended, not dropped yet: the place's next name
                self.slot = name
                others = [n for n in self._slots() if rd.slot_of(n) == place and n != name]
                if not others:
                    return name
                self._free_slot()  # another name of this place is live: it holds the place
                break
        return None

    def _slots(self) -> Dict[str, str]:
        """Each live reservation of a place (rd.place_live) -> the node holding it.  Raises
        DoorError."""
        now = time.time()
        return {name: r.nodes for name, r in self.ctl.show_reservations().items()  # type: ignore[attr-defined]
                if rd.slot_of(name) is not None and rd.place_live(r.end_time, now)}

    def _slot_holders(self) -> List[str]:
        return list(self._slots().values())

    def _slot_words(self) -> str:
        try:
            return ", ".join(f"{node} ({name})" for name, node in sorted(self._slots().items())) or "none seen now"
        except DoorError as exc:
            return f"holders not read: {exc}"

    def _free_slot(self) -> None:
        """Delete the slot this run holds, if any (the claim is over, or handed to slurmctld's
        reboot state).  A delete that fails leaves it to end by itself, at the claim's expiry."""
        if self.slot is None:
            return
        name, self.slot = self.slot, None
        try:
            self.ctl.delete_reservation(name)  # type: ignore[attr-defined]
        except DoorError as exc:
            self._log("error", WARNING, f"cannot delete the repair budget's reservation {name} "
                                        f"({exc}): it ends by itself at the claim's expiry")

    def _drop_own_slots(self) -> None:
        """A killed run's slot of this node, still running (its node was resumed before the
        claim's expiry: it would keep the node's jobs off until then): deleted.  One ending
        within seconds is left to end, so a slot another node takes just after cannot be
        deleted by mistake."""
        try:
            for name, r in self.ctl.show_reservations().items():  # type: ignore[attr-defined]
                end = rd.stamp_epoch(r.end_time, utc=False)
                if rd.slot_of(name) is not None and r.nodes == self.node \
                        and end is not None and end > time.time() + SLOT_SAFETY_S:
                    self.ctl.delete_reservation(name)  # type: ignore[attr-defined]
        except DoorError as exc:
            self._log("error", WARNING, f"cannot delete this node's repair budget reservation "
                                        f"({exc}): it ends by itself at the claim's expiry")

    def _claim_until(self) -> float:
        """A reset claim's expiry (epoch): this run's deadline and a margin for clocks."""
        return time.time() + max(0.0, self.ends_at - time.monotonic()) + rd.CLAIM_MARGIN_S

    def _reread(self) -> Tuple[Optional[NodeState], List[NodeState]]:
        this, cluster = self.slurm.node(self.node)  # type: ignore[attr-defined]
        if this is not None:
            self.comment = this.comment
        return this, cluster

    def _write_ours(self, ours: str) -> None:
        """Our part of the node's Comment (`ours`, "" to remove it) beside the site's, which
        is kept (verdict.with_our_comment).  Raises DoorError."""
        self.ctl.set_comment(self.node, with_our_comment(self.comment, ours))  # type: ignore[attr-defined]
        self.comment = with_our_comment(self.comment, ours)

    def _step_back(self, plan: rd.RepairPlan, why: str, step: str = "budget") -> bool:
        self.release(reread=False)
        self._log(step, NOTICE, why, plan.action)
        return False

    def _clear_stale(self, snapshot: NodeSnapshot, mark: Dict[str, str],
                     why: str = "the run that made it ended without finishing") -> bool:
        """This node's own claim, left by a run that is over (killed mid-reset: slurmd's
        HealthCheckProgram limit; or killed after it, and the node resumed since): cleared
        (only our part of the Comment), with the budget reservation it may still hold, and the
        reset it started, in the ledger before it began, counted as an attempt ("killed").
        False when the claim cannot be cleared."""
        try:
            self._write_ours("")
        except DoorError as exc:
            self._log("error", WARNING, f"cannot clear its stale repair claim ({exc}): nothing done")
            return False
        self._drop_own_slots()
        gpus = {int(g) for g in mark["gpus"].split(",") if g.isdigit()}
        killed: List[rd.LedgerRef] = []
        for gpu in snapshot.gpus:
            if gpu.index not in gpus:
                continue
            ref = rd.ledger_of(gpu)
            try:
                attempts = ledger.read_ledger(self.config.state_dir, ref)
            except (ValueError, OSError):
                continue
            if attempts and attempts[-1].outcome == "started":
                killed.append(ref)
        self._set_outcome(killed, "killed")
        self._log("stale_claim", WARNING, f"cleared its own stale repair claim ({mark['state']} of "
                                          f"GPU(s) {mark['gpus'] or 'all'} at {mark['at']}, until "
                                          f"{mark['until'] or 'no expiry'}): {why}"
                                          + (f"; its reset counts as an attempt "
                                             f"({', '.join(rd.ledger_words(r) for r in killed)})"
                                             if killed else ""))
        return True

    def release(self, reread: bool = True) -> None:
        """Remove our claim from the node's Comment, keeping the site's part (read again first,
        unless it was just read: a site's note written meanwhile stays)."""
        self._free_slot()
        try:
            if reread:
                self._reread()
            self._write_ours("")
        except DoorError as exc:
            self._log("error", WARNING, f"cannot clear the repair claim in its Comment: {exc}")

    def _set_claim(self, state: str, mark: Dict[str, str]) -> bool:
        gpus = [int(g) for g in mark["gpus"].split(",") if g.isdigit()]
        try:
            self._write_ours(rd.mark_text(state, gpus, mark["at"]))
        except DoorError as exc:
            self._log("error", WARNING, f"cannot mark the repair {state} in its Comment ({exc}): "
                                        f"nothing done", rd.REBOOT)
            return False
        return True
