"""The repair loop's decisions (pure): may this node be repaired now, how, and when to give up.

    plan = decide_repair(this, cluster, findings, gpus, attempts, now, config.repair, nvswitch)
    plan.action        # "none" | "reset" | "reboot" | "rma" (see README "Repair")
    plan.why           # why, in words, for the journal and the history

A repair acts only on a node this tool drained (reason starts `gpu-healthcheck:`, no `rma`
token), with no job on it as slurmctld says, outside its cooldown, inside the cluster's repair
budget, and only for a fault a reset or a reboot can fix (the finding's own action).  A GPU that
has needed `repair.max_attempts` repairs within `repair.window_s` is not repaired again: the
node is marked rma (CONTRACTS §4), which no automatic run ever repairs or resumes.

The budget is held by what slurmctld makes atomic: each of its places is a reservation of a
fixed name (slot_name: gpu-healthcheck-repair-N), which slurmctld refuses to create twice, so of
two nodes claiming one place at once exactly one gets it (act.repairclaim).  Before that, the
claim goes into the node's Comment (for --cluster and for the node's own next run), in two
steps, each written and then re-read:
1. ask: "gpu-healthcheck: repair resetting gpus=2 at=... until=... asking"; step back when this
   node ranks past `repair.max_concurrent` (claim_order: the claims already held first, then
   those asking, by node name: the same order on every node, and no node's clock in it);
2. hold: the same claim without "asking"; step back when more claims are held than the budget
   allows (held_past_budget).
A Comment update slurmctld applies after the caller moved on can make two nodes each see only
the other's claim: the Comment orders the claims, the reservation is the mutex.  After it, the
places held and the reboots under way may not exceed the budget (over_budget).
A claim carries its own expiry (`until`, the claiming run's deadline and a margin), and so does
its place: a run killed mid-reset cannot hold the budget past it, and its own node's next run
clears it.  A claim counts only on a node drained by us (active_claim): one left on a node back
in service holds nothing, and that node's next run drops it (claim_outlived).
"""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..config import RepairConfig
from ..model import Action, Finding, GpuSnapshot, Severity
from ..records import NamedTuple
from .verdict import (PREFIX, REBOOT_HOLDS, NodeState, drain_budget, draining, gpu_nodes, is_lemon_reason,
                      is_ours, is_rma, our_comment)
from .fabricretest import FABRIC_RETEST, FABRIC_TESTING, fabric_trigger, stale_retest_mark, waiting_state
from .verify import VERIFY, VERIFYING, suspect_trigger
# the ledgers' keys and counts live in decide.ledgers; the repair's callers read them here too
from .ledgers import (BLOCKED, FUTURE_SLACK_S, KEY_PART_MAX, NODE_LEDGER, Attempt, LedgerRef,  # noqa: F401
                      Naming, counted, escape_key_part, finding_ledger, from_the_future, in_window, ledger_key,
                      ledger_of, ledger_words, ledgers_to_read, legacy_attempts, missing_ledger, names,
                      name_unseen, node_ledger, same_pci, stamped_at, still_failing)

REPAIR_MARK = PREFIX + " repair"
# A claim's states: the node is being reset or rebooted (counted by the budget); "validating"
# names the full check that follows a reboot; "reboot_timed_out" a reboot slurmctld gave up on
# (ResumeTimeout), left for a person.
RESETTING, REBOOTING = "resetting", "rebooting"
VALIDATING, REBOOT_TIMED_OUT = "validating", "reboot_timed_out"
# "verifying": a suspect's verification at the deep level (decide.verify), which holds the budget
# like a reset, with its run's deadline for expiry
ACTIVE = (RESETTING, REBOOTING, VERIFYING)
EXPIRING = (RESETTING, VERIFYING)  # claims that carry `until` and end with their run
AFTER_REBOOT = (REBOOTING, VALIDATING, REBOOT_TIMED_OUT)
assert REBOOT_HOLDS == (f"{REPAIR_MARK} {REBOOTING}", f"{REPAIR_MARK} {REBOOT_TIMED_OUT}")
# What slurmctld appends to a node's reason after `scontrol reboot` (22.05 and 24.11,
# src/slurmctld: set_node_reboot_reason / set_node_reason): " : reboot issued" when it asks
# slurmd to run RebootProgram, " : reboot timed out" when the node did not register a newer
# boot time within ResumeTimeout (the node is then DOWN, DRAIN cleared).
REBOOT_TIMED_OUT_TEXT = "reboot timed out"
# Where a reboot of ours stands, as slurmctld shows the node (reboot_progress)
PENDING, BOOTED, TIMED_OUT, CANCELLED = "pending", "booted", "timed_out", "cancelled"
# A node's repair state, as --cluster shows it and the gpu_healthcheck_repair_state metric
# exports it: in service; drained with no repair under way (a person's, a fault no repair
# fixes, or waiting for the next check); the waits of decide_repair; a claim; rma; a fabric
# drain rebooted and waiting for the fabric sweep's re-test, or in it (decide.fabricretest).
IN_SERVICE, DRAINED = "in_service", "drained"
REPAIR_STATES = (IN_SERVICE, DRAINED, "waiting_for_idle", "cooldown", "waiting_for_budget",
                 RESETTING, REBOOTING, VALIDATING, REBOOT_TIMED_OUT, "rma", BLOCKED,
                 FABRIC_RETEST, FABRIC_TESTING, VERIFYING)
