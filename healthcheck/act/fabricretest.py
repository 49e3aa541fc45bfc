"""The fabric sweep's re-test of nodes the repair loop rebooted for their fabric (the decisions
are decide/fabricretest.py's; commands/internodesweep.py runs the rounds).

    retester = Retester(ctl, config, sweep_id, collective, events)
    retester.recover(nodes)                 # fabric_testing marks a killed sweep left
    why = retester.hold(node)               # None: held in its reservation and resumed
    runner.reservations = retester.reservations
    ... the sweep's rounds, the node a suspect of the partner rounds ...
    action = retester.finish(outcome, results)   # a SweepAction: resumed | drained | rma | kept | error
    retester.abandon("the sweep stopped: ...")           # every held node not finished: drained again

Every scontrol call goes through the one door (act/scontrol.py).  A node is held by a
reservation of its own before it is resumed, and the reservation goes only once the node is
drained again or has passed, so no job but the sweep's starts on it, and a sweep killed in
between (or an scontrol that did not answer) leaves it held, never in service.
"""

from __future__ import annotations

import os
import pwd
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from ..config import Config
from ..decide import fabricretest as fr
from ..decide.repair import job_running
from ..decide.sweep import UNKNOWN, JobResult, NodeOutcome, RetestEnd, SweepAction
from ..decide.verdict import NodeState, is_fabric_reason, is_ours, with_our_comment
from ..model import CRIT, ERR, NOTICE, WARNING, DoorError, LogEvent, Outcome
from ..records import NamedTuple
from ..text import iso_utc

if TYPE_CHECKING:
    from .scontrol import Scontrol

# MAINT: slurmctld shows the node as in maintenance (sinfo `maint`) and accounts its time so;
# FLEX: the partner jobs that ask for the reservation may also use the partners outside it
FLAGS = "MAINT,FLEX"


class Held(NamedTuple):
    node: str
    reason: str  # its fabric reason when it was held (slurmctld's suffix removed)
    mark: fr.RetestMark
    reservation: str


