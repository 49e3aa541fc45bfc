"""The repair loop's effectors: claim the repair budget, reset GPUs, ask Slurm for a reboot, keep
the ledger, mark rma with evidence.  The decisions are decide.repair's; the flow is commands/node.py's.

    rep = Repairer(config, slurm, store, node, events, fields)
    started = rep.start(snapshot, findings, report_only)   # True: validate now (a reset was done)
    action = rep.finish(snapshot, findings, level)         # after the full check: resume or not

Every step is one LogEvent of kind "repair" (journald MESSAGE_ID, a history line, the metrics):
its GPU_HEALTHCHECK_REPAIR_STEP field says which (skipped, would_reset, would_reboot, claimed,
budget, backed_off, stale_claim, named, persistence_off, reset, reset_refused, reset_blocked, persistence_on, reboot, rebooting, booted,
reboot_timed_out, reboot_cancelled, released, would_validate, resumed, still_failing,
unvalidated, fabric_retest, rma, error), GPU_HEALTHCHECK_REPAIR_ACTION the action,
GPU_HEALTHCHECK_EVIDENCE the evidence files.

A reboot spans runs: this run claims, records the attempt (outcome "reboot") and asks Slurm
(`scontrol reboot reason=<our reason> NODE`: the DRAIN survives the boot); the runs while
slurmctld shows a reboot flag wait; the first run after slurmctld registered the boot turns
the claim into "validating" and returns True, so the full check runs and finish() resumes or
keeps it drained, as after a reset.  A reboot slurmctld timed out is left for a person.
A fabric drain (decide.fabricretest) is rebooted the same way; its check after the boot cannot
see the fabric, so a pass leaves it drained for the fabric sweep's re-test (fabric_retest).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from ..config import Config
from ..decide import repair as rd
from ..decide import verify as dv
from ..decide.verdict import FABRIC_HOLD, SUSPECT_HOLD, NodeState, drain_reason, is_ours, our_comment
from ..logmodel import KernelLogPosition
from ..model import (CRIT, ERR, INFO, NOTICE, WARNING, DoorError, Finding, LogEvent, Mode, NodeAction,
                     NodeSnapshot)
from ..text import iso_utc
from . import ledger
from .repairclaim import ClaimMixin
from .state import StateStore

if TYPE_CHECKING:  # the door is imported where a reset runs, never on a run that repairs nothing
    from .nvidiasmi import NvidiaSmi



class Repairer(ClaimMixin):
    def __init__(self, config: Config, slurm: object, store: StateStore, node: str,
                 events: List[LogEvent], fields: Dict[str, str],
                 ends_at: Optional[float] = None) -> None:
        """`ends_at`: the run's deadline (time.monotonic()), which nvidia-smi's calls and the
        claim's expiry fit; None: the run has no budget (act_budget_s stands for one)."""
        self.config, self.slurm, self.store, self.node = config, slurm, store, node
        self.events, self.fields = events, fields
        self.ends_at = ends_at if ends_at is not None else time.monotonic() + config.act_budget_s
        self.plan: Optional[rd.RepairPlan] = None
        self.unreached: Optional[str] = None  # why slurmctld did not answer: nothing was done
        self.drained_at: Optional[str] = None
        self.reason: Optional[str] = None  # the node's reason when this run read it
        self.seen: Optional[NodeState] = None  # the node as the repair was decided on
        self.comment: Optional[str] = None  # its Comment as last read (the site's part is kept)
        self.rebooted: Optional[Dict[str, rd.LedgerRef]] = None  # after a boot: key -> each ledger of that reboot
        self._level: Optional[str] = None  # validation_level, once known
        # where the kernel log stood once our reset returned: the Xids up to here are the
        # reset's to have dealt with, later ones count (act.xidack.acknowledge_resets)
        self.reset_at: Optional[KernelLogPosition] = None
        self.slot: Optional[str] = None  # the budget's slot reservation this run holds
        self.read_refs: List[rd.LedgerRef] = []  # the ledgers the decision read (the lemon rule reads them again)

    def _log(self, step: str, priority: int, message: str, action: str = "",
             **extra: str) -> None:
        fields = {**self.fields, "GPU_HEALTHCHECK_REPAIR_STEP": step,
                  "GPU_HEALTHCHECK_REPAIR_ACTION": action, **extra}
        self.events.append(LogEvent("repair", priority, f"repair {self.node}: {message}", fields))

    def validation_level(self) -> str:
        """The level the repair is proved at: the one that found the fault (the note of our
        drain, the check its reason names), at least full (decide.levels.validation_level)."""
        from ..decide.levels import validation_level
        from .slurm import drain_found

        if self._level is None:  # once: the resume clears the note it is read from
            self._level = validation_level(drain_found(self.store, self.node, self.reason)[0])
        return self._level

    @property
    def ctl(self) -> object:
        return self.slurm.ctl  # type: ignore[attr-defined]

    def start(self, snapshot: NodeSnapshot, findings: Sequence[Finding], report_only: bool,
              level: str = "quick") -> bool:
        """Decide, claim and act.  True when GPUs were reset and must be proved healthy now.
        The findings decided on are the run's and those of the context that drained the node
        (decide.judge.as_drained: a prolog's leaked memory is only a warning to `--node`, but it
        is what drained the node and what the resume judges, so it is what gets repaired)."""
        try:
            this, cluster = self.slurm.node(self.node)  # type: ignore[attr-defined]
        except DoorError as exc:
            self.unreached = str(exc)
            self._log("skipped", WARNING, f"slurmctld did not answer ({exc}): nothing done")
            return False
        if this is None:
            self._log("skipped", WARNING, "not in scontrol's node list: nothing done")
            return False
        self.drained_at, self.reason = this.reason_time, this.reason
        self.seen, self.comment = this, this.comment
        mark = rd.parse_mark(this.comment)
        stale = rd.stale_own_claim(mark, time.time()) if mark else None
        if rd.claim_outlived(this, mark):  # a killed run's claim on a node resumed since
            assert mark is not None
            if not report_only:
                self._clear_stale(snapshot, mark, f"the node is no longer drained by us "
                                                  f"(State={this.state}, Reason={this.reason})")
            mark = stale = None
        if mark and stale is not None:  # a reset claim of this node, or an unfinished ask
            if not stale:
                self._log("skipped", INFO, f"a repair of this node is under way (its claim: "
                                           f"{our_comment(this.comment)}): nothing done",
                          GPU_HEALTHCHECK_REPAIR_STATE=mark["state"])
                return False
            if not report_only and not self._clear_stale(snapshot, mark):
                return False
        elif mark and mark["state"] in rd.AFTER_REBOOT:
            return self.after_reboot(snapshot, this, mark, report_only)
        if rd.stale_mark(this, mark):
            self.release()  # resumed, an admin's or rma since: the blocked (or re-test) mark is stale
        from ..decide.judge import as_drained

        findings = as_drained(findings, snapshot, self.config, this.reason, level)
        snapshot = self._name_unseen(snapshot, report_only)
        gpus = snapshot.gpus
        now = time.time()
        self.read_refs = list(rd.ledgers_to_read(gpus, snapshot.missing_gpus, self.node))
        try:
            attempts = ledger.read_ledgers(self.config.state_dir, self.read_refs)
            for key in list(attempts):
                attempts[key] = self._from_the_future(key, attempts[key], now)
        except (ValueError, OSError) as exc:
            self._log("skipped", ERR, f"{exc}: nothing repaired until it is fixed")
            return False
        plan = rd.decide_repair(this, cluster, findings, gpus, attempts, now,
                                self.config.repair, _nvswitch(snapshot),
                                excluded=[index for index, _ in snapshot.out_of_service],
                                missing=snapshot.missing_gpus)
        self.plan = plan
        if plan.action == rd.NONE:
            if this.drained:
                self._log("skipped", INFO, plan.why, GPU_HEALTHCHECK_REPAIR_STATE=plan.state or "drained")
            return False
        if report_only:
            what = {rd.RESET: f"would reset GPU(s) {_list(plan.gpus)}", rd.REBOOT: "would reboot",
                    rd.RMA: "would mark rma", dv.VERIFY: "would verify it at --level deep"}[plan.action]
            self._log(f"would_{plan.action}", WARNING, f"report_only: {what}: {plan.why}", plan.action)
            return False
        if plan.action == rd.RMA:
            self.mark_rma(snapshot, plan.rma_ledger, plan.attempts, plan.trigger)
            return False
        if not self._claim(plan):
            return False
        if plan.action == dv.VERIFY:
            self._log("verifying", NOTICE, f"drained for verification ({self.reason}): proving it "
                                           f"with --level {self.validation_level()}", dv.VERIFY,
                      GPU_HEALTHCHECK_REPAIR_STATE=dv.VERIFYING)
            return True
        if plan.action == rd.REBOOT:
            return self._reboot(snapshot, plan)
        return self._reset(snapshot, plan)

    def _name_unseen(self, snapshot: NodeSnapshot, report_only: bool) -> NodeSnapshot:
        """A lost GPU no run had listed (no serial, UUID or address) named by what the node
        still knows (decide.ledgers.name_unseen): the address the driver logged in its Xid 79
        line, checked against the gres layout.  The address goes into known-gpus.json, so that
        after the boot the GPU still missing is that one (its ledger, its RMA), and how it was
        named (or why nothing names it: then the node's ledger counts) into the evidence."""
        from ..read.gres import gres_conf_path, read_layout

        if report_only or not any(g.lost is not None and not (g.serial or g.uuid or g.pci_bus_id)
                                  for g in snapshot.gpus):
            return snapshot  # nothing to name (the layout is read only for a nameless lost GPU)
        layout = read_layout(gres_conf_path(self.config.gres_conf, dict(os.environ)), self.node,
                             self.config.state_dir)
        naming = rd.name_unseen(snapshot.gpus, snapshot.kernel_log.events, layout.files)
        if naming is None:
            return snapshot
        named = tuple(g._replace(pci_bus_id=naming.pci) if g.index == naming.gpu and naming.pci else g
                      for g in snapshot.gpus)
        ref = rd.ledger_of(named[naming.gpu]) if naming.pci else rd.node_ledger(self.node)
        from .evidence import write_naming
        from .state import remember_lost

        try:
            if naming.pci:
                remember_lost(self.store, naming.gpu, naming.pci)
        except OSError as exc:
            self._log("error", WARNING, f"cannot keep the lost GPU's address {naming.pci} in "
                                        f"known-gpus.json ({exc}): after the boot it is not named")
        if write_naming(self.config, self.node, ref.key, naming.as_json(), self.events):
            self._log("named", NOTICE, f"GPU {naming.gpu} is lost and no run had listed it: "
                      + ("; ".join(naming.named_by) + f": counted as {rd.ledger_words(ref._replace(gpu=None))}"
                         if naming.pci else naming.why_node))
        return snapshot._replace(gpus=named)

    def _from_the_future(self, key: str, attempts: List[rd.Attempt], now: float) -> List[rd.Attempt]:
        """Attempts stamped after now (the clock stepped back since) are restamped now, in the
        ledger too, and logged: read as they are, they would hold the node in cooldown until
        the clock caught up.  Raises OSError or ValueError when the ledger cannot be written."""
        future = rd.from_the_future(attempts, now)
        if not future:
            return attempts
        fixed = [a._replace(at=now) if i in future else a for i, a in enumerate(attempts)]
        path = ledger.write_ledger(self.config.state_dir, key, fixed)
        for i in future:
            self._log("error", WARNING, f"{path}: attempt {i + 1} is stamped {iso_utc(attempts[i].at)}, "
                                        f"{attempts[i].at - now:.0f} s after now (the clock stepped "
                                        f"back?): counted as made now, {iso_utc(now)}")
        return fixed

    # --- actions -------------------------------------------------------------------------

    def _record(self, snapshot: NodeSnapshot, plan: rd.RepairPlan, outcome: str) -> List[rd.LedgerRef]:
        """The attempt, in the ledgers of what was repaired only (plan.ledgers): never in every
        listed GPU's, which would send a healthy GPU 0 to RMA for another's fault.  The
        ledgers written."""
        trigger = plan.trigger
        cause = f"{trigger.check}={trigger.value}" if trigger is not None else ""
        for ref in plan.ledgers:
            ledger.append_attempt(self.config.state_dir, ref, rd.Attempt(
                at=time.time(), action=plan.action, trigger=cause, outcome=outcome, node=self.node,
                gpu=ref.gpu if ref.gpu is not None else -1, pci=ref.pci, serial=ref.serial))
        return list(plan.ledgers)

    def _reset(self, snapshot: NodeSnapshot, plan: rd.RepairPlan) -> bool:
        """Reset plan.gpus through nvidia-smi.  A reset that cannot run (no nvidia-smi at its
        path, or a process holding a GPU) is blocked: nothing is changed, and it is no attempt
        (decide.ledgers.counted), or a GPU would go to RMA with no reset ever done."""
        from .nvidiasmi import NvidiaSmi, find_nvidia_smi

        path = find_nvidia_smi(self.config.nvidia_smi, os.environ)
        if not os.access(path, os.X_OK):
            return self._blocked(snapshot, plan, rd.NO_NVIDIA_SMI, "",
                                 f"nvidia-smi is not at {path} (config key nvidia_smi)")
        holders = self._holders(snapshot, plan.gpus)
        if holders:
            return self._blocked(snapshot, plan, rd.IN_USE, holders, f"held by {holders}")
        # The ledger first ("started"), its outcome after: a run killed in the middle of the
        # reset (slurmd's HealthCheckProgram limit) has still made an attempt, and a GPU whose
        # reset hangs must not get one more for ever.  A ledger that cannot be written: no reset.
        try:
            refs = self._record(snapshot, plan, "started")
        except (ValueError, OSError) as exc:
            self.release()
            self._log("error", ERR, f"cannot write the repair ledger ({exc}): no reset", rd.RESET)
            return False
        smi = NvidiaSmi(path, self.config.nvidia_smi_timeout_s, self.ends_at)
        # persistence mode holds the device like a client and the driver refuses the reset
        # (NVIDIA/NVSentinel#1690): off for the reset, back on after, whatever the reset did
        persistent = [g.index for g in snapshot.gpus if g.index in plan.gpus and g.persistence_mode]
        self._persistence(smi, persistent, False)
        done = smi.reset(plan.gpus)
        if done.ok:
            from ..read.kernlog import position_now

            self.reset_at = position_now(self.config.kernel_log)
        in_use = not done.ok and rd.IN_USE_TEXT in done.message
        if not in_use:
            self._set_outcome(refs, "reset" if done.ok else f"refused: {done.message[:200]}")
        if done.ok:
            self._log("reset", NOTICE, f"reset GPU(s) {_list(plan.gpus)} ({done.message}); proving "
                                       f"them healthy with --level {self.validation_level()}", rd.RESET)
        elif not in_use:
            self._log("reset_refused", ERR, f"nvidia-smi refused to reset GPU(s) {_list(plan.gpus)}: "
                                            f"{done.message}", rd.RESET)
        self._persistence(smi, persistent, True)
        if in_use:  # a client nvidia-smi does not name: who holds it, if we can see it now
            holders = self._holders(snapshot, plan.gpus) or "a client nvidia-smi does not name"
            return self._blocked(snapshot, plan, rd.IN_USE, holders,
                                 f"nvidia-smi: {done.message[:300]}; held by {holders}", refs)
        if not done.ok:
            self.release()
        return done.ok

    def _holders(self, snapshot: NodeSnapshot, gpus: Sequence[int]) -> str:
        """What holds the GPUs to reset, in words: the processes NVML lists on them and those
        with their device file open (nv-hostengine, DCGM's host engine, holds the device and
        is no NVML process); "" for none seen."""
        from ..read.procinfo import device_holders

        found: Dict[int, str] = {}
        targets = [g for g in snapshot.gpus if g.index in gpus]
        for g in targets:
            for proc in (g.processes or ()) + (g.graphics_processes or ()):
                found.setdefault(proc.pid, proc.command or "?")
        devices = [f"/dev/nvidia{g.minor_number}" for g in targets if g.minor_number is not None]
        for pid, command in device_holders(devices, self.config.proc_root, skip=(os.getpid(),)):
            found.setdefault(pid, command)
        words = []
        for pid, command in sorted(found.items()):
            name = os.path.basename(command.split(" ", 1)[0]) or "?"
            hint = " (DCGM's host engine: stop nvidia-dcgm, or `nv-hostengine -t`)" if name == "nv-hostengine" else ""
            words.append(f"{name} pid {pid}{hint}")
        return ", ".join(words)

    def _blocked(self, snapshot: NodeSnapshot, plan: rd.RepairPlan, cause: str, holders: str,
                 why: str, recorded: Sequence[rd.LedgerRef] = ()) -> bool:
        """A reset that did not run: logged and kept in the ledger as `blocked: ...` (no
        attempt; `recorded`: the ledgers that hold it as started already), the node's Comment
        says `repair blocked` (--cluster; no budget held)."""
        outcome = f"{rd.BLOCKED}: {why}"[:300]
        self._free_slot()  # a blocked node holds no budget
        if recorded:
            self._set_outcome(recorded, outcome)
        else:
            try:
                self._record(snapshot, plan, outcome)
            except (ValueError, OSError) as exc:
                self._log("error", ERR, f"cannot write the repair ledger: {exc}", plan.action)
        mark = rd.mark_text(rd.BLOCKED, plan.gpus, iso_utc(time.time()))
        try:
            self._write_ours(f"{mark} by={_token(holders or cause)}"[:250])
        except DoorError as exc:
            self._log("error", WARNING, f"cannot mark the repair blocked in its Comment: {exc}", rd.RESET)
        self._log("reset_blocked", ERR, f"repair blocked: no reset of GPU(s) {_list(plan.gpus)} was "
                                        f"run, {why}; not counted as an attempt, tried again at the "
                                        f"next check", rd.RESET, GPU_HEALTHCHECK_REPAIR_STATE=rd.BLOCKED,
                  GPU_HEALTHCHECK_REPAIR_BLOCKED=cause, GPU_HEALTHCHECK_REPAIR_HELD_BY=holders)
        return False

    def _persistence(self, smi: NvidiaSmi, gpus: Sequence[int], enabled: bool) -> None:
        """Persistence mode of `gpus` off (before the reset) or on again (after), logged; a mode
        left off is an error entry naming the command that sets it again."""
        if not gpus:
            return
        done = smi.persistence(gpus, enabled)
        which = _list(gpus)
        if done.ok:
            self._log("persistence_on" if enabled else "persistence_off", NOTICE,
                      f"persistence mode of GPU(s) {which} turned "
                      f"{'on again' if enabled else 'off for the reset'}", rd.RESET)
        elif enabled:
            self._log("error", ERR, f"persistence mode of GPU(s) {which} is left OFF: {done.message}; "
                                    f"set it again with `nvidia-smi -pm 1 -i {which}`", rd.RESET)
        else:
            self._log("error", WARNING, f"cannot turn persistence mode off on GPU(s) {which}: "
                                        f"{done.message}", rd.RESET)

    def _reboot(self, snapshot: NodeSnapshot, plan: rd.RepairPlan) -> bool:
        """Record the attempt, then ask Slurm, keeping our drain reason (its GPU, check and
        context stay what judge_as_drained reads after the boot).  The ledger goes first: a
        reboot that happens must be counted, or a GPU that keeps falling off the bus would be
        rebooted for ever."""
        try:
            self._record(snapshot, plan, "reboot")
        except (ValueError, OSError) as exc:
            self.release()
            self._log("error", ERR, f"cannot write the repair ledger ({exc}): no reboot", rd.REBOOT)
            return False
        try:
            self.ctl.reboot(self.node, self.reason or drain_reason(  # type: ignore[attr-defined]
                [plan.trigger] if plan.trigger else [], snapshot.gpus, Mode.NODE, None) or rd.REPAIR_MARK)
        except DoorError as exc:
            self.release()
            self._set_outcome(list(plan.ledgers), f"refused: {str(exc)[:200]}")
            self._log("error", ERR, f"cannot ask Slurm for a reboot: {exc}", rd.REBOOT)
            return False
        self._free_slot()  # the reboot claim in the Comment holds the budget from here
        self._log("reboot", NOTICE, f"asked Slurm to reboot it (scontrol reboot, our reason kept; "
                                    f"the site's RebootProgram runs once it is idle): {plan.why}",
                  rd.REBOOT)
        return False

    def _set_outcome(self, keys: Sequence[rd.LedgerRef], outcome: str) -> None:
        for key in keys:
            try:
                ledger.update_last(self.config.state_dir, key, outcome)
            except (ValueError, OSError) as exc:
                self._log("error", ERR, f"cannot write the repair ledger {key.key}: {exc}",
                          self.plan.action if self.plan else "")

    # --- after the full check --------------------------------------------------------------

    def finish(self, snapshot: NodeSnapshot, findings: Sequence[Finding], action: NodeAction) -> NodeAction:
        """The full check after a repair has run and `action` is maybe_resume's answer.  Each
        repaired ledger is judged by the check's own findings on its GPU: one that passed is
        "passed" even while another still fails, and only one that still fails can be sent to
        RMA, never one chosen by its count of attempts alone."""
        plan = self.plan
        assert plan is not None
        refs = list(self.rebooted.values()) if self.rebooted is not None else list(plan.ledgers)
        if action.detail == FABRIC_HOLD:  # its own checks pass; only the fabric sweep can tell
            return self.await_retest(refs, action)
        if action.detail == SUSPECT_HOLD:  # it passes at the deep level: a suspect's verification is over
            from .verify import verified

            return verified(self, refs, action)
        self.release()
        if action.taken == "resume":
            for ref in refs:
                ledger.update_last(self.config.state_dir, ref, "resumed")
            seconds = _since(self.drained_at)
            self._log("resumed", NOTICE, f"{plan.action} worked: the check at --level "
                                         f"{self.validation_level()} passes and the node is resumed",
                      plan.action,
                      GPU_HEALTHCHECK_DRAIN_TO_RESUME_S=f"{seconds:.0f}" if seconds is not None else "")
            return action
        unknown = self._inconclusive(snapshot, findings)
        if unknown is not None:
            outcome = f"unvalidated: {unknown.check}"
            for ref in refs:
                ledger.update_last(self.config.state_dir, ref, outcome)
            self._log("unvalidated", WARNING, f"the check after the {plan.action} could not judge it "
                                              f"({unknown.check}: {unknown.message}); it stays "
                                              f"drained for the next run to judge, not counted as "
                                              f"still failing", plan.action)
            return NodeAction("none", action.reason, detail=outcome)
        worst = next((f for f in findings if f.drains), None)
        outcome = f"still_failing: {worst.check if worst else action.detail}"
        failing = rd.still_failing(findings, refs)
        for ref in refs:
            ledger.update_last(self.config.state_dir, ref, f"still_failing: {failing[ref.key].check}"
                               if ref.key in failing else "passed")
        fixed = [rd.ledger_words(r) for r in refs if r.key not in failing]
        if plan.action == dv.VERIFY:
            self._log("suspect_fault", WARNING, f"the verification found a fault ({outcome}); it "
                                                f"stays drained, for the repair loop's own path "
                                                f"(reset, reboot, rma)", plan.action)
        else:
            self._log("still_failing", WARNING, f"{plan.action} did not fix it ({outcome}); it stays "
                                                f"drained" + (f"; passed its own check: {', '.join(fixed)}"
                                                              if fixed else ""), plan.action)
        now = time.time()
        recent = {r.key: len(rd.in_window(ledger.read_ledger(self.config.state_dir, r), now,
                                          self.config.repair.window_s)) for r in refs if r.key in failing}
        worst_ref = max((r for r in refs if r.key in recent), key=lambda r: recent[r.key], default=None)
        if worst_ref is not None and rd.after_attempt(recent[worst_ref.key], self.config.repair,
                                                      False) == rd.RMA:
            return self.mark_rma(snapshot, worst_ref, recent[worst_ref.key], failing[worst_ref.key])
        reason = drain_reason(findings, snapshot.gpus, Mode.NODE, None)
        if reason:
            try:
                self.ctl.set_reason(self.node, reason)  # type: ignore[attr-defined]
            except DoorError as exc:
                self._log("error", WARNING, f"cannot put the new finding in the reason: {exc}")
        return NodeAction("none", reason, detail=outcome)

    def _inconclusive(self, snapshot: NodeSnapshot, findings: Sequence[Finding]) -> Optional[Finding]:
        """The unknown finding that left the validation unjudged (a probe our own time budget
        cut short, a read that failed), where nothing fails or drains, in --node's words or the
        drain's context's; None when the validation judged the repair."""
        from ..decide.judge import as_drained
        from ..model import Severity

        judged = as_drained(findings, snapshot, self.config, self.reason, self.validation_level())
        if any(f.drains or f.severity is Severity.FAIL for f in judged):
            return None
        return next((f for f in judged if f.severity is Severity.UNKNOWN), None)

    def mark_rma(self, snapshot: NodeSnapshot, ref: Optional[rd.LedgerRef], attempts: int,
                 trigger: Optional[Finding]) -> NodeAction:
        """Mark the node rma for the GPU of `ref` (by index, or by address and serial for one
        NVML no longer lists), or for the node itself: never GPU 0 for want of a GPU."""
        gpu = ref.gpu if ref is not None else None
        reason = drain_reason([rd.rma_finding(gpu, attempts, trigger, ref)], snapshot.gpus, Mode.NODE, None)
        assert reason is not None
        try:
            self.ctl.set_reason(self.node, reason)  # type: ignore[attr-defined]
        except DoorError as exc:
            self._log("error", CRIT, f"cannot mark it rma ({exc}); it stays drained", rd.RMA)
            return NodeAction("none", reason, detail=str(exc))
        from .evidence import collect, start_bug_report
        from .sinks import record_now

        files = collect(self.config, self.node, ref, self.events)
        # the decision in the journal and the history first: what follows may outlast the run
        self._log("rma", CRIT, f"marked rma: {reason}; evidence: {', '.join(files) or 'none'}", rd.RMA,
                  GPU_HEALTHCHECK_EVIDENCE=" ".join(files),
                  GPU_HEALTHCHECK_RMA_GPU=str(gpu) if gpu is not None else "",
                  GPU_HEALTHCHECK_RMA_PCI=ref.pci if ref is not None else "",
                  GPU_HEALTHCHECK_RMA_SERIAL=ref.serial if ref is not None else "")
        self.events[-1] = record_now(self.config, self.events[-1], "repair", self.node)
        how = start_bug_report(self.config, self.node, self.events)
        if how:
            self._log("evidence", NOTICE, f"nvidia-bug-report.sh gathers the RMA evidence outside "
                                          f"this run ({how}, within repair.bug_report_timeout_s = "
                                          f"{self.config.repair.bug_report_timeout_s:g} s); its "
                                          f"result goes to the journal and the history", rd.RMA)
        return NodeAction("none", reason, detail="rma")

    # The runs after a reboot of ours: the claim in the node's Comment says "rebooting" until
    # slurmctld registers the boot, then the first run turns it into "validating" and the
    # validation decides, as after a reset.

    def after_reboot(self, snapshot: NodeSnapshot, this: NodeState, mark: Dict[str, str],
                     report_only: bool) -> bool:
        """A run on a node whose Comment holds our reboot claim.  True: it booted, validate now."""
        rebooted = self._pending_reboots(snapshot)
        pending = list(rebooted.values())
        if not this.drained or not is_ours(this.reason):
            # back in service (an admin, or ReturnToService after a timed-out reboot) or the
            # admin's now: the claim is ours to drop, the node is theirs
            self.release()
            self._set_outcome(pending, "released")
            self._log("released", NOTICE, f"the node is no longer drained by us (State={this.state}, "
                                          f"Reason={this.reason}): our reboot claim is dropped",
                      rd.REBOOT)
            return False
        progress = rd.reboot_progress(this, mark)
        if progress == rd.PENDING:
            self._log("rebooting", INFO, f"waiting for the reboot Slurm was asked for (State="
                                         f"{this.state}): no second reboot", rd.REBOOT,
                      GPU_HEALTHCHECK_REPAIR_STATE="rebooting")
            return False
        if progress == rd.TIMED_OUT:
            if mark["state"] != rd.REBOOT_TIMED_OUT:
                self._set_claim(rd.REBOOT_TIMED_OUT, mark)
                self._set_outcome(pending, "reboot_timed_out")
                self._log("reboot_timed_out", ERR, f"the reboot did not come back within Slurm's "
                                                   f"ResumeTimeout ({this.reason}): left as it is for "
                                                   f"a person; no further reboot", rd.REBOOT,
                          GPU_HEALTHCHECK_REPAIR_STATE="reboot_timed_out")
            else:
                self._log("skipped", INFO, "our reboot timed out earlier: left for a person",
                          rd.REBOOT, GPU_HEALTHCHECK_REPAIR_STATE="reboot_timed_out")
            return False
        if progress == rd.CANCELLED:
            self.release()
            self._set_outcome(pending, "cancelled")
            self._log("reboot_cancelled", WARNING, f"no reboot flag and no boot after our claim "
                                                   f"(BootTime={this.boot_time}, claim at "
                                                   f"{mark['at']}): the reboot was cancelled; the "
                                                   f"node stays drained", rd.REBOOT)
            return False
        if report_only:
            self._log("would_validate", WARNING, f"report_only: booted at {this.boot_time}; would "
                                                 f"prove it healthy with --level "
                                                 f"{self.validation_level()} and resume it",
                      rd.REBOOT)
            return False
        gpus = tuple(int(g) for g in mark["gpus"].split(",") if g.isdigit())
        if not self._set_claim(rd.VALIDATING, mark):
            return False
        self.plan = rd.RepairPlan(rd.REBOOT, "after our reboot", gpus or tuple(g.index for g in snapshot.gpus),
                                  ledgers=tuple(rebooted.values()))
        self.rebooted = rebooted
        self.drained_at = self._ledger_drained_at() or self.drained_at
        self._log("booted", NOTICE, f"booted after our reboot (BootTime={this.boot_time}); proving "
                                    f"it healthy with --level {self.validation_level()}", rd.REBOOT,
                  GPU_HEALTHCHECK_REPAIR_STATE="validating")
        return True

    def _pending_reboots(self, snapshot: NodeSnapshot) -> Dict[str, rd.LedgerRef]:
        """Ledger key -> the ledger (a GPU's, a missing GPU's, the node's) whose last attempt is
        a reboot not judged yet (outcome "reboot").  A GPU NVML had lost when the reboot was
        asked for, with no earlier run to name it, had no serial then (nor, maybe, a PCI
        address): its ledger is the index's (decide.repair.ledger_of), and the GPU back from
        the boot has a serial."""
        keys: Dict[str, rd.LedgerRef] = {}
        candidates: List[List[rd.LedgerRef]] = []
        for gpu in snapshot.gpus:
            nameless = gpu._replace(serial=None, uuid=None)
            candidates.append(list(dict.fromkeys((rd.ledger_of(gpu), rd.ledger_of(nameless),
                                                  rd.ledger_of(nameless._replace(pci_bus_id=None))))))
        candidates += [[rd.missing_ledger(m)] for m in snapshot.missing_gpus] + [[rd.node_ledger(self.node)]]
        for refs in candidates:
            for ref in refs:
                try:
                    attempts = ledger.read_ledger(self.config.state_dir, ref)
                except (ValueError, OSError):
                    continue
                if attempts and attempts[-1].action == rd.REBOOT and attempts[-1].outcome == "reboot":
                    keys[ref.key] = ref
                    break
        return keys

    def _ledger_drained_at(self) -> Optional[str]:
        """When we drained it (our note), for drain-to-resume: slurmctld restamps the reason
        when it issues the reboot."""
        from .state import read_our_drain

        try:
            ours = read_our_drain(self.store)
        except (ValueError, OSError):
            return None
        if ours is None or ours.node != self.node:
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ours.drained_at))

    def await_retest(self, refs: List[rd.LedgerRef], action: NodeAction) -> NodeAction:
        """The validation after the repair of a fabric drain passed: the node stays drained, and
        its claim becomes the fabric_retest mark, with the node's repairs within repair.window_s and
        repair.max_attempts (the sweep, which reads neither ledger nor config of this node, decides
        rma from them).  The reason loses what slurmctld appended at the reboot.  A mark that cannot
        be written leaves the claim as it is (validating): the next run validates again."""
        from ..decide import fabricretest as fr

        done = self.plan.action if self.plan else ""  # the reset or reboot that passed its validation
        now = time.time()
        window, most = self.config.repair.window_s, self.config.repair.max_attempts
        recent = []
        for ref in refs:
            try:
                recent.append(len(rd.in_window(ledger.read_ledger(self.config.state_dir, ref), now, window)))
            except (ValueError, OSError) as exc:
                self._log("error", ERR, f"cannot read the repair ledger {ref.key}: {exc}", done)
        mark = fr.retest_mark(max(recent, default=0) if recent else None, most, iso_utc(now))
        reason = fr.clean_reason(self.reason)
        try:
            self._write_ours(mark)
            if reason and reason != self.reason:
                self.ctl.set_reason(self.node, reason)  # type: ignore[attr-defined]
        except DoorError as exc:
            self._log("error", WARNING, f"cannot mark it as waiting for the fabric re-test ({exc}); the "
                                        f"next run validates it again", done)
            return NodeAction("none", action.reason, detail=str(exc))
        self._set_outcome(refs, fr.FABRIC_RETEST)
        self._log("fabric_retest", NOTICE, f"{done} done and the check at --level "
                                           f"{self.validation_level()} passes, but this node's own checks "
                                           f"cannot see its fabric: it stays drained until the next "
                                           f"--internode-sweep re-tests it with known-good partners "
                                           f"(Comment: {mark})", done,
                  GPU_HEALTHCHECK_REPAIR_STATE=fr.FABRIC_RETEST)
        return NodeAction("none", reason or action.reason, detail=action.detail)


def _nvswitch(snapshot: NodeSnapshot) -> bool:
    """An NVSwitch fabric behind the GPUs: NVML reports a fabric state (Hopper and later), or
    NVSwitch functions sit on the PCI bus (every generation: an HGX A100 reports no fabric
    state)."""
    return bool(snapshot.sysfs_nvswitches) or any(g.fabric_state not in (None, 0) for g in snapshot.gpus)


def _token(text: str) -> str:
    """One word for the node's Comment, the holders without their hints:
    "nv-hostengine_pid_4242,python3_pid_17"."""
    import re

    bare = re.sub(r" \([^)]*\)", "", text).replace(", ", ",")
    return "".join(ch if ch.isalnum() or ch in ",.-_" else "_" for ch in bare)[:120]


def _list(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus) or "all"


def _since(stamp: Optional[str]) -> Optional[float]:
    if not stamp:
        return None
    try:
        return max(0.0, time.time() - time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, OverflowError):
        return None