# Why a reset was blocked (never ran): the gpu_healthcheck_repairs_blocked_total label
IN_USE, NO_NVIDIA_SMI = "in_use", "no_nvidia_smi"
# nvidia-smi's words when a client holds the GPU (NVIDIA/NVSentinel#1690, verbatim)
IN_USE_TEXT = "In use by another client"
_MARK_RE = re.compile(r"^gpu-healthcheck: repair (?P<state>[a-z_]+)(?: gpus=(?P<gpus>[0-9,]*))?"
                      r"(?: at=(?P<at>\S+))?(?: until=(?P<until>\S+))?(?: (?P<asking>asking))?")
ASKING = "asking"
# Added to a claim's expiry beyond its run's own deadline: the claiming node's clock may run
# behind the reader's (NTP keeps a cluster's clocks far closer than this).
CLAIM_MARGIN_S = 10.0

# Findings a reset cannot fix on its own: NVIDIA's Xid catalogue and NVML recovery actions
# (NOTES.md) ask for a reboot (Xid 79, a GPU off the bus, fabric, Xid 154).  Findings with
# Action.RESET are those NOTES.md lists for a GPU reset (Xid 48, 119/120, 140, DBE, a pending
# remap, a leaked context).
NONE, RESET, REBOOT, RMA = "none", "reset", "reboot", "rma"
# VERIFY (decide.verify): a suspect's drain, nothing found yet: the deep level decides

# On an NVSwitch system NVIDIA's documents (Fabric Manager user guide, nvidia-smi manual) say
# which GPUs and switches must be reset together and when the fabric manager takes part.
# NOTES.md (what this project has verified) is silent on those rules, and the one real account
# found of such a reset is the driver's own note after `nvidia-smi -r` on an HGX node: "The
# operation has successfully reset all GPUs and NVSwitches. If the services, such as
# nvidia-fabricmanager, which manage or monitor NVSwitches are running, they might have been
# affected by this operation" (its author then restarted nvidia-fabricmanager by hand).  A reset
# there is the whole baseboard plus a restart of a host service we do not own, so no GPU is
# reset on such a node: a reboot resets every GPU and switch together and starts the fabric
# manager again, which is complete by any rule.
NVSWITCH_WHY = ("NVSwitch system: which GPUs and switches must be reset together is not "
                "verified (NOTES.md), so the node is rebooted instead of resetting GPU(s)")


class RepairPlan(NamedTuple):
    action: str  # NONE | RESET | REBOOT | RMA
    why: str
    gpus: Tuple[int, ...] = ()  # the GPUs to reset (all for a reboot)
    trigger: Optional[Finding] = None
    rma_gpu: Optional[int] = None  # RMA: the GPU that used up its attempts
    attempts: int = 0  # RMA: its attempts within the window
    state: str = ""  # --cluster's word for the node while nothing is done: waiting_for_idle, ...
    # the ledgers the attempt goes into: the GPUs repaired (a reset's), the GPUs the findings
    # blame (a reboot's: a lost or missing GPU), or the node's own; never every GPU's
    ledgers: Tuple["LedgerRef", ...] = ()
    rma_ledger: Optional["LedgerRef"] = None  # RMA: the ledger that used up its attempts


