"""The repair loop's runs after a reboot of ours (act/repair.py's Repairer asks for it): the
claim in the node's Comment says "rebooting" until slurmctld registers the boot, then the first
run turns it into "validating" and the validation decides, as after a reset.

    if mark and mark["state"] in rd.AFTER_REBOOT:
        validate_now = after_reboot(repairer, snapshot, this, mark, report_only)
    ...
    action = await_retest(repairer, refs, action)   # a fabric drain's own checks passed

A fabric drain (decide.fabricretest) is rebooted like any other, but the check after the boot
cannot see what drained it: when that check passes, await_retest leaves the node drained, its
claim turned into the mark the fabric sweep looks for (`fabric_retest at=... attempts=N/M`).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from ..decide import repair as rd
from ..decide.verdict import NodeState, is_ours
from ..model import ERR, INFO, NOTICE, WARNING, DoorError, NodeAction, NodeSnapshot
from ..text import iso_utc
from . import ledger

# `rep` is act.repair's Repairer (not imported: repair.py imports this module), whose steps
# these are: its log, claim, ledgers and plan
Repairer = Any


def after_reboot(rep: Repairer, snapshot: NodeSnapshot, this: NodeState, mark: Dict[str, str],
                 report_only: bool) -> bool:
    """A run on a node whose Comment holds our reboot claim.  True: it booted, validate now."""
    rebooted = pending_reboots(rep, snapshot)
    pending = list(rebooted.values())
    if not this.drained or not is_ours(this.reason):
        # back in service (an admin, or ReturnToService after a timed-out reboot) or the
        # admin's now: the claim is ours to drop, the node is theirs
        rep.release()
        rep._set_outcome(pending, "released")
        rep._log("released", NOTICE, f"the node is no longer drained by us (State={this.state}, "
                                     f"Reason={this.reason}): our reboot claim is dropped",
                 rd.REBOOT)
        return False
    progress = rd.reboot_progress(this, mark)
    if progress == rd.PENDING:
        rep._log("rebooting", INFO, f"waiting for the reboot Slurm was asked for (State="
                                    f"{this.state}): no second reboot", rd.REBOOT,
                 GPU_HEALTHCHECK_REPAIR_STATE="rebooting")
        return False
    if progress == rd.TIMED_OUT:
        if mark["state"] != rd.REBOOT_TIMED_OUT:
            rep._set_claim(rd.REBOOT_TIMED_OUT, mark)
            rep._set_outcome(pending, "reboot_timed_out")
            rep._log("reboot_timed_out", ERR, f"the reboot did not come back within Slurm's "
                                              f"ResumeTimeout ({this.reason}): left as it is for "
                                              f"a person; no further reboot", rd.REBOOT,
                     GPU_HEALTHCHECK_REPAIR_STATE="reboot_timed_out")
        else:
            rep._log("skipped", INFO, "our reboot timed out earlier: left for a person",
                     rd.REBOOT, GPU_HEALTHCHECK_REPAIR_STATE="reboot_timed_out")
        return False
    if progress == rd.CANCELLED:
        rep.release()
        rep._set_outcome(pending, "cancelled")
        rep._log("reboot_cancelled", WARNING, f"no reboot flag and no boot after our claim "
                                              f"(BootTime={this.boot_time}, claim at "
                                              f"{mark['at']}): the reboot was cancelled; the "
                                              f"node stays drained", rd.REBOOT)
        return False
    if report_only:
        rep._log("would_validate", WARNING, f"report_only: booted at {this.boot_time}; would "
                                            f"prove it healthy with --level "
                                            f"{rep.validation_level()} and resume it",
                 rd.REBOOT)
        return False
    gpus = tuple(int(g) for g in mark["gpus"].split(",") if g.isdigit())
    if not rep._set_claim(rd.VALIDATING, mark):
        return False
    rep.plan = rd.RepairPlan(rd.REBOOT, "after our reboot", gpus or tuple(g.index for g in snapshot.gpus),
                             ledgers=tuple(rebooted.values()))
    rep.rebooted = rebooted
    rep.drained_at = drained_at(rep) or rep.drained_at
    rep._log("booted", NOTICE, f"booted after our reboot (BootTime={this.boot_time}); proving "
                               f"it healthy with --level {rep.validation_level()}", rd.REBOOT,
             GPU_HEALTHCHECK_REPAIR_STATE="validating")
    return True


def pending_reboots(rep: Repairer, snapshot: NodeSnapshot) -> Dict[str, rd.LedgerRef]:
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
    candidates += [[rd.missing_ledger(m)] for m in snapshot.missing_gpus] + [[rd.node_ledger(rep.node)]]
    for refs in candidates:
        for ref in refs:
            try:
                attempts = ledger.read_ledger(rep.config.state_dir, ref)
            except (ValueError, OSError):
                continue
            if attempts and attempts[-1].action == rd.REBOOT and attempts[-1].outcome == "reboot":
                keys[ref.key] = ref
                break
    return keys


def drained_at(rep: Repairer) -> Optional[str]:
    """When we drained it (our note), for drain-to-resume: slurmctld restamps the reason
    when it issues the reboot."""
    from .state import read_our_drain

    try:
        ours = read_our_drain(rep.store)
    except (ValueError, OSError):
        return None
    if ours is None or ours.node != rep.node:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ours.drained_at))


def await_retest(rep: Repairer, refs: List[rd.LedgerRef], action: NodeAction) -> NodeAction:
    """The validation after the repair of a fabric drain passed: the node stays drained, and
    its claim becomes the fabric_retest mark, with the node's repairs within repair.window_s and
    repair.max_attempts (the sweep, which reads neither ledger nor config of this node, decides
    rma from them).  The reason loses what slurmctld appended at the reboot.  A mark that cannot
    be written leaves the claim as it is (validating): the next run validates again."""
    from ..decide import fabricretest as fr

    now = time.time()
    window, most = rep.config.repair.window_s, rep.config.repair.max_attempts
    recent = []
    for ref in refs:
        try:
            recent.append(len(rd.in_window(ledger.read_ledger(rep.config.state_dir, ref), now, window)))
        except (ValueError, OSError) as exc:
            rep._log("error", ERR, f"cannot read the repair ledger {ref.key}: {exc}", rep.plan.action)
    mark = fr.retest_mark(max(recent, default=0) if recent else None, most, iso_utc(now))
    reason = fr.clean_reason(rep.reason)
    try:
        rep._write_ours(mark)
        if reason and reason != rep.reason:
            rep.ctl.set_reason(rep.node, reason)
    except DoorError as exc:
        rep._log("error", WARNING, f"cannot mark it as waiting for the fabric re-test ({exc}); the "
                                   f"next run validates it again", rep.plan.action)
        return NodeAction("none", action.reason, detail=str(exc))
    rep._set_outcome(refs, fr.FABRIC_RETEST)
    rep._log("fabric_retest", NOTICE, f"{rep.plan.action} done and the check at --level "
                                      f"{rep.validation_level()} passes, but this node's own checks "
                                      f"cannot see its fabric: it stays drained until the next "
                                      f"--internode-sweep re-tests it with known-good partners "
                                      f"(Comment: {mark})", rep.plan.action,
             GPU_HEALTHCHECK_REPAIR_STATE=fr.FABRIC_RETEST)
    return NodeAction("none", reason or action.reason, detail=action.detail)
