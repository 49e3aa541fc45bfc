"""Pure decisions: findings -> verdict -> what to do with the node -> exit code.

    verdict = verdict_of(findings)                       # fail > unknown > warn > pass
    reason = drain_reason(findings, gpus, Mode.EPILOG, "1234")
    # "gpu-healthcheck: gpu3 pci=00000000:41:00.0 sn=1650522003820 ecc.volatile_uncorrected=2 epilog job=1234"
    decision = decide_drain(reason, this_node, cluster_nodes, max_fraction=0.1)

Exit codes are decided here and nowhere else, because slurmd acts on them: a non-zero prolog
drains the node and requeues the job.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..model import Action, Finding, GpuSnapshot, Mode, Severity, Verdict
from ..records import NamedTuple

PREFIX = "gpu-healthcheck:"
MAX_REASON_BYTES = 255  # Slurm's accounting database stores reasons as 255-byte text
RMA_TOKEN = "rma"

_VERDICT_ORDER = [Verdict.FAIL, Verdict.UNKNOWN, Verdict.WARN]
_ACTION_RANK = {Action.RMA: 4, Action.REBOOT: 3, Action.RESET: 2, Action.DRAIN: 1, Action.NONE: 0}


def verdict_of(findings: Iterable[Finding]) -> Verdict:
    """fail > unknown > warn > pass.  info findings leave the verdict at pass."""
    seen = {f.severity for f in findings}
    for verdict in _VERDICT_ORDER:
        if Severity(verdict.value) in seen:
            return verdict
    return Verdict.PASS


def draining(findings: Iterable[Finding]) -> List[Finding]:
    """Findings that take the node out of service, worst first (RMA, reboot, reset, drain)."""
    found = [f for f in findings if f.drains]
    found.sort(key=lambda f: -_ACTION_RANK[f.action])
    return found


def sanitise(text: str, limit: int = MAX_REASON_BYTES) -> str:
    """Printable ASCII without quotes, backslashes or newlines, at most `limit` bytes.

    Reasons travel through scontrol's argument parser and into sinfo output and the accounting
    database; nothing from outside may smuggle a quote or control character in.
    """
    cleaned = "".join(ch if " " <= ch <= "~" and ch not in "\"'`\\" else "_" for ch in text)
    cleaned = re.sub(r"\s+", " ", cleaned).strip()
    return cleaned[:limit].rstrip()  # a cut at a blank must not leave one behind


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if value is None:
        return ""
    return re.sub(r"[\s=]+", "_", str(value))[:40]


def drain_reason(findings: Sequence[Finding], gpus: Sequence[GpuSnapshot], mode: Mode,
                 job_id: Optional[str]) -> Optional[str]:
    """The reason naming the worst draining finding, or None when nothing drains."""
    found = draining(findings)
    if not found:
        return None
    worst = found[0]
    parts = [PREFIX]
    gpu = next((g for g in gpus if g.index == worst.gpu), None) if worst.gpu is not None else None
    if worst.gpu is not None:
        parts.append(f"gpu{worst.gpu}")
        # each identity is one token: a serial with spaces ("1650 5220 ...") would split the
        # reason into words the parser reads as the check, and hide the rma token
        if gpu is not None and gpu.pci_bus_id:
            parts.append(f"pci={_value_text(gpu.pci_bus_id)}")
        if gpu is not None and gpu.serial:
            parts.append(f"sn={_value_text(gpu.serial)}")
        elif gpu is not None and gpu.uuid:
            parts.append(f"uuid={_value_text(gpu.uuid)}")
    elif worst.pci:
        # the HCA's, or a GPU's that NVML no longer lists: the same token, no gpuN
        parts.append(f"pci={_value_text(worst.pci)}")
        if worst.port is None and worst.serial:
            parts.append(f"sn={_value_text(worst.serial)}")
    value = _value_text(worst.value)
    if worst.port is not None:
        # an RDMA port finding: the pinned format has no port token (a word between the value
        # and the context would hide the context and job from every parser), so the port
        # rides in the value token: ib.errors=3@mlx5_0:1
        value = f"{value}@{_value_text(worst.port)}"
    parts.append(f"{worst.check}={value}" if value else worst.check)
    if worst.action is Action.RMA:
        parts.append(RMA_TOKEN)
    parts.append(mode.value)
    if job_id:
        parts.append(f"job={_value_text(job_id)}")
    if len(found) > 1:
        parts.append(f"(+{len(found) - 1} more)")
    return sanitise(" ".join(parts))


REASON_RE = (  # compiled by re on first use (its cache): a healthy prolog parses no reason
    r"^gpu-healthcheck:\s+(?:gpu(?P<gpu>\d+)\s+)?(?:pci=(?P<pci>\S+)\s+)?(?:sn=(?P<serial>\S+)\s+)?"
    r"(?:uuid=(?P<uuid>\S+)\s+)?(?P<check>[a-z_.]+)(?:=(?P<value>\S*))?(?:\s+(?P<rma>rma))?"
    r"(?:\s+(?P<context>node|prolog|epilog))?(?:\s+job=(?P<job>\S+))?(?:\s+\(\+(?P<more>\d+) more\))?")


def parse_reason(reason: str) -> Optional[Dict[str, Optional[str]]]:
    """Split one of our reasons into its columns; None when it is not ours."""
    if not reason.startswith(PREFIX):
        return None
    m = re.match(REASON_RE, reason)
    if not m:
        return {"check": None, "raw": reason}
    fields: Dict[str, Optional[str]] = dict(m.groupdict())
    fields["raw"] = reason
    return fields


def is_ours(reason: Optional[str]) -> bool:
    return bool(reason) and reason.startswith(PREFIX)  # type: ignore[union-attr]


# The fabric sweep's drains (decide/sweep.py fabric_reason) and the gang check's: a node's own
# checks cannot see its fabric, so passing them never resumes such a drain.  The repair loop
# reboots it, and the next fabric sweep's re-test with known-good partners resumes it
# (decide/fabricretest.py).
FABRIC_PREFIX = PREFIX + " fabric "
FABRIC_HOLD = ("drained for its fabric (the fabric sweep or the gang check): this node's own checks "
               "cannot see its fabric; with [repair] enabled the repair loop reboots it, and the "
               "next --internode-sweep re-tests it with known-good partners and resumes it if it passes")


def is_fabric_reason(reason: Optional[str]) -> bool:
    return bool(reason) and reason.startswith(FABRIC_PREFIX)  # type: ignore[union-attr]


# What a suspect gets (decide/verify.py): a drain for verification, which only the repair loop's
# verification at the deep level resumes, and a lemon hold, which nothing of ours resumes.
SUSPECT_PREFIX = PREFIX + " suspect "
LEMON_PREFIX = PREFIX + " lemon "
SUSPECT_HOLD = ("drained for verification as a suspect (docs/suspects.md): only the repair "
                "loop's verification at --level deep (gpu-healthcheck --repair) resumes it")
LEMON_HOLD = ("held as a lemon (docs/suspects.md): it passes its checks but has needed too many "
              "repairs; a person decides (scontrol update NodeName=... State=RESUME)")


def is_suspect_reason(reason: Optional[str]) -> bool:
    """Our drain for verification, not rma (a verification never runs on an rma node)."""
    return bool(reason) and reason.startswith(SUSPECT_PREFIX) and not is_rma(reason)  # type: ignore[union-attr]


def is_lemon_reason(reason: Optional[str]) -> bool:
    return bool(reason) and reason.startswith(LEMON_PREFIX)  # type: ignore[union-attr]


def is_rma(reason: Optional[str]) -> bool:
    """Our reason carries the ` rma ` token anywhere among its words.

    Not through REASON_RE: a reason it cannot parse (a serial with a space, written by an
    older version) must still never be resumed.  Erring towards rma keeps a node drained.
    """
    return is_ours(reason) and RMA_TOKEN in (reason or "").split()


class NodeState(NamedTuple):
    """What `scontrol show node` says of one node."""

    name: str
    state: str  # e.g. "IDLE+DRAIN", "MIXED", "DOWN+DRAIN"
    reason: Optional[str] = None  # without the " [user@time]" suffix
    reason_time: Optional[str] = None  # the suffix's time, ISO 8601 in the controller's zone
    gres: Optional[str] = None  # "gpu:8", "gpu:a100:4(S:0),mps:400"; "" = none; None = not shown
    comment: Optional[str] = None  # the node's Comment (where we note a refused drain)
    boot_time: Optional[str] = None  # BootTime: when slurmd last registered a boot (controller's zone)
    partitions: Optional[Tuple[str, ...]] = None  # Partitions=; None = not shown

    def in_partition(self, partition: Optional[str]) -> bool:
        """Whether the node is in `partition` (None or "": any)."""
        return not partition or partition in (self.partitions or ())

    @property
    def drained(self) -> bool:
        flags = set(self.state.upper().replace("*", "").split("+"))
        return bool(flags & {"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING"})

    @property
    def has_gpus(self) -> bool:
        """Whether the node has GPU gres; a line without a Gres field counts as a GPU node."""
        if self.gres is None:
            return True
        return any(part.split(":", 1)[0].strip() == "gpu" for part in self.gres.split(","))


def gpu_nodes(cluster: Sequence[NodeState]) -> List[NodeState]:
    """The nodes the drain budget is a share of: those with GPU gres.  On a mixed cluster the
    CPU nodes would otherwise inflate the budget (a share of 1000 CPU and 10 GPU nodes lets
    every GPU node drain), and on a small one deflate nothing we can drain anyway."""
    return [n for n in cluster if n.has_gpus]


REFUSED_MARK = PREFIX + " drain refused"


def refused_comment(reason: str, when: str) -> str:
    """The node Comment that makes a refused drain visible in `--cluster` (sanitised)."""
    return sanitise(f"{REFUSED_MARK} {when}: {reason}")


def refused_reason(comment: Optional[str]) -> Optional[str]:
    """The reason a refused drain would have had, from our node Comment; None if not ours."""
    ours = our_comment(comment)
    if not ours or not ours.startswith(REFUSED_MARK):
        return None
    _, _, reason = ours[len(REFUSED_MARK):].partition(": ")
    return reason or None


def refused_time(comment: Optional[str]) -> Optional[str]:
    """When the refused drain in our node Comment happened (ISO 8601), or None."""
    if not refused_reason(comment):
        return None
    return (our_comment(comment) or "")[len(REFUSED_MARK):].partition(": ")[0].strip() or None


# A node's Comment is shared with the site (a ticket number, a note for the next admin).  Our
# part (a refused drain's note, a repair claim) goes after theirs, behind this separator, and
# runs to the end of the Comment; we only ever replace or remove that part.
COMMENT_SEPARATOR = " | "
# Slurm keeps a node's Comment as free text of any length (unlike the 255-byte reason, which
# the accounting database stores); this bound only keeps a runaway text off the command line.
MAX_COMMENT_BYTES = 4096


def our_comment(comment: Optional[str]) -> Optional[str]:
    """Our part of a node's Comment: from our prefix to the end; None when there is none."""
    at = (comment or "").find(PREFIX)
    return (comment or "")[at:] if at >= 0 else None