def repair_action(findings: Sequence[Finding], gpus: Sequence[GpuSnapshot],
                  nvswitch: bool, excluded: Sequence[int] = ()) -> Tuple[str, Tuple[int, ...], Optional[Finding], str]:
    """(action, GPUs, the finding that calls for it, why) for what the findings drain for.
    A reset names its GPUs: one a finding names that this node has, never an excluded one
    (`exclude_gpus`); a reset finding that names no GPU of this node (a DCGM result or an Xid
    on a GPU that is not here) is no reason to reset every GPU: a person decides."""
    found = draining(findings)
    if not found:
        return NONE, (), None, "nothing drains: no repair needed"
    rma = next((f for f in found if f.action is Action.RMA), None)
    if rma is not None:
        return NONE, (), rma, f"{rma.check} calls for RMA: no repair, a person decides"
    every = tuple(g.index for g in gpus)
    reboot = next((f for f in found if f.action is Action.REBOOT), None)
    if reboot is not None:
        return REBOOT, every, reboot, f"{reboot.check} calls for a reboot"
    resets = [f for f in found if f.action is Action.RESET]
    if len(resets) != len(found):
        other = next(f for f in found if f.action is not Action.RESET)
        return NONE, (), other, f"{other.check} is not fixed by a reset or a reboot"
    stray = next((f for f in resets if f.gpu not in every), None)
    if stray is not None:
        which = (f"GPU {stray.gpu}, which this node does not have" if stray.gpu is not None
                 else "no one GPU")
        return NONE, (), stray, (f"{stray.check} names no GPU of this node ({which}): no GPU is "
                                 f"reset for it, a person decides")
    targets = tuple(sorted({f.gpu for f in resets if f.gpu is not None} - set(excluded)))
    if not targets:
        return NONE, (), resets[0], (f"{resets[0].check} names only GPU(s) excluded from service "
                                     f"(exclude_gpus): never repaired")
    if nvswitch:
        return REBOOT, every, resets[0], NVSWITCH_WHY
    return RESET, targets, resets[0], f"{resets[0].check} calls for a GPU reset"


def job_running(this: NodeState) -> bool:
    """slurmctld's word: a job is allocated on the node, or still completing."""
    flags = set(this.state.upper().replace("*", "").replace("$", "").split("+"))
    return bool(flags & {"ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING", "DRAINING"})


def parse_mark(comment: Optional[str]) -> Optional[Dict[str, str]]:
    """A repair claim in our part of a node's Comment (verdict.our_comment): {"state",
    "gpus", "at", "until", "asking"} ("" where absent), or None."""
    m = _MARK_RE.match(our_comment(comment) or "")
    return {k: v or "" for k, v in m.groupdict().items()} if m else None


def mark_text(state: str, gpus: Sequence[int], at_iso: str, until_iso: Optional[str] = None,
              asking: bool = False) -> str:
    until = f" until={until_iso}" if until_iso else ""
    return (f"{REPAIR_MARK} {state} gpus={','.join(str(g) for g in gpus)} at={at_iso}{until}"
            + (f" {ASKING}" if asking else ""))


def claim_expired(mark: Mapping[str, str], now: float) -> bool:
    """Whether a claim is past its own expiry.  A claim without one (a reboot's, which
    slurmctld's reboot state ends, or one an older version wrote) never expires by the clock."""
    until = stamp_epoch(mark.get("until"), utc=True)
    return until is not None and now > until


def claim_outlived(this: NodeState, mark: Optional[Mapping[str, str]]) -> bool:
    """Whether the node's reset claim (or ask) speaks for no repair: the node is in service or
    drained by someone else (a run killed after its reset, whose node the next check resumed).
    Its own run drops it, keeping the rest of the Comment."""
    if mark is None or not (mark.get(ASKING) or mark.get("state") in EXPIRING):
        return False
    return not (this.drained and is_ours(this.reason))


def stale_own_claim(mark: Mapping[str, str], now: float) -> Optional[bool]:
    """A reset claim (or an unfinished ask) found on this node by its own run: True when the
    run that wrote it is over (past its expiry, or written without one: the run that wrote it
    cannot be told from a killed one, and is never older than this check's interval), False
    while it may still run, None when `mark` is no such claim."""
    if not (mark.get(ASKING) or mark.get("state") in EXPIRING):
        return None
    return not mark.get("until") or claim_expired(mark, now)


