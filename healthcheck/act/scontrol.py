"""The one door to Slurm's controller: scontrol, by absolute path, with a timeout on every call.

    ctl = Scontrol(find_scontrol(config.scontrol, os.environ), timeout_s=10)
    nodes = ctl.show_nodes()                 # one `scontrol -o show nodes` call
    ctl.drain("gpu-a", "gpu-healthcheck: gpu3 ... epilog job=1234")
    ctl.resume("gpu-a")
    ctl.set_admin_comment("1234", "gpu-healthcheck: ...")

Arguments are a list (never a shell); reasons are built by verdict.drain_reason from our own
findings and sanitised there.  Slurm's guide warns against Slurm commands in a prolog (load on
the controller at every job start), so callers only come here when there is something to do.
"""

from __future__ import annotations

import re
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ..model import DoorError
from ..tools import DEFAULT_PATH, find_tool  # noqa: F401  (DEFAULT_PATH: re-exported)
from ..records import NamedTuple
from ..decide.verdict import MAX_COMMENT_BYTES, NodeState, beyond_budget, gpu_nodes, is_ours, sanitise



NO_STEPS = "No job steps exist on this node"
# `scontrol -o show nodes` prints about 1 KiB a node: 64 MiB holds a 50,000-node cluster
SCONTROL_CAP_BYTES = 64 << 20


class ScontrolError(DoorError):
    """scontrol could not do what we asked: missing, non-zero exit, or past its timeout."""

    def __init__(self, argv: Sequence[str], problem: str) -> None:
        super().__init__(f"{' '.join(argv[:4])}: {problem}")
        self.argv = list(argv)
        self.problem = problem


def find_scontrol(configured: Optional[str], environ: Mapping[str, str]) -> str:
    return find_tool("scontrol", configured, environ)


_NODE_NAME_RE = re.compile(r"(?:^|\s)NodeName=(\S+)")
_STATE_RE = re.compile(r"\sState=(\S+)")
# Reason=<text> [user@time] is printed last on the line; the text may hold spaces and '='.
# The text is "empty, or ends on a non-space" ((?:.*?\S)??) rather than a bare .*?: the same
# match, but the ending is tried only after a non-space character.  A bare .*? tried it at
# every position of a run of spaces, each try scanning the rest of the run: quadratic, so one
# reason of 64 KiB of blanks took over a minute (found by tests/fuzz/fuzz_scontrol.py).
_REASON_RE = re.compile(r"\sReason=(?P<text>(?:.*?\S)??)(?:\s+\[(?P<who>[^\]@\s]+)@(?P<when>[^\]\s]+)\])?"
                        r"(?=\s+(?:Comment|Extra|ExtSensors\w*|CurrentWatts|Partitions|"
                        r"AllocTRES|CfgTRES)=|\s*$)")