def their_comment(comment: Optional[str]) -> str:
    """The site's part of a node's Comment: everything before ours, less our separator."""
    text = comment or ""
    at = text.find(PREFIX)
    if at >= 0:
        text = text[:at]
    text = text.rstrip()
    if text == "(null)":  # how scontrol shows an empty Comment
        return ""
    return text[:-1].rstrip() if text.endswith(COMMENT_SEPARATOR.strip()) else text


def with_our_comment(comment: Optional[str], ours: str) -> str:
    """The Comment to write: the site's part of `comment` kept as it is, ours replaced by
    `ours` ("" removes it)."""
    theirs = their_comment(comment)
    if not ours:
        return theirs
    return f"{theirs}{COMMENT_SEPARATOR}{ours}" if theirs else ours


class DrainDecision(str, enum.Enum):
    APPLY = "apply"  # call scontrol update State=DRAIN
    ALREADY_OURS = "already_ours"  # drained by us already: refresh the reason
    ADMIN_OWNED = "admin_owned"  # drained by someone else: keep their reason
    REFUSED = "refused"  # the drain budget is spent


def drain_budget(total_nodes: int, max_fraction: float) -> int:
    """How many nodes this tool may hold drained at once: at least one, so a small cluster is
    still protected from one bad GPU; at most max_fraction of the cluster."""
    return max(1, math.floor(total_nodes * max_fraction + 1e-9))