def repair_budget(cluster: Sequence[NodeState], max_concurrent: Union[int, float]) -> int:
    """How many nodes may be resetting or rebooting at once.  `repair.max_concurrent` is a
    count (an int) or a share of the cluster's GPU nodes (a float below 1, or "5%" in the
    config), taken the way the drain budget takes drain.max_fraction: at least one node."""
    if isinstance(max_concurrent, float):
        return drain_budget(len(gpu_nodes(cluster)), max_concurrent)
    return max(1, max_concurrent)


def active_claim(node: NodeState, now: Optional[float] = None) -> Optional[Dict[str, str]]:
    """The node's repair claim while it counts against the budget: a reset or a reboot in
    progress (or asked for), on a node drained by us.  Three no longer count, since their node
    may never run us again to clear them and would hold the cluster's budget for ever: a claim
    on a node in service or drained by someone else (a run killed after its reset, whose node
    the next check resumed), a reboot slurmctld timed out, and a claim past its own expiry (its
    run was killed: slurmd's HealthCheckProgram limit)."""
    import time

    mark = parse_mark(node.comment)
    if not mark or mark["state"] not in ACTIVE:
        return None
    if not (node.drained and is_ours(node.reason)):
        return None  # back in service, or an admin's: no repair of ours runs there (stale_claim)
    if mark["state"] == REBOOTING and REBOOT_TIMED_OUT_TEXT in (node.reason or ""):
        return None
    if claim_expired(mark, time.time() if now is None else now):
        return None
    return mark


def claim_order(cluster: Sequence[NodeState], now: Optional[float] = None) -> List[str]:
    """The nodes with an active claim, in the order the budget goes by: claims held first,
    then claims asking, each by node name.  Never by the claims' times: those are the nodes'
    clocks, and a claim slurmctld applied late would carry an early time."""
    claims = [(bool(mark[ASKING]), n.name) for n in cluster for mark in [active_claim(n, now)] if mark]
    return [name for _, name in sorted(claims)]


def repairs_beyond_budget(cluster: Sequence[NodeState], max_concurrent: Union[int, float],
                          now: Optional[float] = None) -> List[str]:
    """The nodes whose active claim ranks past the budget (claim_order): a node asking steps
    back when it is one of them."""
    return claim_order(cluster, now)[repair_budget(cluster, max_concurrent):]


def held_past_budget(cluster: Sequence[NodeState], max_concurrent: Union[int, float],
                     now: Optional[float] = None) -> List[str]:
    """Every node holding a claim (not asking) when more hold one than the budget allows, else
    []: a node that has just turned its ask into a hold and sees this steps back."""
    held = [n.name for n in cluster for mark in [active_claim(n, now)] if mark and not mark[ASKING]]
    return held if len(held) > repair_budget(cluster, max_concurrent) else []


# The repair budget's slots: one Slurm reservation each, of a fixed name, that a node creates
# on itself for its repair.  slurmctld refuses a second reservation of a name atomically, so
# of two nodes claiming one slot at once exactly one gets it, however late their other calls
# land (the Comment's claim alone is no mutex then).
SLOT_PREFIX = "gpu-healthcheck-repair-"


# slurmctld drops a reservation that has ended only at its next check of them (up to about 30 s
# later, seen on 22.05): until then the name stays taken.  So a place whose reservation has
# ended is taken again under the next of a few names (`...-0.1`, `...-0.2`); whoever creates
# one then re-reads, and steps back while another name of that place is still live.
SLOT_NAMES = 4
_SLOT_RE = re.compile(re.escape(SLOT_PREFIX) + r"(\d+)(?:\.(\d+))?")


def slot_name(place: int, rename: int = 0) -> str:
    """A place's reservation: gpu-healthcheck-repair-0, then -0.1, -0.2 (SLOT_NAMES)."""
    return f"{SLOT_PREFIX}{place}" + (f".{rename}" if rename else "")


def slot_of(name: str) -> Optional[int]:
    """The place a reservation of ours holds, or None for any other reservation."""
    m = _SLOT_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def place_live(end_time: Optional[str], now: float) -> bool:
    """Whether a place's reservation still holds it: until its EndTime (the controller's zone)
    and CLAIM_MARGIN_S for the clocks; one whose end cannot be read holds it."""
    end = stamp_epoch(end_time, utc=False)
    return end is None or now <= end + CLAIM_MARGIN_S