_GRES_RE = re.compile(r"\sGres=(\S+)")
_BOOT_RE = re.compile(r"\sBootTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
_PARTITIONS_RE = re.compile(r"\sPartitions=(\S+)")
# Comment=<text> is free text printed after Reason (22.05+), to the end of the line.
_COMMENT_RE = re.compile(r"\sComment=([^\n]*)$")


def parse_node_line(line: str) -> Optional[NodeState]:
    """One line of `scontrol -o show nodes`; None when it names no node."""
    name = _NODE_NAME_RE.search(line)
    if not name:
        return None
    state = _STATE_RE.search(line)
    reason_match = _REASON_RE.search(line)
    reason = reason_match.group("text").strip() if reason_match else None
    if reason in ("", "(null)", "none"):
        reason = None
    when = reason_match.group("when") if reason_match and reason else None
    gres = _GRES_RE.search(line)
    comment = _COMMENT_RE.search(line)
    boot = _BOOT_RE.search(line)
    partitions = _PARTITIONS_RE.search(line)
    return NodeState(name=name.group(1), state=state.group(1) if state else "UNKNOWN",
                     reason=reason, reason_time=when or None,
                     gres=None if gres is None else ("" if gres.group(1) == "(null)" else gres.group(1)),
                     comment=comment.group(1).strip() if comment else None,
                     boot_time=boot.group(1) if boot else None,
                     partitions=tuple(partitions.group(1).split(",")) if partitions else None)


def reason_time(line: str) -> Optional[str]:
    """The time stamp Slurm adds to a reason ("[root@2026-11-29T19:00:00]"), if any."""
    m = _REASON_RE.search(line)
    return m.group("when") if m and m.group("when") else None


def parse_admin_comment(text: str) -> Optional[str]:
    """AdminComment from `scontrol show job` (not -o: there the free text has a line of its
    own, so "key=value" inside it cannot be mistaken for the next field; none when a job's name
    or comment adds a second such line: slurmjob.job_line_value)."""
    from ..slurmjob import job_line_value

    return job_line_value(text, "AdminComment")


def parse_show_nodes(text: str) -> List[NodeState]:
    nodes = []
    for line in text.splitlines():
        node = parse_node_line(line)
        if node is not None:
            nodes.append(node)
    return nodes


def parse_listpids(text: str) -> Dict[int, str]:
    """`scontrol listpids` output ("PID JOBID STEPID LOCALID GLOBALID" rows) as pid -> job id."""
    found: Dict[int, str] = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit() and re.match(r"^[0-9_+]{1,32}$", parts[1]):
            found[int(parts[0])] = parts[1]
    return found


# slurmctld's answer to a reservation whose name exists (slurm_strerror of
# ESLURM_RESERVATION_NAME_DUP; seen on 22.05, 24.11 and 26.05)
DUPLICATE_RESERVATION = "Duplicate reservation name"


class Reservation(NamedTuple):
    """One line of `scontrol -o show reservation`."""

    name: str
    nodes: str  # as slurmctld prints it ("gpu-a", "gpu-[a-c]")
    end_time: Optional[str]  # EndTime, the controller's zone


_RESV_RE = re.compile(r"^ReservationName=(\S+)")
_RESV_NODES_RE = re.compile(r"\sNodes=(\S+)")
_RESV_END_RE = re.compile(r"\sEndTime=(\S+)")


def parse_reservations(text: str) -> Dict[str, Reservation]:
    found: Dict[str, Reservation] = {}
    for line in text.splitlines():
        name = _RESV_RE.match(line)
        if not name:
            continue
        nodes, end = _RESV_NODES_RE.search(line), _RESV_END_RE.search(line)
        found[name.group(1)] = Reservation(name.group(1), nodes.group(1) if nodes else "",
                                           end.group(1) if end else None)
    return found


class Scontrol:
    """scontrol calls of one run.  After a call gets no answer within the timeout, the rest of
    the run's calls fail at once: slurmctld is not answering, and waiting again for each would
    spend the HealthCheckProgram's 60 s on it (the drain then waits as a pending drain)."""

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.unanswered: Optional[str] = None  # why the rest of this run's calls are skipped

    def _run(self, args: Sequence[str]) -> str:
        from ..outside import run_bounded  # only when we act: keeps the healthy prolog lean

        argv = [self.path, *args]
        if self.unanswered:
            raise ScontrolError(argv, f"not called: {self.unanswered}")
        ran = run_bounded(argv, self.timeout_s, cap_bytes=SCONTROL_CAP_BYTES, term_grace_s=1.0)
        if ran.timed_out:
            self.unanswered = f"an earlier scontrol call got no answer within {self.timeout_s:g} s"
            raise ScontrolError(argv, f"no answer within {self.timeout_s:g} s")
        if ran.error:
            raise ScontrolError(argv, ran.error)
        if ran.truncated:
            # a cut node list would silently drop nodes from the budget's count
            raise ScontrolError(argv, f"output larger than {SCONTROL_CAP_BYTES >> 20} MiB: not read")
        if ran.returncode != 0:
            err = ran.text("stderr").strip().splitlines()
            raise ScontrolError(argv, f"exit status {ran.returncode}: {err[-1] if err else ''}")
        return ran.text()

    def show_nodes_raw(self, nodes: Sequence[str] = ()) -> str:
        """`scontrol -o show nodes`, of every node or only of `nodes` (one call either way)."""
        return self._run(["-o", "show", "nodes", *([",".join(nodes)] if nodes else [])])

    def show_nodes(self) -> List[NodeState]:
        return parse_show_nodes(self.show_nodes_raw())

    def drain(self, node: str, reason: str) -> None:
        self._run(["update", f"NodeName={node}", "State=DRAIN", f"Reason={sanitise(reason)}"])

    def set_reason(self, node: str, reason: str) -> None:
        self._run(["update", f"NodeName={node}", f"Reason={sanitise(reason)}"])

    def resume(self, node: str) -> None:
        self._run(["update", f"NodeName={node}", "State=RESUME"])

    def reboot(self, node: str, reason: str) -> None:
        """`scontrol reboot reason=... NODE` on a node we drained: slurmctld runs the site's
        RebootProgram once the node is idle.  No ASAP and no nextstate, on purpose (seen on
        22.05 and 24.11, deploy/slurm/README.md): then the node's DRAIN survives the boot
        (IDLE+DRAIN, our reason + " : reboot issued"), so no job starts before our full check
        resumes it.  nextstate=DOWN clears DRAIN at registration, and with ReturnToService=2
        slurmctld makes the DOWN node IDLE at its next ping; ASAP alone on 22.05 means
        nextstate=RESUME.  A second request while one is pending is refused by slurmctld
        (24.11 exits 1, 22.05 ignores it)."""
        self._run(["reboot", f"reason={sanitise(reason)}", node])

    def create_reservation(self, name: str, nodes: Sequence[str], users: str, flags: str,
                           seconds: Optional[int] = None) -> None:
        """A reservation of `nodes` from now, for `users`: Duration=UNLIMITED (slurmctld 22.05
        makes that a year: seen), or ending `seconds` from now (EndTime=now+N, to the second).
        The fabric sweep's re-test holds a node in one while it is resumed for its partner jobs:
        no other job can start there, and a sweep killed mid-test leaves it held, never in
        service.  The repair budget's slots are reservations with fixed names: slurmctld
        refuses a second one of a name (ScontrolError whose problem has DUPLICATE_RESERVATION,
        22.05, 24.11, 26.05), atomically."""
        end = f"EndTime=now+{seconds}" if seconds is not None else "Duration=UNLIMITED"
        self._run(["create", "reservation", f"ReservationName={name}", f"Nodes={','.join(nodes)}",
                   "StartTime=now", end, f"Users={users}", f"Flags={flags}"])

    def delete_reservation(self, name: str) -> None:
        self._run(["delete", f"ReservationName={name}"])

    def show_reservations(self) -> Dict[str, Reservation]:
        """Every reservation slurmctld knows, by name, from the list of them all (`show
        reservation NAME` of an unknown one says so in words and exit statuses that differ
        between versions; the list is "No reservations in the system" or one line each, on
        every one).  Raises ScontrolError when it does not answer."""
        return parse_reservations(self._run(["-o", "show", "reservation"]))

    def reservation_exists(self, name: str) -> bool:
        """Whether slurmctld knows the reservation.  Raises ScontrolError when it does not answer."""
        return name in self.show_reservations()

    def show_job(self, job_id: str) -> str:
        """`scontrol show job ID` (several lines: AdminComment gets a line of its own)."""
        return self._run(["show", "job", job_id])

    def listpids(self, node: str) -> Dict[int, str]:
        """pid -> job id of every job process slurmd tracks on `node` (`scontrol listpids`)."""
        try:
            return parse_listpids(self._run(["listpids", "*", node]))
        except ScontrolError as exc:
            # with no job on the node scontrol exits 1 saying so (Slurm 22.05 and 24.11,
            # src/scontrol/pids.c): that is an answer, no job runs here, not a failure
            if NO_STEPS in exc.problem:
                return {}
            raise

    def set_comment(self, node: str, text: str) -> None:
        """The node's Comment (Slurm 20.11+): where a refused drain stays visible and a repair
        claims the budget, beside the site's own text (verdict.with_our_comment)."""
        self._run(["update", f"NodeName={node}", f"Comment={sanitise(text, MAX_COMMENT_BYTES)}"])

    def set_admin_comment(self, job_id: str, text: str) -> None:
        if not re.fullmatch(r"[1-9][0-9]{0,9}", job_id):  # never another job by its array syntax
            raise ScontrolError(["update", f"JobId={job_id!r}"], "not a numeric job id; not sent")
        self._run(["update", f"JobId={job_id}", f"AdminComment={sanitise(text)}"])

    def requeue(self, job_id: str) -> None:
        """`scontrol requeue ID`: the job goes back to pending and starts again on nodes
        slurmctld picks afresh (a drained node is never one of them)."""
        if not re.fullmatch(r"[1-9][0-9]{0,9}", job_id):
            raise ScontrolError(["requeue", repr(job_id)], "not a numeric job id; not sent")
        self._run(["requeue", job_id])


# How long after the second of our reason time we re-read: Slurm stamps reasons to the
# second, so a drain that ranks before ours (same or earlier second) is visible once that
# second is over on the controller.  The margin covers the node's clock running behind the
# controller's; the cap keeps a badly skewed clock from stalling a prolog.
SETTLE_MARGIN_S = 1.0
SETTLE_MAX_S = 3.0


class BudgetCheck(NamedTuple):
    """The re-read after our drain: kept, or resumed because earlier drains fill the budget."""

    kept: bool
    drained: int  # our drains the re-read saw, this one included
    total: int  # GPU nodes in the cluster
    ahead: Sequence[str]  # the drains that rank before ours and keep theirs
    resumed: bool = False  # False with kept=False: the resume failed or the reason changed


def _epoch(stamp: Optional[str]) -> Optional[float]:
    if not stamp:
        return None
    try:
        return time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def hold_budget(ctl: "Scontrol", node: str, reason: str, max_fraction: float,
                now: Callable[[], float] = time.time,
                sleep: Callable[[float], None] = time.sleep) -> BudgetCheck:
    """After draining `node` with `reason`: re-read, and resume it if it ranks past the budget.

    This is what holds drain.max_fraction when many nodes drain at once (a fleet-wide false
    positive) without a lock service: verdict.beyond_budget ranks the drains the same way on
    every node.  A node resumes only while its reason is still the one we wrote.

    Raises:
        ScontrolError: a read or the resume failed (the drain stays: a bad GPU is out of
            service, and the over-budget drain is logged by the caller).
    """
    nodes = ctl.show_nodes()
    this = next((n for n in nodes if n.name == node), None)
    stamp = _epoch(this.reason_time if this else None)
    wait = (stamp + 1.0 + SETTLE_MARGIN_S - now()) if stamp is not None else SETTLE_MARGIN_S
    if wait > 0:
        sleep(min(wait, SETTLE_MAX_S))
        nodes = ctl.show_nodes()
        this = next((n for n in nodes if n.name == node), None)
    ours = [n for n in nodes if n.drained and is_ours(n.reason)]
    past = beyond_budget(nodes, max_fraction)
    if node not in past:
        return BudgetCheck(True, len(ours), len(gpu_nodes(nodes)), ())
    ahead = sorted((n for n in ours if n.name not in past), key=lambda n: (n.reason_time or "", n.name))
    names = tuple(n.name for n in ahead)
    if this is None or this.reason != sanitise(reason):
        return BudgetCheck(False, len(ours), len(gpu_nodes(nodes)), names)
    ctl.resume(node)
    return BudgetCheck(False, len(ours), len(gpu_nodes(nodes)), names, resumed=True)
