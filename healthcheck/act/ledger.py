"""The repair ledger: every repair of a GPU, one file per GPU (its serial and PCI address, each
escaped so that two GPUs never share one: decide.repair.ledger_of) under state_dir/repair/,
written atomically (safefile), so it survives reboots and a crash leaves the old file or the new
one.

    ref = ledger_of(gpu)                                   # LedgerRef(key, legacy, serial, pci)
    attempts = read_ledger(state_dir, ref)                 # [] for a GPU never repaired
    append_attempt(state_dir, ref, Attempt(...))           # the whole file rewritten, atomically
    update_last(state_dir, ref, outcome="resumed")

A key alone (a str) names the file as it is.  A LedgerRef whose file does not exist yet reads
the file an older version kept for the GPU (keyed by serial alone, `<serial>.json`), taking
only the attempts recorded with this GPU's serial at its PCI address; the next write puts them
in the new file.  The old file is left as it was: another GPU of the same serial may still need
its own attempts from it.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Iterable, List, Optional, Tuple, Union

from ..decide.repair import Attempt, LedgerRef, legacy_attempts
from ..safefile import atomic_write, read_file

LEDGER_DIR = "repair"
MAX_ATTEMPTS_KEPT = 200  # a GPU with more is long gone to RMA; the file stays small


def ledger_dir(state_dir: str) -> str:
    return os.path.join(state_dir, LEDGER_DIR)


def ledger_name(key: str) -> str:
    return f"{key}.json"


Ref = Union[str, LedgerRef]


def _key(ref: Ref) -> str:
    return ref if isinstance(ref, str) else ref.key


def read_ledger(state_dir: str, ref: Ref) -> List[Attempt]:
    """The GPU's attempts, oldest first.  A damaged file raises ValueError naming it: the
    caller then repairs nothing (a lost count must not buy a bad GPU more attempts)."""
    attempts = _read(state_dir, _key(ref))
    if attempts is None and isinstance(ref, LedgerRef) and ref.legacy != ref.key:
        older = _read(state_dir, ref.legacy)
        attempts = legacy_attempts(older, ref) if older else None
    return attempts or []


def _read(state_dir: str, key: str) -> Optional[List[Attempt]]:
    raw = read_file(ledger_dir(state_dir), ledger_name(key))
    if raw is None:
        return None
    path = os.path.join(ledger_dir(state_dir), ledger_name(key))
    try:
        data = json.loads(raw.decode("utf-8"))
        return [Attempt(**entry) for entry in data["attempts"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: damaged repair ledger ({exc})") from None


def read_ledgers(state_dir: str, refs: Iterable[Ref]) -> Dict[str, List[Attempt]]:
    """key -> attempts, for each of `refs`."""
    return {_key(ref): read_ledger(state_dir, ref) for ref in refs}


def write_ledger(state_dir: str, ref: Ref, attempts: List[Attempt]) -> str:
    key = _key(ref)
    body = {"schema": 1, "gpu": key, "attempts": [a._asdict() for a in attempts[-MAX_ATTEMPTS_KEPT:]]}
    atomic_write(ledger_dir(state_dir), ledger_name(key),
                 (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
    return os.path.join(ledger_dir(state_dir), ledger_name(key))


def append_attempt(state_dir: str, ref: Ref, attempt: Attempt) -> Tuple[List[Attempt], str]:
    attempts = read_ledger(state_dir, ref) + [attempt]
    return attempts, write_ledger(state_dir, ref, attempts)


def update_last(state_dir: str, ref: Ref, outcome: str) -> None:
    """Set the outcome of the GPU's latest attempt (its full check has judged it)."""
    attempts = read_ledger(state_dir, ref)
    if attempts:
        attempts[-1] = attempts[-1]._replace(outcome=outcome)
        write_ledger(state_dir, ref, attempts)
