"""What a suspect gets (decide/verify.py decides; this carries it out): the drain for verification
that `--suspects --act` asks for, and the end of the repair loop's verification on the node.

    results = send_to_verification(config, sends, environ, events)   # node -> Outcome value or skip
    action = verified(repairer, refs, action)    # act.repair's finish() after a deep pass

The drain is every remote drain's (act/slurm.Slurm.drain_remote): within drain.max_fraction, held after with
the re-read, never over an admin's reason, nothing under drain.report_only; Slurm's DRAIN lets
the running jobs end.  Only the Reason is written: the node's Comment, where the repair claim
and the site's notes live, is left as it is (a refused drain is noted after the site's part, as
every refused drain of ours).  Every step is a LogEvent for the journal and the history.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence

from ..decide import verify as dv
from ..model import NOTICE, WARNING, DoorError, LogEvent, NodeAction, Outcome

if TYPE_CHECKING:
    from ..config import Config
    from ..decide import repair as rd

# `rep` is act.repair's Repairer (which imports this module), whose claim, log and ledgers these use
Repairer = Any


def send_to_verification(config: "Config", sends: Sequence[dv.Send], environ: Mapping[str, str],
                         events: List[LogEvent]) -> Dict[str, str]:
    """Drain each node of `sends` that is not skipped, for verification.  node -> what happened:
    an Outcome value (applied, refused, admin_owned, already_ours, report_only), "error: ...",
    or the Send's skip (cooldown)."""
    from .slurm import Slurm

    done: Dict[str, str] = {}
    slurm = Slurm(config, environ)
    for send in sends:
        fields = {"GPU_HEALTHCHECK_MODE": "suspects", "GPU_HEALTHCHECK_SUSPECT_KIND": send.kind}
        if send.skip:
            done[send.node] = send.skip
            why = (f"sent to verification less than suspects.verify_cooldown_s = "
                   f"{config.suspects.verify_cooldown_s:g} s ago" if send.skip == dv.COOLDOWN else send.skip)
            events.append(LogEvent("drain", NOTICE, f"suspect {send.node} ({send.kind}) not sent to "
                                                    f"verification: {why}", dict(fields, SLURMD_NODENAME=send.node)))
            continue
        done[send.node] = slurm.drain_remote(send.node, send.reason, True, events, fields).said
    return done


def verified(rep: Repairer, refs: Sequence["rd.LedgerRef"], action: NodeAction) -> NodeAction:
    """The node passed at the deep level and only its suspect drain held it (SUSPECT_HOLD):
    a lemon is held for a person, one for the fabric re-test is left to the sweep, any other
    is resumed; each only while its reason is still the suspect drain this run decided on."""
    from . import ledger
    from .state import clear_our_drain

    config, now = rep.config, time.time()
    try:
        attempts = ledger.read_ledgers(config.state_dir, rep.read_refs)
    except (ValueError, OSError) as exc:
        rep.release()
        rep._log("error", WARNING, f"the verification passed, but the repair ledgers cannot be read "
                                   f"for the lemon rule ({exc}): it stays drained", dv.VERIFY)
        return NodeAction("none", action.reason, detail=str(exc))
    count = dv.lemon_count(attempts, rep.node, now, config.suspects)
    outcome = dv.after_pass(count, config.suspects.internode_retest)
    try:
        this, _ = rep._reread()
    except DoorError as exc:
        rep.release(reread=False)
        rep._log("error", WARNING, f"the verification passed, but slurmctld did not answer ({exc}): "
                                   f"it stays drained for the next run", dv.VERIFY)
        return NodeAction("none", action.reason, detail=str(exc))
    why_not = dv.may_resume_verified(this, rep.reason)
    if why_not:
        rep.release(reread=False)
        rep._log("verify_kept", WARNING, f"the verification at --level deep passes, but {why_not}: "
                                         f"left as it is", dv.VERIFY)
        return NodeAction("none", this.reason if this else None, detail=why_not)
    for ref in refs:  # a reset or reboot of a suspect that found a fault: its outcome
        rep._set_outcome([ref], "passed" if outcome != dv.RESUME else "resumed")
    try:
        if outcome == dv.LEMON:
            assert count is not None
            reason = dv.lemon_reason(count, config.suspects, rep.reason)
            rep.ctl.set_reason(rep.node, reason)
            rep.release(reread=False)
            rep._log("lemon", WARNING, f"the verification at --level deep passes, but it has needed "
                                       f"{count} repairs within suspects.remediation_window_s = "
                                       f"{config.suspects.remediation_window_s:g} s (suspects.remediations "
                                       f"= {config.suspects.remediations}): held for a person: {reason}",
                     dv.VERIFY, GPU_HEALTHCHECK_REPAIR_STATE="drained")
            return NodeAction("none", reason, detail=dv.LEMON)
        if outcome == dv.FABRIC_RETEST:
            reason = dv.fabric_retest_reason(rep.reason)
            rep._free_slot()  # the fabric_retest mark holds no budget
            rep.ctl.set_reason(rep.node, reason)
            rep.reason = reason
            return rep.await_retest(list(refs), action)
        rep.ctl.resume(rep.node)
    except DoorError as exc:
        rep.release(reread=False)
        rep._log("error", WARNING, f"the verification passed, but its outcome ({outcome}) could not "
                                   f"be applied: {exc}; it stays drained for the next run", dv.VERIFY)
        return NodeAction("none", action.reason, detail=str(exc))
    try:
        clear_our_drain(rep.store)
    except OSError as exc:
        rep._log("error", WARNING, f"cannot remove the note of our drain ({exc})", dv.VERIFY)
    rep.release()
    rep._log("verified", NOTICE, f"the verification at --level deep passes and it is no lemon: "
                                 f"resumed (was: {rep.reason})", dv.VERIFY)
    rep.events.append(LogEvent("resume", NOTICE, f"resumed {rep.node}: verified at --level deep "
                                                 f"(was: {rep.reason})", rep.fields, Outcome.APPLIED))
    return NodeAction("resume", rep.reason, outcome=Outcome.APPLIED)