class Retester:
    def __init__(self, ctl: "Scontrol", config: Config, sweep_id: str, collective: str,
                 events: List[LogEvent], output_dir: str = "") -> None:
        self.ctl, self.config, self.sweep_id, self.collective = ctl, config, sweep_id, collective
        self.events, self.output_dir = events, output_dir
        self.held: Dict[str, Held] = {}
        self.user = pwd.getpwuid(os.getuid()).pw_name

    @property
    def reservations(self) -> Dict[str, str]:
        """node -> the reservation its partner jobs run in (act.sweeprun.SlurmRunner)."""
        return {h.node: h.reservation for h in self.held.values()}

    def _log(self, kind: str, priority: int, node: str, message: str, outcome: Outcome = Outcome.NONE,
             **extra: str) -> None:
        fields = {"GPU_HEALTHCHECK_MODE": "fabric-sweep", "GPU_HEALTHCHECK_SWEEP": self.sweep_id,
                  "SLURMD_NODENAME": node, **extra}
        self.events.append(LogEvent(kind, priority, f"fabric re-test of {node}: {message}", fields, outcome))

    def _node(self, name: str) -> Optional[NodeState]:
        return next((n for n in self.ctl.show_nodes() if n.name == name), None)

    # --- a killed sweep's leftovers -------------------------------------------------------

    def recover(self, nodes: Sequence[NodeState]) -> bool:
        """Each fabric_testing mark at a sweep's start is a killed sweep's (one sweep runs at a
        time): the node still held is drained again (interrupted) and waits for its re-test
        again; a released one loses the mark.  A failure is logged and leaves it held.  Whether
        there was any (the caller reads the nodes again)."""
        found = False
        for this in nodes:
            mark = fr.parse_retest_mark(this.comment)
            if mark is None or mark.state != fr.FABRIC_TESTING:
                continue
            found = True
            name = mark.reservation or fr.reservation_name(this.name)
            try:
                plan = fr.recovery(this, self.ctl.reservation_exists(name))
                if plan.drain:
                    self.ctl.drain(this.name, fr.interrupted_reason(self.collective))
                if plan.mark:
                    self._mark(this, fr.waiting_mark(mark, iso_utc(time.time())) if plan.mark == "retest" else "")
                if plan.delete_reservation:
                    self.ctl.delete_reservation(name)
            except DoorError as exc:
                self._log("error", CRIT, this.name, f"the re-test sweep {mark.sweep or '?'} left it "
                                                    f"held ({name}), and it cannot be put back: {exc}")
                continue
            self._log("repair", WARNING, this.name, (
                f"the re-test of sweep {mark.sweep or '?'} did not finish: "
                + ("drained again and re-tested" if plan.drain else
                   "it waits for its re-test again" if plan.mark == "retest" else "its mark is dropped")),
                GPU_HEALTHCHECK_REPAIR_STEP="interrupted")
        return found

    def _mark(self, this: NodeState, ours: str) -> None:
        self.ctl.set_comment(this.name, with_our_comment(this.comment, ours))

    # --- before the rounds ---------------------------------------------------------------

    def hold(self, this: NodeState) -> Optional[str]:
        """Hold the node for its re-test: its own reservation, the fabric_testing mark, then the
        resume (only our own fabric drain, re-read first).  None when held; else why not (then
        it is as it was: drained, marked fabric_retest)."""
        mark = fr.parse_retest_mark(this.comment)
        assert mark is not None
        name = fr.reservation_name(this.name)
        try:
            if self.ctl.reservation_exists(name):
                # one of ours an earlier sweep could not delete; the node is drained: it holds nothing
                self.ctl.delete_reservation(name)
            self.ctl.create_reservation(name, [this.name], self.user, FLAGS)
        except DoorError as exc:
            return f"awaiting a fabric re-test; its reservation {name} could not be made: {exc}"
        try:
            self._mark(this, fr.testing_mark(mark, self.sweep_id, name, iso_utc(time.time())))
            now = self._node(this.name)
            if now is None or not now.drained or job_running(now) \
                    or (now.reason, now.reason_time) != (this.reason, this.reason_time):
                self._mark(this, fr.waiting_mark(mark, mark.at))
                self.ctl.delete_reservation(name)
                return f"changed since it was read (now: {now.state if now else 'gone'}, {now.reason if now else ''})"
        except DoorError as exc:
            # not resumed: drained as it was; a mark or reservation left behind is recovered
            return f"awaiting a fabric re-test; not held: {exc}"
        self.held[this.name] = Held(this.name, fr.clean_reason(this.reason), mark, name)
        try:
            self.ctl.resume(this.name)
        except DoorError as exc:
            # maybe resumed (no answer): held either way; its jobs may not start, which the
            # partner round counts as no evidence
            self._log("error", ERR, this.name, f"cannot resume it for its partner jobs: {exc}")
            return None
        self._log("resume", NOTICE, this.name, f"held in reservation {name} and resumed for its "
                                               f"partner jobs (was: {this.reason})",
                  GPU_HEALTHCHECK_REPAIR_STEP=fr.FABRIC_TESTING)
        return None

    # --- after the rounds ----------------------------------------------------------------

    def finish(self, outcome: NodeOutcome, results: Sequence[JobResult]) -> SweepAction:
        """Resume, drain again (another reboot), mark rma or keep waiting, as the re-test says;
        what was done, with the reason now."""
        held = self.held.pop(outcome.node)
        decision = fr.retest_decision(outcome, held.mark)
        reason = fr.retest_reason(decision, outcome, self.collective, held.reason)
        try:
            this = self._node(held.node)
            if this is None:
                raise DoorError(f"{held.node} is not in scontrol's node list")
            if this.drained and not (is_ours(this.reason) and is_fabric_reason(this.reason)):
                # drained meanwhile by a person, or by the node's own check: that drain stays
                self.ctl.delete_reservation(held.reservation)
                if fr.parse_retest_mark(this.comment):
                    self._mark(this, "")
                self._log("drain", WARNING, held.node, f"drained meanwhile ({this.reason}): kept; the "
                                                       f"re-test ({outcome.outcome}) is not acted on",
                          Outcome.KEPT)
                return SweepAction(this.reason, retest=RetestEnd.KEPT)
            if decision == fr.RESUME:
                if this.drained:
                    self.ctl.resume(held.node)
                self.ctl.delete_reservation(held.reservation)
            else:
                assert reason is not None
                self.ctl.drain(held.node, reason)
            ours = fr.waiting_mark(held.mark, iso_utc(time.time())) if decision == fr.KEEP else ""
            self._mark(this, ours)
            if decision != fr.RESUME:
                self.ctl.delete_reservation(held.reservation)
        except DoorError as exc:
            # the reservation is kept: the node stays held, and the next sweep drains it again
            self._log("error", CRIT, held.node, f"cannot {decision.replace('_', ' ')} it ({exc}); it "
                                                f"stays held in reservation {held.reservation} for the "
                                                f"next sweep")
            return SweepAction(reason, retest=RetestEnd.ERROR, detail=str(exc))
        return self._done(held, outcome, decision, reason, results)

    def _done(self, held: Held, outcome: NodeOutcome, decision: str, reason: Optional[str],
              results: Sequence[JobResult]) -> SweepAction:
        figures = f"{outcome.why} (partners {','.join(outcome.partners) or '-'})"
        if decision == fr.RESUME:
            self._log("resume", NOTICE, held.node, f"resumed: {figures}; was: {held.reason}", Outcome.APPLIED,
                      GPU_HEALTHCHECK_REPAIR_STEP="resumed")
            return SweepAction(None, retest=RetestEnd.RESUMED)
        if decision == fr.KEEP:
            self._log("drain", WARNING, held.node, f"no verdict ({figures}): drained again, re-tested "
                                                   f"at the next sweep: {reason}", Outcome.APPLIED)
            return SweepAction(reason, retest=RetestEnd.KEPT)
        if decision == fr.REBOOT_AGAIN:
            self._log("drain", CRIT, held.node, f"failed again ({figures}), after {held.mark.attempts} "
                                                f"of {held.mark.max_attempts} repair(s): drained for "
                                                f"another reboot: {reason}", Outcome.APPLIED)
            return SweepAction(reason, retest=RetestEnd.DRAINED)
        from .evidence import collect_fabric

        assert reason is not None
        files = collect_fabric(self.config, held.node, fr.evidence_bundle(
            outcome, results, self.sweep_id, held.mark, reason, self.output_dir), self.events)
        self._log("repair", CRIT, held.node, f"marked rma: failed again ({figures}) after "
                                             f"{held.mark.attempts} repair(s), repair.max_attempts = "
                                             f"{held.mark.max_attempts}: {reason}; evidence: "
                                             f"{', '.join(files) or 'none'}", Outcome.APPLIED,
                  GPU_HEALTHCHECK_REPAIR_STEP="rma", GPU_HEALTHCHECK_REPAIR_ACTION="rma",
                  GPU_HEALTHCHECK_EVIDENCE=" ".join(files))
        return SweepAction(reason, retest=RetestEnd.RMA)

    def abandon(self, why: str) -> Dict[str, SweepAction]:
        """Every node still held: drained again, waiting for its re-test (the sweep stopped
        before it could judge them)."""
        return {node: self.finish(NodeOutcome(node, UNKNOWN, why=why), ()) for node in list(self.held)}
