"""Everything gpu-healthcheck changes in Slurm, behind one `Slurm` object per run.

    slurm = Slurm(config, environ)                  # scontrol is found and started on first use
    action = slurm.drain(node, reason, Mode.PROLOG, job_id, events, fields, store)
    action.outcome                                  # Outcome.APPLIED, PENDING, REFUSED, ...
    action = slurm.drain_remote("gpu-c", reason, act, events, fields)   # another node's drain

The drain protocol (CONTRACTS §4) is one for this node and for a node the fabric sweep or the
gang check found bad from elsewhere (drain_remote):- a drain goes in only within `drain.max_fraction` of the GPU nodes (decide.verdict.decide_drain),
  is re-checked once it is in (scontrol.hold_budget), and steps back if concurrent drains spent
  the budget first;
- a node someone else drained keeps their reason; a node we drained already keeps ours;
- when scontrol does not answer, this node's drain is kept in state_dir (PendingDrain) and
  applied by its next run, before anything else; a remote node's is not (no run of ours on that
  node would apply it): Outcome.ERROR, and the next sweep or gang check finds the node again;
- a refused drain is noted in the node's Comment, which `--cluster` lists;
- only our own drain is ever resumed, and only when the node passes in the drain's own context;
- report_only (and a sweep or gang check without --act) says what it would have done.

One object per run means one scontrol door: once scontrol has not answered, every later call of
the run (the drain, `listpids` for the shared-GPU check, the probe's time cap) knows it at once.
`ctl` may be any object with Scontrol's methods: the unit tests pass an in-process fake
(tests/lib/slurmdoor.py).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..config import Config
from ..decide.verdict import (DrainDecision, NodeState, decide_drain, gpu_nodes, is_ours,
                              may_resume, refused_comment, refused_reason, with_our_comment)
from ..logmodel import KernelLogPosition
from ..model import (CRIT, ERR, INFO, NOTICE, WARNING, DoorError, Finding, LogEvent, Mode, NodeAction,
                     NodeSnapshot, Outcome)
from ..staterecords import OurDrain, PendingDrain
from ..text import iso_utc
from .state import StateStore, clear_our_drain, read_our_drain, write_our_drain

# Reasons slurmctld writes itself when our prolog/epilog exits non-zero: a pending drain of ours
# replaces them, since they stand for our own failed drain.
SLURM_OWN_REASONS = ("Prolog error", "Epilog error")


class Slurm:
    """The run's door to slurmctld: scontrol, created on first use so a healthy prolog never
    spawns a process, and every change this tool makes to a node or a job."""

    def __init__(self, config: Config, environ: Mapping[str, str], ctl: Any = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.environ = environ
        self._ctl: Any = ctl
        self._sleep = sleep  # the wait before the budget's re-read (scontrol.hold_budget)

    @property
    def ctl(self) -> Any:
        if self._ctl is None:
            from .scontrol import Scontrol, find_scontrol

            self._ctl = Scontrol(find_scontrol(self.config.scontrol, self.environ),
                                 self.config.scontrol_timeout_s)
        return self._ctl

    def unanswered(self) -> bool:
        """Whether scontrol has already failed to answer in this run (later calls fail at once)."""
        return self._ctl is not None and bool(self._ctl.unanswered)

    def node(self, name: str) -> Tuple[Optional[NodeState], List[NodeState]]:
        """This node's state and every node's (one `scontrol show nodes`).  Raises DoorError
        (ScontrolError) when scontrol does not answer."""
        nodes = self.ctl.show_nodes()
        return next((n for n in nodes if n.name == name), None), nodes

    def listpids(self, node: str) -> Dict[int, str]:
        """pid -> job id of what slurmd says runs on `node`.  Raises DoorError (ScontrolError)."""
        return self.ctl.listpids(node)  # type: ignore[no-any-return]

    # --- draining ----------------------------------------------------------------------

    def drain(self, store: StateStore, node: str, reason: str, mode: Mode, job_id: Optional[str],
              events: List[LogEvent], fields: Dict[str, str], replace_slurm_reason: bool = False,
              counters: Tuple[Tuple[str, int], ...] = (), found: Tuple[str, Tuple[str, ...]] = ("quick", ())
              ) -> NodeAction:
        """Drain through scontrol, within the budget; on failure leave a pending drain.
        `found`: the level that found the fault and the checks that drain (decide.levels),
        kept in the note of our drain: what a resume must pass again."""
        try:
            this, nodes = self.node(node)
            if this is None:
                from .scontrol import ScontrolError

                raise ScontrolError(["scontrol", "show", "nodes"], f"node {node} not in the output")
            if replace_slurm_reason and this.drained and (this.reason or "").startswith(SLURM_OWN_REASONS):
                self._as_ours(store, node, reason, counters, events,
                              lambda: self.ctl.set_reason(node, reason), found)
                events.append(LogEvent("drain", CRIT, f"drained {node}: {reason} (replacing Slurm's "
                                                      f"{this.reason!r} left by our pending drain)",
                                       fields, Outcome.APPLIED))
                return NodeAction("drain", reason, outcome=Outcome.APPLIED)
            max_fraction = self.config.drain.max_fraction
            decision = decide_drain(this, nodes, max_fraction)
            if decision is DrainDecision.REFUSED:
                ours = sum(1 for n in nodes if n.drained and is_ours(n.reason))
                return self._refused(node, reason, events, fields,
                                     f"drain of {node} refused: {ours} of {len(gpu_nodes(nodes))} GPU "
                                     f"nodes already drained by gpu-healthcheck, drain.max_fraction = "
                                     f"{max_fraction}; would have drained with: {reason}", this.comment)
            if decision is DrainDecision.ADMIN_OWNED:
                message = f"{node} is already drained by someone else ({this.reason}); their reason is kept"
                events.append(LogEvent("drain", WARNING, message + f"; ours would be: {reason}",
                                       fields, Outcome.KEPT))
                return NodeAction("none", reason, detail=message, outcome=Outcome.ADMIN_OWNED)
            if decision is DrainDecision.ALREADY_OURS:
                self._note_our_drain(store, node, this.reason or reason, counters, events, found,
                                     merge=True)
                message = f"{node} is already drained by gpu-healthcheck ({this.reason})"
                events.append(LogEvent("drain", NOTICE, message, fields, Outcome.KEPT))
                return NodeAction("none", reason, detail=message, outcome=Outcome.ALREADY_OURS)
            noted = self._as_ours(store, node, reason, counters, events,
                                  lambda: self.ctl.drain(node, reason), found)
            stepped_back = self._hold_budget(node, reason, events, fields, this.comment)
            if stepped_back is not None:
                self._unnote(store, noted, node, events)
                return stepped_back
        except DoorError as exc:
            return self._keep_pending(store, node, reason, mode, job_id, events, fields, exc, found)
        events.append(LogEvent("drain", CRIT, f"drained {node}: {reason}", fields, Outcome.APPLIED))
        if job_id:
            self.admin_comment(job_id, reason, events)
        return NodeAction("drain", reason, outcome=Outcome.APPLIED)

    def drain_remote(self, node: str, reason: str, act: bool, events: List[LogEvent],
                     fields: Dict[str, str]) -> NodeAction:
        """Drain another node (one the fabric sweep or the gang check found bad), by the same
        rules: within the budget (decided, then held), never over an admin's reason, and only
        said under `drain.report_only` or without `act`.  A refusal is noted in the node's
        Comment after the site's part of it.  Every step leaves a LogEvent; the outcome is one of
        APPLIED, REFUSED, ADMIN_OWNED, ALREADY_OURS, REPORT_ONLY or ERROR (detail: scontrol's
        error); no pending drain is kept for a node this run is not on."""
        fields = dict(fields, SLURMD_NODENAME=node)
        if not act or self.config.drain.report_only:
            why = "report_only" if act else "without --act"
            events.append(LogEvent("drain", WARNING, f"{why}: would drain {node}: {reason}", fields,
                                   Outcome.REPORT_ONLY))
            return NodeAction("none", reason, dry_run=True, outcome=Outcome.REPORT_ONLY)
        try:
            this, nodes = self.node(node)
            this = this or NodeState(node, "UNKNOWN")
            decision = decide_drain(this, nodes, self.config.drain.max_fraction)
            if decision is DrainDecision.ADMIN_OWNED:
                events.append(LogEvent("drain", WARNING, f"{node} is already drained by someone else "
                                                         f"({this.reason}); kept. Ours would be: {reason}",
                                       fields, Outcome.KEPT))
                return NodeAction("none", reason, outcome=Outcome.ADMIN_OWNED)
            if decision is DrainDecision.ALREADY_OURS:
                return NodeAction("none", this.reason or reason, outcome=Outcome.ALREADY_OURS)
            if decision is DrainDecision.APPLY:
                from .scontrol import hold_budget

                self.ctl.drain(node, reason)
                if hold_budget(self.ctl, node, reason, self.config.drain.max_fraction, sleep=self._sleep).kept:
                    events.append(LogEvent("drain", CRIT, f"drained {node}: {reason}", fields, Outcome.APPLIED))
                    return NodeAction("drain", reason, outcome=Outcome.APPLIED)
            # the node runs jobs, so the refusal is noted in its Comment, after the site's own note
            # (a ticket number, a word for the next admin), which is kept as it is
            self.ctl.set_comment(node, with_our_comment(this.comment, refused_comment(reason, iso_utc(time.time()))))
            events.append(LogEvent("refused", CRIT, f"drain of {node} refused: drain.max_fraction = "
                                                    f"{self.config.drain.max_fraction}; would have drained "
                                                    f"with: {reason}", fields, Outcome.REFUSED))
            return NodeAction("none", reason, outcome=Outcome.REFUSED)
        except DoorError as exc:
            events.append(LogEvent("error", ERR, f"cannot drain {node}: {exc}; reason: {reason}", fields))
            return NodeAction("none", reason, detail=str(exc), outcome=Outcome.ERROR)

    def _as_ours(self, store: StateStore, node: str, reason: str, counters: Tuple[Tuple[str, int], ...],
                 events: List[LogEvent], change: Callable[[], None],
                 found: Tuple[str, Tuple[str, ...]]) -> bool:
        """Note the drain as ours, then make the change that drains.  The note goes first: a
        run killed between the two (SIGKILL at the prolog's timeout) must not leave our drain
        looking like an admin's, or the admin's resume would acknowledge nothing and the next
        run drain the node again.  A change that fails takes the note with it."""
        noted = self._note_our_drain(store, node, reason, counters, events, found)
        try:
            change()
        except DoorError:
            self._unnote(store, noted, node, events)
            raise
        return noted

    def _note_our_drain(self, store: StateStore, node: str, reason: str,
                        counters: Tuple[Tuple[str, int], ...], events: List[LogEvent],
                        found: Tuple[str, Tuple[str, ...]] = ("quick", ()), merge: bool = False) -> bool:
        """Note the drain as ours (OurDrain), with where the kernel log stands: a later run tells
        by it that an admin resumed it, or reset a GPU, and so dealt with the Xids up to here;
        and with the level and checks that found it (`found`).  `merge`: the node is drained by
        us already, so the note keeps the deepest level and every check seen since the drain (a
        quick run's finding must not make a deep drain resumable by the next quick pass).
        False (and an error logged) when the note cannot be written: the drain still goes in."""
        from ..decide.levels import highest
        from ..read.kernlog import position_now

        level, checks = found
        position = position_now(self.config.kernel_log)
        drained_here = position
        earlier = read_our_drain(store) if merge else None
        if earlier is not None and earlier.node == node:
            level = highest(earlier.level, level)
            checks = tuple(dict.fromkeys(earlier.checks + checks))
            drained_here = earlier.drain_position or earlier.position or position
        note = OurDrain(node=node, reason=reason, drained_at=time.time(), volatile_ecc=counters,
                        position=position, level=level, checks=checks, drain_position=drained_here)
        return _stored(events, ERR, lambda: write_our_drain(store, note),
                       f"cannot note the drain of {node} as ours in {store.state_dir}: {{exc}}; an "
                       f"admin's resume of it will not acknowledge its Xids (gpu-healthcheck --ack does)")

    def _unnote(self, store: StateStore, noted: bool, node: str, events: List[LogEvent]) -> None:
        """The drain did not go in (or stepped back): the note written before it goes."""
        if noted:
            _stored(events, ERR, lambda: clear_our_drain(store),
                    f"cannot remove the note of a drain of {node} that did not go in "
                    f"({store.state_dir}: {{exc}}); the next resume of {node} acknowledges its Xids")

    def _keep_pending(self, store: StateStore, node: str, reason: str, mode: Mode,
                      job_id: Optional[str], events: List[LogEvent], fields: Dict[str, str],
                      exc: DoorError, found: Tuple[str, Tuple[str, ...]]) -> NodeAction:
        pending = PendingDrain(reason=reason, node=node, mode=mode.value, job_id=job_id,
                               created_at=time.time(), level=found[0], checks=found[1])
        earlier, _ = store.read_pending()
        try:
            if earlier is not None and earlier.node == node:
                # the first fault is the one to name (a failed prolog is followed by an epilog)
                kept = f"an earlier pending drain is kept in {store.state_dir}: {earlier.reason}"
            else:
                store.write_pending(pending)
                kept = f"pending drain kept in {store.state_dir} for the next run"
        except OSError as write_exc:
            kept = f"and the pending drain could not be written either: {write_exc}"
        message = f"cannot drain {node} now ({exc}); {kept}; reason: {reason}"
        events.append(LogEvent("pending", CRIT, message, fields, Outcome.PENDING))
        return NodeAction("drain", reason, detail=message, outcome=Outcome.PENDING)

    def _hold_budget(self, node: str, reason: str, events: List[LogEvent],
                     fields: Dict[str, str], comment: Optional[str]) -> Optional[NodeAction]:
        """Our drain is in: re-read and step back if concurrent drains took the budget first.
        None when the drain stands."""
        from .scontrol import hold_budget

        max_fraction = self.config.drain.max_fraction
        try:
            check = hold_budget(self.ctl, node, reason, max_fraction, sleep=self._sleep)
        except DoorError as exc:
            events.append(LogEvent("error", ERR, f"drained {node}, but the drain budget could not be "
                                                 f"re-checked ({exc}); the drain stays", fields))
            return None
        if check.kept:
            return None
        first = ", ".join(check.ahead) or "earlier drains"
        if not check.resumed:
            message = (f"{node} is past the drain budget ({check.drained} of {check.total} nodes drained "
                       f"by gpu-healthcheck, drain.max_fraction = {max_fraction}, {first} first), but "
                       f"its reason is no longer ours; left as it is")
            events.append(LogEvent("drain", WARNING, message, fields, Outcome.KEPT))
            return NodeAction("none", reason, detail=message, outcome=Outcome.ADMIN_OWNED)
        return self._refused(node, reason, events, fields,
                             f"drain of {node} refused: {check.drained} of {check.total} GPU nodes "
                             f"drained by gpu-healthcheck at once, drain.max_fraction = {max_fraction}; "
                             f"{first} drained first, so {node} resumed itself; would have drained "
                             f"with: {reason}", comment)

    def _refused(self, node: str, reason: str, events: List[LogEvent], fields: Dict[str, str],
                 message: str, comment: Optional[str]) -> NodeAction:
        """A drain the budget refused: logged critical, noted on the node (--cluster lists it)."""
        events.append(LogEvent("refused", CRIT, message, fields, Outcome.REFUSED))
        # The node runs jobs, so its Reason stays empty: the note goes in its Comment (best
        # effort), beside what the site keeps there
        try:
            self.ctl.set_comment(node, with_our_comment(comment, refused_comment(reason, iso_utc(time.time()))))
        except DoorError as exc:
            events.append(LogEvent("error", WARNING, f"cannot note the refused drain in the Comment "
                                                     f"of {node}: {exc}"))
        return NodeAction("none", reason, detail=message, outcome=Outcome.REFUSED)

    def admin_comment(self, job_id: str, reason: str, events: List[LogEvent]) -> None:
        """Tie the job's own record to the GPU at fault; best effort, bounded by the timeout."""
        try:
            self.ctl.set_admin_comment(job_id, reason)
        except DoorError as exc:
            events.append(LogEvent("error", WARNING, f"cannot set AdminComment of job {job_id}: {exc}"))

    def apply_pending(self, store: StateStore, node: str, events: List[LogEvent]) -> Optional[str]:
        """A drain an earlier run could not apply goes first.  Returns its reason if applied."""
        pending, error = store.read_pending()
        if error:
            events.append(LogEvent("error", ERR, f"{error}; ignoring it"))
            return None
        if pending is None or pending.node != node:
            return None
        fields = {"GPU_HEALTHCHECK_PENDING_FROM": pending.mode, "SLURMD_NODENAME": node}
        if pending.job_id:
            fields["SLURM_JOB_ID"] = pending.job_id
        try:
            this, _ = self.node(node)
        except DoorError as exc:
            events.append(LogEvent("pending", CRIT, f"cannot apply the pending drain of {node} yet "
                                                    f"({exc}); kept: {pending.reason}", fields))
            return None
        if this is not None and not this.drained:
            # The pending drain stood for a node that our failed exit took out of service.  It is
            # in service now: an admin resumed it (or Slurm never drained it, as after
            # HealthCheckProgram).  Applying it would undo the admin's decision with an old
            # verdict; this run's own checks decide instead, and drain again if the fault is there.
            store.clear_pending(expected=pending)
            events.append(LogEvent("pending", WARNING, f"pending drain of {node} from "
                                                       f"{iso_utc(pending.created_at)} dropped: the node "
                                                       f"is in service ({this.state}), so its state "
                                                       f"changed after the drain was recorded; this "
                                                       f"run's checks decide. Was: {pending.reason}",
                                   fields, Outcome.DROPPED))
            return None
        action = self.drain(store, node, pending.reason, Mode(pending.mode), None, events, fields,
                            replace_slurm_reason=True, found=(pending.level, pending.checks))
        if action.outcome is Outcome.PENDING:
            return None
        store.clear_pending(expected=pending)
        if action.taken == "drain" and pending.job_id:
            self.admin_comment(pending.job_id, pending.reason, events)
        return pending.reason

    # --- resuming ----------------------------------------------------------------------

    def admin_resumed(self, store: StateStore, node: str,
                      events: List[LogEvent]) -> Optional[KernelLogPosition]:
        """Whether the node we drained is back in service: an admin resumed it, and so dealt with
        what drained it.  Returns the kernel-log position the resume deals with Xids up to (the
        last one at which a run saw the node still drained by us), else None.  Asks scontrol
        only when we hold a note of our drain (OurDrain).

        Not the log's end now: an Xid logged after the resume and before this run (a new Xid 119
        once the admin reset the GPU) is not the admin's to have dealt with."""
        from ..read.kernlog import position_now

        ours = read_our_drain(store)
        if ours is None or ours.node != node:
            return None
        seen = position_now(self.config.kernel_log)  # before asking: drained at least up to here
        try:
            this, _ = self.node(node)
        except DoorError as exc:
            events.append(LogEvent("error", WARNING, f"cannot tell whether {node} was resumed: {exc}"))
            return None
        if this is None:
            return None
        if this.drained:
            if is_ours(this.reason):
                _stored(events, WARNING, lambda: write_our_drain(store, ours._replace(position=seen)),
                        f"cannot note in {store.state_dir} that {node} is still drained by us "
                        f"({{exc}}); its resume deals with the Xids up to an earlier point")
            return None
        upto = ours.position or seen  # a note from before positions were kept: the resume seen now
        _stored(events, WARNING, lambda: clear_our_drain(store),
                f"cannot remove the note of our drain of {node} ({store.state_dir}: {{exc}}); the "
                f"next run acknowledges the same Xids again")
        events.append(LogEvent("resume", NOTICE, f"{node} was resumed by an admin after our drain "
                                                 f"({ours.reason}); the Xids logged while it was "
                                                 f"drained count as dealt with, later ones count",
                               {}, Outcome.ACKNOWLEDGED))
        return upto

    def level_short(self, store: StateStore, node: str, reason: Optional[str], level: str,
                    snapshot: NodeSnapshot) -> Optional[str]:
        """Why a pass at `level` does not undo our drain: the note says a deeper level found it
        (or the reason names a deep check), or this run did not test what drained it."""
        from ..decide.levels import short_of

        drained, checks = drain_found(store, node, reason)
        return short_of(drained, checks, level, snapshot)

    def maybe_resume(self, store: StateStore, node: str, findings: Sequence[Finding],
                     snapshot: NodeSnapshot, events: List[LogEvent], fields: Dict[str, str],
                     level: str, partial: bool) -> NodeAction:
        """`--node --act` found nothing that drains: resume our own drain if the node also passes
        in the drain's own context (prolog or epilog), and clear the note of a refused drain."""
        from ..decide.judge import judge_as_drained

        try:
            this, _ = self.node(node)
            if this is not None and refused_reason(this.comment) and not partial:
                # the refused drain's cause is gone (this full check does not drain)
                self.ctl.set_comment(node, with_our_comment(this.comment, ""))
                events.append(LogEvent("resume", NOTICE, f"{node}: a full check passes; the note of "
                                                         f"a refused drain is cleared (was: "
                                                         f"{this.comment})", fields, Outcome.CLEARED))
            if this is None or not this.drained:
                return NodeAction("none")
            context, as_drained = judge_as_drained(snapshot, self.config, this.reason, level)
            why_not = may_resume(this, findings, snapshot.gpus, partial=partial,
                                 drain_context=context, context_findings=as_drained,
                                 level_short=self.level_short(store, node, this.reason, level, snapshot))
            if why_not:
                events.append(LogEvent("resume", INFO, f"{node} stays drained: {why_not}", fields,
                                       Outcome.KEPT))
                return NodeAction("none", this.reason, detail=why_not)
            self.ctl.resume(node)
            clear_our_drain(store)
        except DoorError as exc:
            events.append(LogEvent("error", ERR, f"cannot resume {node}: {exc}", fields))
            return NodeAction("none", detail=str(exc))
        events.append(LogEvent("resume", NOTICE, f"resumed {node}: checks pass (was: {this.reason})",
                               fields, Outcome.APPLIED))
        return NodeAction("resume", this.reason, outcome=Outcome.APPLIED)


def drain_found(store: StateStore, node: str, reason: Optional[str]) -> Tuple[str, Tuple[str, ...]]:
    """(the level that found our drain, its checks): from the note of our drain, and the check
    its reason names (a deep check there means deep, whatever the note says or if it is lost)."""
    from ..decide.levels import drain_level
    from ..decide.verdict import parse_reason

    ours = read_our_drain(store)
    noted = ours if ours is not None and ours.node == node else None
    named = (parse_reason(reason or "") or {}).get("check")
    checks = tuple(dict.fromkeys((noted.checks if noted else ()) + ((named,) if named else ())))
    return drain_level(noted.level if noted else None, checks), checks


def report_only(node: str, reason: Optional[str], mode: Mode, events: List[LogEvent],
                fields: Dict[str, str]) -> NodeAction:
    """`[drain] report_only = true`: no scontrol call; say what would have been done."""
    if reason is None:
        return NodeAction("none", dry_run=True, outcome=Outcome.REPORT_ONLY)
    effect = "drain" if mode is Mode.NODE else f"drain (and fail the {mode.value})"
    message = f"report_only: would {effect} {node}: {reason}"
    events.append(LogEvent("drain", WARNING, message, fields, Outcome.REPORT_ONLY))
    return NodeAction("none", reason, dry_run=True, detail=message, outcome=Outcome.REPORT_ONLY)


def _stored(events: List[LogEvent], severity: int, write: Callable[[], None], failure: str) -> bool:
    """One change to the state store; an OSError is logged (`failure` with {exc}), never
    swallowed.  Whether it was made."""
    try:
        write()
    except OSError as exc:
        events.append(LogEvent("error", severity, failure.replace("{exc}", str(exc))))
        return False
    return True