# Reasons slurmctld gives a node it set DOWN itself.  Such a node returns to service on its own
# (ReturnToService) with the bad GPU still in it, so it is not "drained by someone else": we
# drain it too (Slurm allows State=DRAIN on a DOWN node: DOWN+DRAIN, and our reason replaces
# this one), and it stays out when slurmd comes back.
SLURM_DOWN_REASONS = ("Not responding", "Node unexpectedly rebooted")


def down_by_slurm(this: NodeState) -> bool:
    """DOWN (not DRAIN, not FAIL) with a reason Slurm wrote itself, or none."""
    flags = set(this.state.upper().replace("*", "").split("+"))
    return ("DOWN" in flags and not flags & {"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"}
            and (not this.reason or this.reason.startswith(SLURM_DOWN_REASONS)))


def decide_drain(this: NodeState, cluster: Sequence[NodeState], max_fraction: float) -> DrainDecision:
    """Whether to drain this node, given the cluster as scontrol shows it now."""
    if this.drained and is_ours(this.reason):
        return DrainDecision.ALREADY_OURS
    if this.drained and not down_by_slurm(this):
        return DrainDecision.ADMIN_OWNED
    # A reason on a node in service is not a drain to respect: Slurm 24.11 keeps the last
    # reason after State=RESUME (tested; 22.05 clears it), so every node an admin once drained
    # and resumed carries one.  Treating it as the admin's would stop us draining a bad node.
    ours = sum(1 for n in _our_drains(cluster) if n.name != this.name)
    if ours + 1 > drain_budget(len(gpu_nodes(cluster)), max_fraction):
        return DrainDecision.REFUSED
    return DrainDecision.APPLY


