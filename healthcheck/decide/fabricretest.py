"""A fabric drain's repair (pure): the repair loop reboots a node the fabric sweep (or the gang
check) drained, as it reboots any drain, and the next sweep re-tests it with known-good
partners, which resumes it, drains it again for another reboot, or marks it rma.

    trigger = fabric_trigger(reason)          # the Finding the repair loop reboots for
    mark = retest_mark(1, 2, at_iso)          # "gpu-healthcheck: repair fabric_retest at=... attempts=1/2"
    why = awaiting_retest(node)               # None: the next --internode-sweep re-tests it; else why not
    decision = retest_decision(outcome, parse_retest_mark(node.comment))   # resume|reboot_again|rma|keep
    reason = retest_reason(decision, outcome, collective, reason_before)

A fabric drain's life (docs/network.md, docs/repair.md):
1. the sweep drains the node: `gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-c,gpu-e
   all_reduce_perf sweep` (the gang check: `... all_reduce_perf gang job=12`);
2. `--node --act` on it (idle, `[repair] enabled`) reboots it through the repair loop's one
   path: claim, budget, cooldown, `report_only`, and the attempt in the node's own ledger (a
   fabric fault blames no GPU);
3. the first run after the boot validates the node; its own checks pass, but they cannot see
   its fabric, so it stays drained, its Comment marked `gpu-healthcheck: repair fabric_retest
   at=<UTC> attempts=N/M` (N: the node's repairs within repair.window_s, M: repair.max_attempts,
   both as the node's own ledger and config say: the sweep runs elsewhere and reads neither);
4. the next `--internode-sweep --act` takes such a node, idle, straight into the partner round:
   it holds it in a reservation of its own (`gpu-healthcheck-retest-NODE`, Duration=UNLIMITED:
   a year on 22.05), marks it `fabric_testing`, resumes it (a drained node runs no job), runs
   the partner jobs inside the reservation, and then:
   - passed with every partner: the reservation is deleted, the node is in service;
   - failed with every partner: N < M drains it again with the new figure (back to step 2,
     the loop reboots it again); N >= M drains it with `rma` after the figure (CONTRACTS §4),
     with an evidence file;
   - mixed, too few partners, a job that never ran, the sweep stopped: drained again, still
     marked `fabric_retest`, re-tested at the next sweep.
   The reservation goes only once the node is drained again or has passed, so a sweep killed
   in between (or an scontrol that did not answer) leaves the node held, never in service; the
   next sweep finds its `fabric_testing` mark and drains it again (interrupted).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

from ..model import Action, Finding, Severity
from ..records import NamedTuple
from .sweep import BAD, PASS, FABRIC_PREFIX, JobResult, NodeOutcome, fabric_reason
from .verdict import PREFIX, NodeState, is_fabric_reason, is_ours, is_rma, our_comment, sanitise

# The repair states of a fabric drain (decide.repair.REPAIR_STATES): rebooted and waiting for
# the sweep's re-test; held by the sweep in its reservation while the partner jobs run.
FABRIC_RETEST, FABRIC_TESTING = "fabric_retest", "fabric_testing"
RESERVATION_PREFIX = "gpu-healthcheck-retest-"
INTERRUPTED = "retest=interrupted"  # the reason's figure when a killed sweep's test is redone

_RETEST_RE = re.compile(rf"^{re.escape(PREFIX)} repair (?P<state>{FABRIC_RETEST}|{FABRIC_TESTING})"
                        r"(?: at=(?P<at>\S+))?(?: attempts=(?P<n>\d+)/(?P<max>\d+))?"
                        r"(?: sweep=(?P<sweep>\S+))?(?: resv=(?P<resv>\S+))?")
# What slurmctld appends to the reason of a node it reboots (decide.repair): " : reboot issued"
_SLURM_SUFFIX_RE = re.compile(r"\s+:\s+reboot\b.*$")

RESUME, REBOOT_AGAIN, RMA, KEEP = "resume", "reboot_again", "rma", "keep"


class RetestMark(NamedTuple):
    """Our part of a fabric-drained node's Comment after its reboot."""

    state: str  # FABRIC_RETEST | FABRIC_TESTING
    at: str = ""
    attempts: Optional[int] = None  # the node's repairs within repair.window_s at its reboot
    max_attempts: Optional[int] = None  # the node's repair.max_attempts
    sweep: str = ""  # FABRIC_TESTING: the sweep holding it
    reservation: str = ""  # FABRIC_TESTING: the reservation holding it


