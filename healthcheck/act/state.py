"""State files in `state_dir`: the prolog's per-job baseline and a not-yet-applied drain.

    store = StateStore("/var/lib/gpu-healthcheck")
    store.write_baseline(Baseline(job_id="1234", ...))      # jobs/1234.json, mode 0600
    baseline, error = store.read_baseline("1234")
    store.write_pending(PendingDrain(reason="gpu-healthcheck: ...", ...))

We run as root in a directory a user might reach: every read, write and unlink goes through
the safe-file layer (healthcheck.safefile), so a planted symlink is never followed and a reader
never sees half a file.  A directory owned by another user or writable by group or others is
refused (a user who owns state_dir could plant a pending drain with her own reason).
Directories are 0700.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from ..logmodel import KernelLogPosition
from ..model import ERR, WARNING, Baseline, GpuBaseline, LogEvent, NodeSnapshot
from ..staterecords import KnownGpu, OurDrain, PendingDrain, XidAck
from ..netmodel import PortBaseline
from ..safefile import SafeFileError, atomic_write, open_dir, read_file, unlink_file

JOBS = "jobs"
PENDING = "pending-drain.json"
ACKS = "xid-acks.json"
OUR_DRAIN = "our-drain.json"
KNOWN_GPUS = "known-gpus.json"


# The state store's errors are the safe-file layer's: a directory or file that cannot be trusted.
StateError = SafeFileError


def _check_fields(cls: Any, data: Any) -> Dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"expected an object for {cls.__name__}")
    names = set(cls._fields)
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)} in {cls.__name__}")
    return data


def _plain(value: Any) -> Any:
    """Records as JSON objects (json.dumps would write a NamedTuple as a list)."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def baseline_to_json(baseline: Baseline) -> bytes:
    return json.dumps(_plain(baseline), sort_keys=True).encode()


def baseline_from_json(raw: bytes) -> Baseline:
    """Raises ValueError (or a subclass) on anything that is not a baseline we wrote."""
    data = _check_fields(Baseline, json.loads(raw.decode("utf-8")))
    gpus = tuple(GpuBaseline(**_check_fields(GpuBaseline, g)) for g in data.get("gpus") or ())
    for gpu in gpus:
        for name in GpuBaseline._fields:
            value = getattr(gpu, name)
            if name == "uuid":
                if not isinstance(value, str):
                    raise ValueError("uuid must be a string")
            elif value is not None and not isinstance(value, (int, bool)):
                raise ValueError(f"{name} must be a number")
    log = data.get("kernel_log")
    position = KernelLogPosition(**_check_fields(KernelLogPosition, log)) if log else None
    # a file the prolog of an older version wrote has no "ports": none recorded
    ports = tuple(PortBaseline(**_check_fields(PortBaseline, p)) for p in data.get("ports") or ())
    for port in ports:
        if not isinstance(port.name, str):
            raise ValueError("port name must be a string")
        for name in PortBaseline._fields[1:]:
            value = getattr(port, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"port {port.name}: {name} must be a number")
    if not isinstance(data.get("job_id"), str) or not isinstance(data.get("taken_at"), (int, float)):
        raise ValueError("job_id and taken_at are required")
    return Baseline(job_id=data["job_id"], taken_at=float(data["taken_at"]), gpus=gpus,
                    kernel_log=position, ports=ports)


def _job_file(job_id: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "._-+" else "_" for ch in job_id)[:64]
    return f"{safe}.json"


class StateStore:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.jobs_dir = os.path.join(state_dir, JOBS)

    def write_baseline(self, baseline: Baseline) -> None:
        _open_and_close(self.state_dir)
        # not fsynced: every job start pays for it, and a lost baseline only costs attribution
        atomic_write(self.jobs_dir, _job_file(baseline.job_id), baseline_to_json(baseline),
                     durable=False)

    def read_baseline(self, job_id: str) -> Tuple[Optional[Baseline], Optional[str]]:
        """(baseline, None), or (None, why there is none) — never raises."""
        path = os.path.join(self.jobs_dir, _job_file(job_id))
        try:
            raw = read_file(self.jobs_dir, _job_file(job_id))
        except OSError as exc:
            return None, f"cannot read baseline {path}: {exc.strerror or exc}"
        if raw is None:
            return None, f"no prolog baseline for job {job_id} ({path})"
        try:
            baseline = baseline_from_json(raw)
        except (ValueError, TypeError) as exc:
            return None, f"corrupt baseline {path}: {exc}"
        if baseline.job_id != job_id:
            return None, f"baseline {path} belongs to job {baseline.job_id}, not {job_id}"
        return baseline, None

    def remove_baseline(self, job_id: str) -> None:
        unlink_file(self.jobs_dir, _job_file(job_id))

    def write_pending(self, pending: PendingDrain) -> None:
        atomic_write(self.state_dir, PENDING, json.dumps(_plain(pending), sort_keys=True).encode())

    def read_pending(self) -> Tuple[Optional[PendingDrain], Optional[str]]:
        path = os.path.join(self.state_dir, PENDING)
        try:
            raw = read_file(self.state_dir, PENDING)
        except OSError as exc:
            return None, f"cannot read pending drain {path}: {exc.strerror or exc}"
        if raw is None:
            return None, None
        try:
            data = dict(_check_fields(PendingDrain, json.loads(raw.decode("utf-8"))))
            data["checks"] = tuple(str(c) for c in data.get("checks") or ())
            pending = PendingDrain(**data)
            if not isinstance(pending.reason, str) or not isinstance(pending.node, str):
                raise ValueError("reason and node must be strings")
        except (ValueError, TypeError) as exc:
            return None, f"corrupt pending drain {path}: {exc}"
        return pending, None

    def clear_pending(self, expected: Optional[PendingDrain] = None) -> None:
        """Remove the pending drain; with `expected`, only if it is still that one."""
        if expected is not None:
            current, _ = self.read_pending()
            if current is not None and current != expected:
                return
        unlink_file(self.state_dir, PENDING)


