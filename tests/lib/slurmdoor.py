"""An in-process stand-in for the scontrol door (act.scontrol.Scontrol), for the drain
protocol's unit tests: a dict of NodeState that drain/resume/update change the way slurmctld
does, a log of every call, and a switch that makes every call time out like a hung slurmctld
(after which, as the real door, it answers nothing more in the run)."""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

from healthcheck.act.scontrol import Reservation, ScontrolError
from healthcheck.decide.verdict import NodeState, sanitise


def stamp(offset_s: float = 0.0) -> str:
    """A reason time as slurmctld prints it (its local time, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + offset_s))


class FakeDoor:
    def __init__(self, nodes: List[NodeState], hung: bool = False,
                 listpids: Optional[Dict[int, str]] = None) -> None:
        self.nodes: Dict[str, NodeState] = {n.name: n for n in nodes}
        self.hung = hung
        self.unanswered: Optional[str] = None
        self.calls: List[Tuple[str, ...]] = []
        self.admin_comments: Dict[str, str] = {}
        self.others_drain_during_ours: List[NodeState] = []  # concurrent drains, seen on re-read
        self._pids = listpids or {}
        self.reservations: Dict[str, Tuple[str, ...]] = {}  # name -> its nodes
        self.hang_from: Optional[str] = None  # the first verb ("delete", "update", ...) that hangs

    def _call(self, *argv: str) -> None:
        self.calls.append(argv)
        if self.hang_from is not None and argv and argv[0] == self.hang_from:
            self.hung = True
        if self.unanswered:
            raise ScontrolError(["scontrol", *argv], f"not called: {self.unanswered}")
        if self.hung:
            self.unanswered = "an earlier scontrol call got no answer within 7.5 s"
            raise ScontrolError(["scontrol", *argv], "no answer within 7.5 s")

    def show_nodes(self) -> List[NodeState]:
        self._call("show", "nodes")
        return list(self.nodes.values())

    def drain(self, node: str, reason: str) -> None:
        self._call("update", f"NodeName={node}", "State=DRAIN")
        this = self.nodes[node]
        self.nodes[node] = this._replace(state=this.state.split("+")[0] + "+DRAIN",
                                         reason=sanitise(reason), reason_time=stamp())
        for other in self.others_drain_during_ours:
            self.nodes[other.name] = other

    def set_reason(self, node: str, reason: str) -> None:
        self._call("update", f"NodeName={node}", "Reason=")
        self.nodes[node] = self.nodes[node]._replace(reason=sanitise(reason), reason_time=stamp())

    def resume(self, node: str) -> None:
        self._call("update", f"NodeName={node}", "State=RESUME")
        this = self.nodes[node]
        self.nodes[node] = this._replace(state=this.state.split("+")[0], reason=None, reason_time=None)

    def set_comment(self, node: str, text: str) -> None:
        self._call("update", f"NodeName={node}", "Comment=")
        self.nodes[node] = self.nodes[node]._replace(comment=text or None)

    def reboot(self, node: str, reason: str) -> None:
        """`scontrol reboot reason=... NODE`: slurmctld flags the node (the boot is not simulated)."""
        self._call("reboot", f"reason={reason}", node)
        this = self.nodes[node]
        self.nodes[node] = this._replace(state=this.state + "+REBOOT_REQUESTED")

    def create_reservation(self, name: str, nodes: List[str], users: str, flags: str,
                           seconds: Optional[int] = None) -> None:
        self._call("create", "reservation", f"ReservationName={name}", f"Users={users}", f"Flags={flags}")
        if name in self.reservations:
            raise ScontrolError(["scontrol", "create"], "exit status 1: Error creating the reservation: "
                                                        "Duplicate reservation name")
        self.reservations[name] = tuple(nodes)

    def delete_reservation(self, name: str) -> None:
        self._call("delete", f"ReservationName={name}")
        if self.reservations.pop(name, None) is None:
            raise ScontrolError(["scontrol", "delete"], "exit status 1: Reservation not found")

    def show_reservations(self) -> Dict[str, Reservation]:
        """Every reservation, ending a year from now (the fake keeps no end)."""
        self._call("show", "reservation")
        end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 365 * 86400))
        return {name: Reservation(name, ",".join(nodes), end) for name, nodes in self.reservations.items()}

    def reservation_exists(self, name: str) -> bool:
        self._call("show", "reservation", name)
        return name in self.reservations

    def set_admin_comment(self, job_id: str, text: str) -> None:
        self._call("update", f"JobId={job_id}", "AdminComment=")
        self.admin_comments[job_id] = text

    def listpids(self, node: str) -> Dict[int, str]:
        self._call("listpids", node)
        return dict(self._pids)

    def changes(self) -> List[Tuple[str, ...]]:
        """The calls that changed something (everything but show and listpids)."""
        return [c for c in self.calls if c[0] == "update"]