def parse_retest_mark(comment: Optional[str]) -> Optional[RetestMark]:
    m = _RETEST_RE.match(our_comment(comment) or "")
    if m is None:
        return None
    return RetestMark(m.group("state"), m.group("at") or "",
                      int(m.group("n")) if m.group("n") else None,
                      int(m.group("max")) if m.group("max") else None,
                      m.group("sweep") or "", m.group("resv") or "")


def _attempts(attempts: Optional[int], max_attempts: Optional[int]) -> str:
    return f" attempts={attempts}/{max_attempts}" if attempts is not None and max_attempts else ""


def retest_mark(attempts: Optional[int], max_attempts: Optional[int], at_iso: str) -> str:
    return f"{PREFIX} repair {FABRIC_RETEST} at={at_iso}{_attempts(attempts, max_attempts)}"


def testing_mark(mark: RetestMark, sweep_id: str, reservation: str, at_iso: str) -> str:
    return (f"{PREFIX} repair {FABRIC_TESTING} at={at_iso}{_attempts(mark.attempts, mark.max_attempts)} "
            f"sweep={_word(sweep_id)} resv={_word(reservation)}")


def waiting_mark(mark: RetestMark, at_iso: str) -> str:
    """The fabric_retest mark again, after a test that told nothing (its attempts kept)."""
    return retest_mark(mark.attempts, mark.max_attempts, at_iso)


def reservation_name(node: str) -> str:
    return RESERVATION_PREFIX + _word(node)


def _word(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._:-]", "_", text)[:120]


def clean_reason(reason: Optional[str]) -> str:
    """Our reason without what slurmctld appended when it rebooted the node."""
    return _SLURM_SUFFIX_RE.sub("", reason or "").strip()


def fabric_trigger(reason: Optional[str]) -> Optional[Finding]:
    """The finding the repair loop reboots a fabric drain for (node-wide: it blames no GPU, so
    the attempt goes into the node's own ledger); None for any other reason, and for rma."""
    if not is_fabric_reason(reason) or is_rma(reason):
        return None
    words = clean_reason(reason)[len(FABRIC_PREFIX):].split()
    figure = words[0] if words else "failed"
    partners = next((w[len("partners="):] for w in words if w.startswith("partners=")), "-")
    return Finding("fabric", Severity.FAIL,
                   f"drained for its fabric ({figure} with partners {partners}): this node's own "
                   f"checks cannot see it; a reboot resets its NICs and GPUs, then the next "
                   f"--internode-sweep re-tests it with known-good partners",
                   value=figure, action=Action.REBOOT)


def waiting_state(this: NodeState) -> Optional[str]:
    """FABRIC_RETEST or FABRIC_TESTING when the node is ours, fabric-drained (not rma) and so
    marked: the repair loop waits for the sweep; None otherwise."""
    mark = parse_retest_mark(this.comment)
    if mark is None or not (this.drained and is_fabric_reason(this.reason) and not is_rma(this.reason)):
        return None
    return mark.state


def stale_retest_mark(this: NodeState) -> bool:
    """A fabric_retest mark on a node that no longer waits for a re-test (resumed by a person,
    drained by someone else, rma since): the node's own run drops it.  A fabric_testing mark is
    the sweep's, which its reservation speaks for: never the node's to drop."""
    mark = parse_retest_mark(this.comment)
    return mark is not None and mark.state == FABRIC_RETEST and waiting_state(this) is None