def _our_drains(cluster: Sequence[NodeState]) -> List[NodeState]:
    return [n for n in cluster if n.drained and is_ours(n.reason)]


def beyond_budget(cluster: Sequence[NodeState], max_fraction: float) -> List[str]:
    """Our drained nodes past the budget, in the order that decides who keeps a drain.

    The pre-drain read cannot hold the budget under concurrency: every node reads the count,
    then drains, and nothing stops the others in between.  So each node drains, re-reads, and
    if it ranks past the budget it resumes itself.  The rank is (reason time, node name):
    earlier drains keep theirs, the same on every node, so the first `budget` nodes in that
    order never resume and every later one does.  The caller re-reads only after the
    controller's clock has left the second of its own reason time, so every drain that ranks
    before it is visible (Slurm stamps reasons to the second).
    """
    ranked = sorted(_our_drains(cluster), key=lambda n: (n.reason_time or "", n.name))
    return [n.name for n in ranked[drain_budget(len(gpu_nodes(cluster)), max_fraction):]]


# A repair claim (decide.repair) that holds a node drained whatever a check finds: our reboot
# is pending, or did not come back.  After the boot only the repair step resumes the node,
# once its own full check passes (act.repair); an ordinary passing run must not do it first.
REBOOT_HOLDS = (PREFIX + " repair rebooting", PREFIX + " repair reboot_timed_out")


def may_resume(this: NodeState, findings: Sequence[Finding], gpus: Sequence[GpuSnapshot],
               partial: bool = False, drain_context: Optional[str] = None,
               context_findings: Sequence[Finding] = (), level_short: Optional[str] = None) -> Optional[str]:
    """None when --node --act may resume this node, else why not.

    Only our own drain, never one an admin must clear (rma), and only once a full check of
    every GPU (never a --gpus subset) passes with clean volatile counters (the GPU was reset)
    and no pending remap, and the checks judged as the context that drained it (prolog,
    epilog: `context_findings`) no longer drain: the cause is gone, not just milder by hand.
    `level_short` (decide.levels.short_of): why this run's level cannot judge the drain.
    Never a fabric drain: FABRIC_HOLD, once everything else passes; nor a suspect's drain for
    verification (SUSPECT_HOLD: the repair loop's verification resumes it) or a lemon (LEMON_HOLD).
    """
    if not this.drained:
        return "not drained"
    if not is_ours(this.reason):
        return "drained by someone else"
    if is_rma(this.reason):
        return "drained for RMA: only an admin may resume it"
    if is_lemon_reason(this.reason):
        return LEMON_HOLD
    if (our_comment(this.comment) or "").startswith(REBOOT_HOLDS):
        return ("a reboot of ours is pending or did not come back (its Comment): the repair "
                "step proves the node healthy after the boot")
    if partial:
        return "only some GPUs were checked (--gpus): resuming needs a full check of every GPU"
    if level_short:
        return level_short
    fails = [f for f in findings if f.severity is Severity.FAIL]
    if fails:
        return f"still failing: {fails[0].check}"
    still = draining(context_findings)
    if still:
        where = f" on GPU {still[0].gpu}" if still[0].gpu is not None else ""
        return (f"the cause is still there: {still[0].check}{where} would fail the "
                f"{drain_context or 'run'} that drained it ({still[0].message})")
    unknown = [f for f in findings if f.severity is Severity.UNKNOWN]
    if unknown:
        return f"could not check everything: {unknown[0].check}"
    for gpu in gpus:
        if gpu.ecc_volatile_uncorrected:
            return f"GPU {gpu.index} volatile uncorrected ECC count is not clean"
        if gpu.remap_pending or gpu.retired_pending:
            return f"GPU {gpu.index} has a pending remap or retirement"
    if is_fabric_reason(this.reason):
        # last: FABRIC_HOLD says the node's own checks passed (the repair step after a reboot
        # then leaves it for the sweep's re-test, act.repair.await_retest)
        return FABRIC_HOLD
    if is_suspect_reason(this.reason):
        # last, as FABRIC_HOLD: the verification (act.repair) resumes it once the lemon rule
        # is applied, never a plain passing run
        return SUSPECT_HOLD
    return None