def over_budget(me: str, slot_holders: Sequence[str], cluster: Sequence[NodeState],
                max_concurrent: Union[int, float], now: Optional[float] = None) -> List[str]:
    """After `me` took a slot: the nodes repairing with it (a slot held, or a reboot asked for
    by an earlier run, whose claim in the Comment holds the budget until slurmctld's reboot
    state ends it), when they are more than the budget, else []."""
    rebooting = [n.name for n in cluster if n.name != me
                 for mark in [active_claim(n, now)] if mark and mark["state"] == REBOOTING]
    busy = sorted({me, *slot_holders, *rebooting})
    return busy if len(busy) > repair_budget(cluster, max_concurrent) else []


def changed_since(before: NodeState, after: Optional[NodeState]) -> Optional[str]:
    """Why a node may no longer be repaired, comparing slurmctld's answer after our claim with
    the one the repair was decided on (an admin resumed it, a job started on it, someone
    drained it again in between), or None when it is as it was."""
    if after is None:
        return "it is gone from scontrol's node list"
    if not after.drained:
        return f"it is no longer drained (State={after.state})"
    if job_running(after):
        return f"a job runs on it now (State={after.state})"
    if (after.reason, after.reason_time) != (before.reason, before.reason_time):
        return f"its reason changed (now: {after.reason})"
    return None


def busy_repairing(cluster: Sequence[NodeState], but: str = "",
                   now: Optional[float] = None) -> List[str]:
    """The nodes (other than `but`) whose Comment claims an active repair."""
    return [n.name for n in cluster if n.name != but and active_claim(n, now)]


def stale_mark(node: NodeState, mark: Optional[Dict[str, str]]) -> bool:
    """Whether the node's Comment mark no longer speaks for it: a blocked mark only speaks for a
    node still drained by us and not rma since, a fabric re-test's only for a node still drained
    for its fabric (the node's own run drops a stale one; --cluster does not show it)."""
    blocked = mark is not None and mark["state"] == BLOCKED
    return (blocked and not (node.drained and is_ours(node.reason) and not is_rma(node.reason))) \
        or stale_retest_mark(node)


def cluster_state(node: NodeState, cluster: Sequence[NodeState],
                  max_concurrent: Union[int, float], now: Optional[float] = None) -> Optional[str]:
    """--cluster's repair state of a node from what slurmctld shows (its reason, state flags
    and Comment claim), or None where the repair loop has no part (a node in service without
    a claim, a node someone else drained).  The cooldown lives in the node's own ledger, which
    slurmctld does not show: such a node reads "drained" here."""
    mark = parse_mark(node.comment)
    if mark and mark["state"] and not stale_mark(node, mark) \
            and (mark["state"] not in ACTIVE or active_claim(node, now)):
        return mark["state"]
    if not node.drained or not is_ours(node.reason):
        return None
    if is_rma(node.reason):
        return "rma"
    if job_running(node):
        return "waiting_for_idle"
    if len(busy_repairing(cluster, node.name, now)) >= repair_budget(cluster, max_concurrent):
        return "waiting_for_budget"
    return DRAINED


def blocked_by(node: NodeState) -> Optional[str]:
    """What holds the GPUs of a node whose repair is blocked, as its Comment's claim says
    (`... repair blocked gpus=2 at=... by=nv-hostengine_pid_4242`); None otherwise."""
    mark = parse_mark(node.comment)
    if not mark or mark["state"] != BLOCKED:
        return None
    m = re.search(r" by=(\S+)", node.comment or "")
    return m.group(1) if m else None


def reboot_flags(state: str) -> List[str]:
    """slurmctld's reboot flags in a node state: REBOOT_REQUESTED (waiting for idle),
    REBOOT_ISSUED (RebootProgram asked, boot not registered yet); older versions: REBOOT."""
    return [f for f in state.upper().replace("*", "").replace("$", "").split("+")
            if f.startswith("REBOOT")]


def stamp_epoch(stamp: Optional[str], utc: bool) -> Optional[float]:
    """"2026-12-01T21:01:39" (scontrol: the controller's zone; utc=False) or a claim's
    "2026-12-01T21:01:38+00:00" (iso_utc; utc=True) in epoch seconds; None if unreadable."""
    import calendar
    import time

    if not stamp:
        return None
    try:
        parsed = time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")
        return float(calendar.timegm(parsed)) if utc else time.mktime(parsed)
    except (ValueError, OverflowError):
        return None