def awaiting_retest(this: NodeState) -> Optional[str]:
    """None when the next sweep re-tests this node now: ours, fabric-drained, not rma, marked
    fabric_retest, and plainly idle (IDLE+DRAIN: no job, no reboot flag, responding); else why
    not, in words (a node without the mark: "")."""
    mark = parse_retest_mark(this.comment)
    if mark is None or mark.state != FABRIC_RETEST:
        return ""
    if not is_ours(this.reason) or not is_fabric_reason(this.reason):
        return f"its re-test mark is stale (reason now: {this.reason})"
    if is_rma(this.reason):
        return "marked rma: never re-tested"
    flags = set(this.state.upper().replace("*", "+NOT_RESPONDING").split("+"))
    if not flags <= {"IDLE", "DRAIN", "DRAINED"} or "IDLE" not in flags or not this.drained:
        return f"awaiting a fabric re-test, but not idle ({this.state})"
    return None


class Recovery(NamedTuple):
    """What a sweep does with a fabric_testing mark a killed sweep left (one sweep runs at a
    time, so any such mark at a sweep's start is stale)."""

    drain: bool  # drain the node again (its reservation still holds it: it was never released)
    mark: str  # "retest": mark it fabric_retest again; "clear": drop the mark; "": leave it
    delete_reservation: bool


def recovery(this: NodeState, held: bool) -> Recovery:
    """`held`: the node's reservation still exists.  While it does the test never ended, so the
    node is drained again (unless it is drained already, by us or someone else) and re-tested;
    without it the test had ended (passed and released, or an admin deleted it): the mark goes,
    or, on a node still fabric-drained by us, turns back into fabric_retest."""
    ours_fabric = this.drained and is_fabric_reason(this.reason) and not is_rma(this.reason)
    if held:
        if not this.drained:
            return Recovery(True, "retest", True)
        return Recovery(False, "retest" if ours_fabric else "clear", True)
    return Recovery(False, "retest" if ours_fabric else "clear", False)


def interrupted_reason(collective: str) -> str:
    return sanitise(f"{FABRIC_PREFIX}{INTERRUPTED} partners=- {collective} sweep")


def retest_decision(outcome: NodeOutcome, mark: Optional[RetestMark]) -> str:
    """What the sweep does with a re-tested node: RESUME (passed with every partner), RMA
    (failed with every partner, and the node had used up repair.max_attempts when it was
    rebooted), REBOOT_AGAIN (failed, attempts left: a new fabric drain, the loop reboots it),
    KEEP (anything else: drained again, re-tested at the next sweep)."""
    if outcome.outcome == PASS:
        return RESUME
    if outcome.outcome == BAD:
        used = mark is not None and mark.attempts is not None and mark.max_attempts is not None \
            and mark.attempts >= mark.max_attempts
        return RMA if used else REBOOT_AGAIN
    return KEEP


def retest_reason(decision: str, outcome: NodeOutcome, collective: str, before: str) -> Optional[str]:
    """The reason the node is drained with after its re-test; None for RESUME."""
    if decision == RESUME:
        return None
    if decision in (RMA, REBOOT_AGAIN):
        return fabric_reason(outcome, collective, rma=decision == RMA)
    return clean_reason(before) or interrupted_reason(collective)


def evidence_bundle(outcome: NodeOutcome, results: Sequence[JobResult], sweep_id: str,
                    mark: Optional[RetestMark], reason: str, output_dir: str) -> Dict[str, Any]:
    """The RMA evidence of a node that failed its fabric re-test: what the sweep measured with
    whom, and where the jobs' outputs are (act.evidence writes it to state_dir/evidence/)."""
    jobs: List[Dict[str, Any]] = [
        {"job_id": r.job_id, "round": r.job.round, "kind": r.job.kind, "nodes": list(r.job.nodes),
         "busbw_gbps": r.busbw_gbps, "problem": r.problem, "skipped": r.skipped,
         "rails": [{"node": x.node, "hca": x.hca, "gbps": x.gbps, "problem": x.problem} for x in r.rails]}
        for r in results if outcome.node in r.job.nodes]
    return {"schema": 1, "kind": "fabric", "node": outcome.node, "sweep_id": sweep_id,
            "reason": reason, "why": outcome.why, "busbw_gbps": outcome.busbw_gbps,
            "partners": list(outcome.partners),
            "attempts": mark.attempts if mark else None,
            "max_attempts": mark.max_attempts if mark else None,
            "job_ids": [j["job_id"] for j in jobs if j["job_id"]], "jobs": jobs,
            "output_dir": output_dir}
