"""The repair ledger: every repair of a GPU, one file per GPU serial (UUID where the serial is
unknown) under state_dir/repair/, written atomically (safefile), so it survives reboots and a
crash leaves the old file or the new one.

    attempts = read_ledger(state_dir, key)                 # [] for a GPU never repaired
    append_attempt(state_dir, key, Attempt(...))           # the whole file rewritten, atomically
    update_last(state_dir, key, outcome="resumed")
"""

from __future__ import annotations

import json
import os
from typing import Dict, Iterable, List, Tuple

from ..decide.repair import Attempt
from ..safefile import atomic_write, read_file

LEDGER_DIR = "repair"
MAX_ATTEMPTS_KEPT = 200  # a GPU with more is long gone to RMA; the file stays small


def ledger_dir(state_dir: str) -> str:
    return os.path.join(state_dir, LEDGER_DIR)


def ledger_name(key: str) -> str:
    return f"{key}.json"


def read_ledger(state_dir: str, key: str) -> List[Attempt]:
    """The GPU's attempts, oldest first.  A damaged file raises ValueError naming it: the
    caller then repairs nothing (a lost count must not buy a bad GPU more attempts)."""
    raw = read_file(ledger_dir(state_dir), ledger_name(key))
    if raw is None:
        return []
    path = os.path.join(ledger_dir(state_dir), ledger_name(key))
    try:
        data = json.loads(raw.decode("utf-8"))
        return [Attempt(**entry) for entry in data["attempts"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: damaged repair ledger ({exc})") from None


def read_ledgers(state_dir: str, keys: Iterable[str]) -> Dict[str, List[Attempt]]:
    return {key: read_ledger(state_dir, key) for key in keys}


def write_ledger(state_dir: str, key: str, attempts: List[Attempt]) -> str:
    body = {"schema": 1, "gpu": key, "attempts": [a._asdict() for a in attempts[-MAX_ATTEMPTS_KEPT:]]}
    atomic_write(ledger_dir(state_dir), ledger_name(key),
                 (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
    return os.path.join(ledger_dir(state_dir), ledger_name(key))


def append_attempt(state_dir: str, key: str, attempt: Attempt) -> Tuple[List[Attempt], str]:
    attempts = read_ledger(state_dir, key) + [attempt]
    return attempts, write_ledger(state_dir, key, attempts)


def update_last(state_dir: str, key: str, outcome: str) -> None:
    """Set the outcome of the GPU's latest attempt (its full check has judged it)."""
    attempts = read_ledger(state_dir, key)
    if attempts:
        attempts[-1] = attempts[-1]._replace(outcome=outcome)
        write_ledger(state_dir, key, attempts)