def _open_and_close(path: str) -> None:
    os.close(open_dir(path, True))


def acks_to_json(acks: Dict[str, XidAck]) -> bytes:
    return json.dumps({pci: _plain(a) for pci, a in sorted(acks.items())}, sort_keys=True).encode()


def acks_from_json(raw: bytes) -> Dict[str, XidAck]:
    """Raises ValueError (or a subclass) on anything that is not an acks file we wrote."""
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("expected an object")
    acks = {}
    for pci, entry in data.items():
        entry = dict(_check_fields(XidAck, entry))
        entry["position"] = KernelLogPosition(**_check_fields(KernelLogPosition, entry.get("position")))
        ack = XidAck(**entry)
        if ack.pci != pci or not isinstance(ack.count, int) or not isinstance(ack.acked_at, (int, float)):
            raise ValueError(f"malformed entry for {pci}")
        acks[pci] = ack
    return acks


def read_acks(store: "StateStore") -> Tuple[Dict[str, XidAck], Optional[str]]:
    """({pci: ack}, None), or ({}, why) — never raises."""
    path = os.path.join(store.state_dir, ACKS)
    try:
        raw = read_file(store.state_dir, ACKS)
    except OSError as exc:
        return {}, f"cannot read Xid acknowledgements {path}: {exc.strerror or exc}"
    if raw is None:
        return {}, None
    try:
        return acks_from_json(raw), None
    except (ValueError, TypeError) as exc:
        return {}, f"corrupt Xid acknowledgements {path}: {exc}"


def write_acks(store: "StateStore", acks: Dict[str, XidAck]) -> None:
    atomic_write(store.state_dir, ACKS, acks_to_json(acks))


def read_our_drain(store: "StateStore") -> Optional[OurDrain]:
    try:
        raw = read_file(store.state_dir, OUR_DRAIN)
        if raw is None:
            return None
        data = dict(_check_fields(OurDrain, json.loads(raw.decode("utf-8"))))
        data["volatile_ecc"] = tuple((str(p), int(n)) for p, n in data.get("volatile_ecc") or ())
        data["checks"] = tuple(str(c) for c in data.get("checks") or ())
        for key in ("position", "drain_position"):  # a note from before 0.x has none
            if data.get(key) is not None:
                data[key] = KernelLogPosition(**_check_fields(KernelLogPosition, data[key]))
        return OurDrain(**data)
    except (OSError, ValueError, TypeError):
        return None  # an unreadable note only costs the automatic acknowledgement


def write_our_drain(store: "StateStore", drain: OurDrain) -> None:
    atomic_write(store.state_dir, OUR_DRAIN, json.dumps(_plain(drain), sort_keys=True).encode())


def clear_our_drain(store: "StateStore") -> None:
    unlink_file(store.state_dir, OUR_DRAIN)


def record_baseline(store: "StateStore", snapshot: "NodeSnapshot", job_id: str, kernel_log: str,
                    events: "List[LogEvent]", marker: bool = True) -> KernelLogPosition:
    """The prolog's baseline for the job's epilog: the counters of every GPU NVML identified,
    and where the kernel log stands now (only Xids after it are the job's): on /dev/kmsg by
    the seq of a marker record (`kernel_log_marker`), else of the last record.  Returns that
    position; one taken by the clocks alone is logged, with why."""
    from ..read.kernlog import position_and_why

    # a baseline field is the snapshot field of the same name
    gpus = tuple(GpuBaseline(**{name: getattr(g, name) for name in GpuBaseline._fields})
                 for g in snapshot.gpus if g.uuid and g.lost is None)
    # and of every RDMA port: its state, rate and error counters (ib.port_state, ib.errors)
    ports = tuple(PortBaseline(**{name: getattr(p, name) for name in PortBaseline._fields})
                  for p in (snapshot.network.ports if snapshot.network else ()))
    position, why = position_and_why(kernel_log, marker, f"job {job_id} prolog")
    if why:
        events.append(LogEvent("error", WARNING, f"kernel log position for job {job_id} taken by "
                                                 f"the clock, not by kmsg sequence number: {why}; "
                                                 f"the epilog's Xid window may drift with the "
                                                 f"printk clock"))
    baseline = Baseline(job_id=job_id, taken_at=time.time(), gpus=gpus,
                        kernel_log=position, ports=ports)
    try:
        store.write_baseline(baseline)
    except OSError as exc:
        events.append(LogEvent("error", ERR, f"cannot write the baseline for job {job_id} in "
                                             f"{store.state_dir}: {exc}; the epilog will judge "
                                             f"absolute counters"))
    return position


