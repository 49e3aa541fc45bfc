"""The registry every check module registers into, the helpers checks share, and run_checks.

A GPU check is `fn(gpu, node, ctx) -> Iterable[Finding]` and runs for every GPU NVML reported
(lost GPUs only get `gpu.lost`); a node check is `fn(node, ctx)`.  A multi-node check
(`internode_check`, checks/internode.py) judges what collectives over several nodes concluded of
one node; it has no snapshot to run over, so it sits in `INTERNODE`, beside the catalogue that
run_checks runs, and the fabric sweep and the gang check call it.  `--list-checks` lists both.  One guard surrounds every
check: an exception inside a check becomes an `unknown` finding for that check (never a drain),
and its traceback is returned for logging.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from ..config import Config
from ..model import Action, Finding, GpuSnapshot, Mode, NodeSnapshot, Severity
from ..records import NamedTuple

GpuCheck = Callable[[GpuSnapshot, NodeSnapshot, "CheckContext"], Iterable[Finding]]
NodeCheck = Callable[[NodeSnapshot, "CheckContext"], Iterable[Finding]]

class CheckContext(NamedTuple):
    config: Config
    mode: Mode
    level: str = "quick"
    # Set by the --gpus or the job's GPUs: the checks that belong to "the GPUs under test"
    # (leftover processes, leaked memory, the CUDA probe) consider only these.
    selected: Optional[Tuple[int, ...]] = None

    def is_selected(self, index: int) -> bool:
        return self.selected is None or index in self.selected


class CheckSpec(NamedTuple):
    """One registered check and what `--list-checks` says about it.

    severity and action are the worst the check reports and what that finding calls for (a
    check may report less: info history, a warning outside the prolog); threshold_key is the
    config key that sets its limit (None: a fixed limit, given in the docstring).
    """

    check_id: str
    scope: str  # "gpu" | "node" | "internode"
    fn: Callable[..., Iterable[Finding]]
    severity: Severity = Severity.WARN
    action: Action = Action.NONE
    threshold_key: Optional[str] = None

    @property
    def summary(self) -> str:
        """What the check catches: the first sentence of its docstring, whole (it may wrap
        over several lines; it ends at a full stop followed by a space and a capital, or at
        the end of the first paragraph)."""
        paragraph = (self.fn.__doc__ or "").strip().split("\n\n")[0]
        text = " ".join(line.strip() for line in paragraph.splitlines())
        end = re.search(r"\.(?=\s+[A-Z`(])", text)
        return text[:end.end()] if end else text


CATALOGUE: Dict[str, CheckSpec] = {}
# The multi-node checks: not run over a snapshot (run_checks), nor named in `[checks] disabled`
INTERNODE: Dict[str, CheckSpec] = {}


def _register(check_id: str, scope: str, severity: Severity, action: Action,
              threshold_key: Optional[str]) -> Callable[[Callable[..., Iterable[Finding]]], Callable[..., Iterable[Finding]]]:
    into = INTERNODE if scope == "internode" else CATALOGUE

    def wrap(fn: Callable[..., Iterable[Finding]]) -> Callable[..., Iterable[Finding]]:
        assert check_id not in CATALOGUE and check_id not in INTERNODE, check_id
        into[check_id] = CheckSpec(check_id, scope, fn, severity, action, threshold_key)
        return fn
    return wrap


def gpu_check(check_id: str, *, severity: Severity = Severity.WARN, action: Action = Action.NONE,
              threshold_key: Optional[str] = None) -> Callable[[GpuCheck], GpuCheck]:
    """Register a per-GPU check under `check_id` (the JSON `check` field).

    severity/action: the worst finding it reports and what that calls for (`--list-checks`);
    threshold_key: the config key of its limit, e.g. "thresholds.retired_pages".
    """
    return _register(check_id, "gpu", severity, action, threshold_key)  # type: ignore[return-value]


def node_check(check_id: str, *, severity: Severity = Severity.WARN, action: Action = Action.NONE,
               threshold_key: Optional[str] = None) -> Callable[[NodeCheck], NodeCheck]:
    """Register a node-wide check; keyword arguments as for gpu_check."""
    return _register(check_id, "node", severity, action, threshold_key)  # type: ignore[return-value]


def internode_check(check_id: str, *, severity: Severity = Severity.WARN, action: Action = Action.NONE,
                    threshold_key: Optional[str] = None) -> Callable[[Callable[..., Iterable[Finding]]],
                                                                     Callable[..., Iterable[Finding]]]:
    """Register a multi-node check (into INTERNODE); keyword arguments as for gpu_check."""
    return _register(check_id, "internode", severity, action, threshold_key)


def label(gpu: GpuSnapshot) -> str:
    """How a message names a GPU: "GPU 3 (00000000:41:00.0, SN 1650522003820)"."""
    parts = [gpu.pci_bus_id or "PCI unknown"]
    if gpu.serial:
        parts.append(f"SN {gpu.serial}")
    elif gpu.uuid:
        parts.append(gpu.uuid)
    return f"GPU {gpu.index} ({', '.join(parts)})"


def finding(check: str, severity: Severity, gpu: Optional[GpuSnapshot], message: str,
            value: object = None, threshold: object = None, action: Action = Action.NONE) -> Finding:
    return Finding(check=check, severity=severity, message=message,
                   gpu=None if gpu is None else gpu.index, value=value,  # type: ignore[arg-type]
                   threshold=threshold, action=action)  # type: ignore[arg-type]



def in_boot_grace(node: NodeSnapshot, ctx: CheckContext) -> bool:
    """Whether the driver loaded less than `boot_grace_s` ago.  Fabric training, NVLink links
    and persistence settle in the first minutes after the driver loads; a check of such state
    reports unknown (never a drain) inside the grace, and judges it after.  An unknown driver
    age is past the grace: the state is judged."""
    return node.driver_age_s is not None and node.driver_age_s < ctx.config.boot_grace_s


def delta(now: Optional[int], before: Optional[int]) -> Optional[int]:
    """How much a counter grew since the baseline; None when either side is unknown."""
    if now is None or before is None:
        return None
    return now - before


def gpu_at(node: NodeSnapshot, pci: str) -> Optional[GpuSnapshot]:
    """The GPU at a PCI address from a log line, or None when NVML does not know it."""
    from ..pci import gpu_by_pci

    try:
        return gpu_by_pci(node.gpus, pci)
    except ValueError:
        return None


# --- running the catalogue ---------------------------------------------------------------

class CheckCrash(NamedTuple):
    check: str
    gpu: Optional[int]
    traceback: str


def run_checks(node: NodeSnapshot, ctx: CheckContext) -> Tuple[List[Finding], List[CheckCrash]]:
    """All enabled checks over the snapshot; a check that raises becomes an unknown finding."""
    findings: List[Finding] = []
    crashes: List[CheckCrash] = []
    for spec in CATALOGUE.values():
        if not ctx.config.enabled(spec.check_id):
            continue
        if spec.scope == "node":
            _guard(spec, None, lambda: spec.fn(node, ctx), findings, crashes)
            continue
        for gpu in node.gpus:
            if gpu.lost is not None and spec.check_id != "gpu.lost":
                continue
            _guard(spec, gpu.index, functools.partial(spec.fn, gpu, node, ctx), findings, crashes)
    return out_of_service(findings, node), crashes


def out_of_service(findings: List[Finding], node: NodeSnapshot) -> List[Finding]:
    """A GPU the admin took out of service (NodeSnapshot.out_of_service) is still reported but
    never judged: its findings are info with no action, so an old DBE on a board left out of
    gres.conf or listed in `exclude_gpus` drains nothing."""
    why = dict(node.out_of_service)
    if not why:
        return findings
    return [f._replace(severity=Severity.INFO, action=Action.NONE,
                       message=f"out of service ({why[f.gpu]}): {f.message}")
            if f.gpu in why and f.severity is not Severity.INFO else f for f in findings]


def _guard(spec: CheckSpec, gpu: Optional[int], call: Callable[[], Iterable[Finding]],
           findings: List[Finding], crashes: List[CheckCrash]) -> None:
    try:
        findings.extend(list(call()))
    except Exception as exc:  # noqa: BLE001 - a bug in one check must never drain or crash
        import traceback

        crashes.append(CheckCrash(spec.check_id, gpu, traceback.format_exc()))
        where = f" on GPU {gpu}" if gpu is not None else ""
        findings.append(Finding(check=spec.check_id, severity=Severity.UNKNOWN, gpu=gpu,
                                message=f"check {spec.check_id}{where} failed in gpu-healthcheck "
                                        f"itself ({type(exc).__name__}: {exc}); see the log",
                                value="internal_error"))