def reboot_progress(this: NodeState, mark: Mapping[str, str]) -> str:
    """Where our reboot of this node stands (its Comment holds the claim `mark`):
    - TIMED_OUT: slurmctld gave up (ResumeTimeout): left for a person, never rebooted again;
    - PENDING: a reboot flag is still set (requested: waiting for idle; issued: booting);
    - BOOTED: no flag, and slurmctld registered a boot after the claim (BootTime; unknown
      BootTime counts as booted once the flags are gone): the full check decides;
    - CANCELLED: no flag and no newer boot: someone cancelled it (scontrol cancel_reboot).
    Not boot_id: a real boot changes it, but slurmctld's word is what every version shows,
    and what the test cluster's simulated boot changes (BootTime, from /proc/uptime)."""
    if mark.get("state") == VALIDATING:
        return BOOTED  # a validation cut short (the run was killed): validate again
    if mark.get("state") == REBOOT_TIMED_OUT or REBOOT_TIMED_OUT_TEXT in (this.reason or ""):
        return TIMED_OUT
    if reboot_flags(this.state):
        return PENDING
    boot, claimed = stamp_epoch(this.boot_time, utc=False), stamp_epoch(mark.get("at"), utc=True)
    if boot is None or claimed is None or boot >= claimed:
        return BOOTED
    return CANCELLED


def decide_repair(this: NodeState, cluster: Sequence[NodeState], findings: Sequence[Finding],
                  gpus: Sequence[GpuSnapshot], attempts: Mapping[str, Sequence[Attempt]],
                  now: float, config: RepairConfig, nvswitch: bool,
                  excluded: Sequence[int] = (), missing: Sequence[GpuSnapshot] = ()) -> RepairPlan:
    """What the repair step does now.  `attempts`: ledger key -> its attempts (every ledger of
    ledgers_to_read); `excluded`: the NVML indices out of service (exclude_gpus), which no
    repair touches; `missing`: the GPUs NVML no longer lists (NodeSnapshot.missing_gpus)."""
    if not this.drained:
        return RepairPlan(NONE, "not drained")
    if not is_ours(this.reason):
        return RepairPlan(NONE, f"drained by someone else ({this.reason}): never repaired")
    if is_rma(this.reason):
        return RepairPlan(NONE, "marked rma: never repaired automatically", state="rma")
    if is_lemon_reason(this.reason):
        return RepairPlan(NONE, "held as a lemon (decide.verify): a person decides, never repaired "
                                "automatically")
    if job_running(this):
        return RepairPlan(NONE, f"a job runs on it (state {this.state}): waiting for idle",
                          state="waiting_for_idle")
    fabric = fabric_trigger(this.reason)
    if fabric is not None:
        # a fabric drain is rebooted like any drain, once: after the boot it waits for the
        # fabric sweep's re-test (its Comment says so), unless its own checks find more
        waiting = waiting_state(this)
        if waiting and not draining(findings):
            return RepairPlan(NONE, "rebooted for its fabric; waiting for the next --internode-sweep "
                                    "to re-test it with known-good partners", trigger=fabric,
                              state=waiting)
        if not waiting:
            findings = [*findings, fabric]
    targets: Tuple[int, ...]
    trigger: Optional[Finding]
    suspect = suspect_trigger(this.reason)
    if suspect is not None and not draining(findings):
        # a suspect's drain, nothing found by this run: verified at the deep level, through
        # the same cooldown and budget as a repair (no GPU is blamed: no ledger)
        action, targets, trigger, why = VERIFY, (), suspect, "verification of a suspect: the deep level decides"
    else:
        action, targets, trigger, why = repair_action(findings, gpus, nvswitch, excluded)
    if action == NONE:
        return RepairPlan(NONE, why, trigger=trigger)
    by_index = {g.index: g for g in gpus}
    ledgers: Tuple[LedgerRef, ...] = ()  # VERIFY: none
    if action == RESET:
        ledgers = tuple(ledger_of(by_index[i]) for i in targets)
    elif action == REBOOT:  # a reboot is counted against the GPUs the findings blame, never against every GPU;
        # the node's own ledger only when none names a GPU (an Xid at an address NVML has lost
        # beside gpu.lost of that GPU is the same fault)
        blamed = [finding_ledger(f, gpus, missing, this.name) for f in draining(findings)
                  if f.action in (Action.REBOOT, Action.RESET)]
        named = [r for r in blamed if not r.key.startswith(NODE_LEDGER)]
        ledgers = tuple(dict.fromkeys(named or blamed))
    for ref in ledgers:
        recent = in_window(attempts.get(ref.key, ()), now, config.window_s)
        if len(recent) >= config.max_attempts:
            return RepairPlan(RMA, f"{ledger_words(ref)} needed {len(recent)} repairs within "
                                   f"{config.window_s:g} s (repair.max_attempts = {config.max_attempts})",
                              targets, trigger, ref.gpu, len(recent), ledgers=ledgers, rma_ledger=ref)
    ours = [a for runs in attempts.values() for a in runs if a.node == this.name and counted(a)]
    last = max((stamped_at(a, now) for a in ours), default=None)
    if last is not None and now - last < config.cooldown_s:
        return RepairPlan(NONE, f"last repair {now - last:.0f} s ago, repair.cooldown_s = "
                                f"{config.cooldown_s:g}", trigger=trigger, state="cooldown")
    busy = busy_repairing(cluster, this.name, now)
    if len(busy) >= repair_budget(cluster, config.max_concurrent):
        return RepairPlan(NONE, f"repair budget spent: {', '.join(busy)} repairing, "
                                f"repair.max_concurrent = {config.max_concurrent}",
                          trigger=trigger, state="waiting_for_budget")
    return RepairPlan(action, why, targets, trigger, ledgers=ledgers)