def read_known_gpus(store: "StateStore") -> Tuple[Tuple[KnownGpu, ...], Optional[str]]:
    """(the GPUs earlier runs listed, None), or ((), why) — never raises."""
    path = os.path.join(store.state_dir, KNOWN_GPUS)
    try:
        raw = read_file(store.state_dir, KNOWN_GPUS)
        if raw is None:
            return (), None
        data = json.loads(raw.decode("utf-8"))
        known = tuple(KnownGpu(**_check_fields(KnownGpu, g)) for g in data["gpus"])
        for gpu in known:
            if not isinstance(gpu.index, int) or not all(isinstance(v, str) for v in (gpu.pci, gpu.serial, gpu.uuid)):
                raise ValueError(f"malformed entry {gpu}")
        return known, None
    except OSError as exc:
        return (), f"cannot read the known GPUs {path}: {exc.strerror or exc}"
    except (ValueError, TypeError, KeyError) as exc:
        return (), f"corrupt known GPUs {path}: {exc}"


def known_after(known: Tuple[KnownGpu, ...], snapshot: "NodeSnapshot", now: float) -> Tuple[KnownGpu, ...]:
    """What the known-GPU record holds after this run (pure): every GPU NVML identified now
    (PCI address and a serial or UUID, not lost), and every earlier one at an address no GPU
    answers from now, so that a GPU gone from the bus stays known until a board takes its
    place.  Ordered by PCI address."""
    from ..pci import normalise_pci

    def where(pci: str) -> object:
        try:
            return normalise_pci(pci)
        except ValueError:
            return pci
    now_seen = {where(g.pci_bus_id): KnownGpu(g.index, g.pci_bus_id, g.serial or "", g.uuid or "", round(now, 3))
                for g in snapshot.gpus
                if g.lost is None and g.pci_bus_id and (g.serial or g.uuid)}
    kept = {where(k.pci): k for k in known if where(k.pci) not in now_seen}
    merged = {**kept, **now_seen}
    return tuple(merged[k] for k in sorted(merged, key=lambda k: (0, k, "") if isinstance(k, tuple)
                                           else (1, (), str(k))))


def remember_lost(store: "StateStore", index: int, pci: str) -> None:
    """Keep a lost GPU that no run had listed, by the address that named it
    (decide.ledgers.name_unseen), unless an entry is at that address: after the boot, the GPU
    NVML lists no more is that one.  Raises OSError."""
    from ..pci import normalise_pci

    known, _ = read_known_gpus(store)
    if any(k.pci and normalise_pci(k.pci) == normalise_pci(pci) for k in known if _is_pci(k.pci)):
        return
    after = known + (KnownGpu(index, pci, "", "", round(time.time(), 3)),)
    atomic_write(store.state_dir, KNOWN_GPUS,
                 json.dumps({"schema": 1, "gpus": [_plain(k) for k in after]}, sort_keys=True).encode())


def _is_pci(text: str) -> bool:
    from ..pci import normalise_pci

    try:
        normalise_pci(text)
    except ValueError:
        return False
    return True


def remember_gpus(store: "StateStore", snapshot: "NodeSnapshot", events: "List[LogEvent]") -> None:
    """Write the known-GPU record when this run changed it (a GPU's identity, or one more);
    a record that cannot be written is logged: the next run tries again."""
    if snapshot.nvml_error is not None:
        return
    known, why = read_known_gpus(store)
    if why:
        events.append(LogEvent("error", WARNING, f"{why}: written again from this run"))
    after = known_after(known, snapshot, time.time())
    if [k._replace(seen_at=0.0) for k in after] == [k._replace(seen_at=0.0) for k in known]:
        return
    try:
        atomic_write(store.state_dir, KNOWN_GPUS,
                     json.dumps({"schema": 1, "gpus": [_plain(k) for k in after]}, sort_keys=True).encode())
    except OSError as exc:
        events.append(LogEvent("error", WARNING, f"cannot write the known GPUs in {store.state_dir}: "
                                                 f"{exc}; a GPU that vanishes is not named"))
