"""After the deep tests: NVML and the kernel log read again, so what the tests provoked is
judged by the run that provoked them (a DBE the memory test hit, a row remap it made pending,
an Xid the load raised).

    snapshot = after_deep(snapshot, config, started_mono, started_wall)

The GPUs' error counters (deepmodel.AFTER_FIELDS) in the snapshot become the re-read ones, so
every ECC, remap and retired-pages check judges the state after the tests; the counters before
are kept in `deep.before` for deep.after (checks/deepload.py), which names what changed.  The
kernel log is read again over the run's own window (so the Xid checks judge lines written during
the tests) and once more from the tests' start, for deep.after.  A re-read that fails is said
in `deep.after_error` (unknown), never a drain.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..config import Config
from ..deepmodel import AFTER_FIELDS, GpuCounters
from ..logmodel import KernelLogWindow
from ..model import NodeSnapshot
from .kernlog import read_kernel_log
from .nvml import read_nvml


def counters(gpu: Any) -> tuple:
    return tuple(getattr(gpu, name) for name, _ in AFTER_FIELDS)


def after_deep(snapshot: NodeSnapshot, config: Config, started_mono: float, started_wall: float,
               window: Optional[KernelLogWindow] = None) -> NodeSnapshot:
    """The snapshot with NVML's counters and the kernel log as they are after the deep tests."""
    deep = snapshot.deep
    if deep is None:
        return snapshot
    tested = {g.index for g in deep.gpus if g.status != "not_run"}
    before = tuple(GpuCounters(g.index, g.uuid or "", counters(g)) for g in snapshot.gpus if g.index in tested)
    nvml = read_nvml(config.nvml_timeout_s)
    error = None
    if nvml.error is not None:
        error = f"NVML could not be read again after the tests: {nvml.error} {nvml.error_detail}".strip()
    again: Dict[str, Any] = {g.uuid: g for g in nvml.gpus if g.uuid}
    gpus = []
    for g in snapshot.gpus:
        now = again.get(g.uuid or "") if g.index in tested else None
        if now is not None:
            g = g._replace(**{name: getattr(now, name) for name, _ in AFTER_FIELDS})
        elif g.index in tested and error is None:
            error = f"GPU {g.index} ({g.uuid}) is gone from NVML after the deep tests"
        gpus.append(g)
    during = read_kernel_log(config.kernel_log, KernelLogWindow(since_monotonic_s=started_mono,
                                                                since_wallclock=started_wall))
    if during.error and error is None:
        error = f"the kernel log could not be read again after the tests: {during.error}"
    snapshot = snapshot._replace(gpus=tuple(gpus), deep=deep._replace(
        before=before, during_xids=during.events, after_error=error, after_ran=True))
    if window is not None and snapshot.kernel_log is not None:
        snapshot = snapshot._replace(kernel_log=read_kernel_log(config.kernel_log, window))
    return snapshot