def after_attempt(recent: int, config: RepairConfig, passed: bool) -> str:
    """What follows a repair's full check: resume, stay drained (another try later), or rma."""
    if passed:
        return "resume"
    return RMA if recent >= config.max_attempts else "stay_drained"


def rma_finding(gpu: Optional[int], attempts: int, trigger: Optional[Finding],
                ref: Optional[LedgerRef] = None) -> Finding:
    """The finding whose drain reason marks the node rma (CONTRACTS §4: `check=value rma`):
    on the GPU that used up its attempts, by its index, or (a GPU NVML no longer lists) by
    its PCI address and serial; the node's own, naming no GPU."""
    cause = f" (last: {trigger.check})" if trigger is not None else ""
    who = ledger_words(ref) if ref is not None else f"GPU {gpu}"
    missing = ref is not None and ref.gpu is None and not ref.key.startswith(NODE_LEDGER)
    return Finding("repair.attempts", Severity.FAIL, f"{who} needed {attempts} repairs within "
                   f"the repair window{cause}: RMA", gpu=gpu, value=attempts, action=Action.RMA,
                   pci=ref.pci if missing and ref is not None else None,
                   serial=(ref.serial or None) if missing and ref is not None else None)


# The node's repair state after each step the repair loop logs (act.repair's
# GPU_HEALTHCHECK_REPAIR_STEP): the gpu_healthcheck_repair_state metric.  A reset is followed at
# once by its full check (validating); "skipped" carries its own state (a wait, or drained).
STEP_STATES = {"claimed": "", "budget": "waiting_for_budget", "reset": VALIDATING,
               "reset_refused": DRAINED, "reset_blocked": BLOCKED, "reboot": REBOOTING, "validating": VALIDATING,
               "resumed": IN_SERVICE, "still_failing": DRAINED, "unvalidated": DRAINED,
               "rma": "rma",
               "would_reset": DRAINED, "would_reboot": DRAINED, "would_rma": DRAINED,
               "rebooting": REBOOTING, "booted": VALIDATING, "reboot_timed_out": REBOOT_TIMED_OUT,
               "reboot_cancelled": DRAINED, "stale_claim": DRAINED, "fabric_retest": FABRIC_RETEST,
               "verifying": VERIFYING, "verified": IN_SERVICE, "lemon": DRAINED, "would_verify": DRAINED, "suspect_fault": DRAINED,
               "verify_kept": DRAINED}


def state_after(step: str, action: str, state_field: str) -> Optional[str]:
    """The repair state a step leaves the node in; None: the step says nothing of it (an
    error, slurmctld not answering)."""
    if step == "claimed":
        return {RESET: RESETTING, REBOOT: REBOOTING, VERIFY: VERIFYING}.get(action)
    if step == "skipped":
        return state_field if state_field in REPAIR_STATES else None
    return STEP_STATES.get(step)
