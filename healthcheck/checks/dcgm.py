"""What DCGM said (read/dcgm.py), as findings: each `dcgmi diag` test per GPU, and each
`dcgmi health` incident.  dcgmi missing, hanging or unreadable is unknown, never a drain."""

from __future__ import annotations

from typing import Dict, Iterator, Set, Tuple

from ..deepmodel import DcgmResult
from ..model import Action, Finding, NodeSnapshot, Severity
from .registry import CheckContext, finding as _f, node_check

SEVERITY = {"warn": Severity.WARN, "fail": Severity.FAIL, "unknown": Severity.UNKNOWN,
            "config": Severity.WARN, "internal": Severity.UNKNOWN, "ungraded": Severity.UNKNOWN}
# what a result read/dcgm4.py graded by DCGM's severity says, before DCGM's words
GRADED = {"config": "a configuration finding (DCGM_ERROR_CONFIG), not the GPU's fault; fix the setting",
          "internal": "did not run: DCGM's own internal error, not the GPU's (check DCGM's install "
                      "and nvvs.log, then rerun)",
          "ungraded": "not judged: DCGM graded the error UNKNOWN (DCGM_ERROR_UNKNOWN)"}


def _name(node: NodeSnapshot, gpu: object) -> str:
    if not isinstance(gpu, int):
        return "node"
    g = node.gpu(gpu)
    from .registry import label

    return label(g) if g is not None else f"GPU {gpu}"


@node_check("dcgm.diag", severity=Severity.FAIL, action=Action.RESET, threshold_key="dcgm.level")
def check_dcgm_diag(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A `dcgmi diag -r dcgm.level` test (--level deep) that warned or failed, in DCGM's words.

    DCGM's own verdict, graded by the severity DCGM 4.x gives each error (read/dcgm4.py): a
    fail whose errors mean the GPU cannot work (ISOLATE, TRIAGE, RESET, or no severity) drains
    (reset; DCGM's text says what to do next); MONITOR and NONE warn; CONFIG (persistence mode
    off, ECC off, ...) warns as a configuration finding naming what to fix, never a drain; DCGM's
    own internal error ("There was an internal error during the test", its helper missing) and
    severity UNKNOWN are unknown for that test: it did not run.  A run that skipped every test
    is unknown ("14 of 14 DCGM tests skipped"); some skipped is info.  DCGM's GPU ids become
    NVML's indices by the serial DCGM 4.x lists, else by id (read/dcgmmap.py); a result on a GPU
    this node does not have is unknown, never a drain.
    nvidia-smi equivalent: none; `dcgmi diag -r 2`.
    """
    read = node.dcgm
    if read is None or not (read.diag_ran or read.diag_error):
        return
    if read.diag_error:
        yield _f("dcgm.diag", Severity.UNKNOWN, None, f"DCGM diagnostic not judged: {read.diag_error}")
        return
    for r in read.diag:
        severity = SEVERITY.get(r.status)
        if severity is None:
            continue
        gpu = node.gpu(r.gpu) if r.gpu is not None else None
        if r.gpu is not None and gpu is None:
            # DCGM's id names no GPU NVML lists here (DCGM sees other GPUs, or misreports):
            # blaming some GPU, or every one, would reset or drain healthy boards
            yield _f("dcgm.diag", Severity.UNKNOWN, None,
                     f"DCGM diagnostic {r.test}: {r.status} on GPU {r.gpu}, which this node does "
                     f"not have (NVML lists {len(node.gpus)}): not judged; check `dcgmi discovery -l`"
                     + (f": {r.text}" if r.text else ""), value=r.status, threshold="pass")
            continue
        if r.status in GRADED:
            # never on the GPU: a configuration or DCGM's own failure is no fault of the board
            yield _f("dcgm.diag", severity, None if severity is Severity.UNKNOWN else gpu,
                     f"{_name(node, r.gpu)}: DCGM diagnostic {r.test} {GRADED[r.status]}"
                     + (f": {r.text}" if r.text else ""), value=r.status, threshold="pass")
            continue
        if severity is Severity.UNKNOWN:  # attributed by read/dcgmmap.py: an entity not here
            yield _f("dcgm.diag", severity, None, f"DCGM diagnostic {r.test} not judged: {r.text}",
                     value=r.entity, threshold="a GPU of this node")
            continue
        yield _f("dcgm.diag", severity, gpu, f"{_name(node, r.gpu)}: DCGM diagnostic {r.test}: "
                 f"{r.status}" + (f": {r.text}" if r.text else ""), value=r.status, threshold="pass",
                 action=Action.RESET if severity is Severity.FAIL else Action.NONE)
    yield from _skipped(read.diag)


def _skipped(results: Tuple[DcgmResult, ...]) -> Iterator[Finding]:
    """DCGM's skipped tests, said: a run that skipped every test checked nothing (unknown)."""
    tests: Dict[str, Set[str]] = {}
    for r in results:
        tests.setdefault(r.test, set()).add(r.status)
    skipped = [t for t, statuses in tests.items() if statuses == {"skip"}]
    if not skipped:
        return
    said = f"{len(skipped)} of {len(tests)} DCGM tests skipped: {', '.join(skipped)[:200]}"
    if len(skipped) == len(tests):
        yield _f("dcgm.diag", Severity.UNKNOWN, None, f"DCGM diagnostic not judged: {said} (DCGM "
                 f"checked nothing; `dcgmi diag -r 1 -v` says why)", value=len(skipped), threshold=0)
    else:
        yield _f("dcgm.diag", Severity.INFO, None, said, value=len(skipped), threshold=0)


@node_check("dcgm.health", severity=Severity.WARN)
def check_dcgm_health(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """An incident DCGM's health watch (`dcgmi health -c -j`) reports, in DCGM's words.

    Warns, never drains: the watch is set and judged by the site's DCGM; the checks that read
    the same counters here (ECC, NVLink, PCIe, Xid) make their own verdicts.
    nvidia-smi equivalent: none; `dcgmi health -c`.
    """
    read = node.dcgm
    if read is None or not (read.health_ran or read.health_error):
        return
    if read.health_error:
        yield _f("dcgm.health", Severity.UNKNOWN, None, f"DCGM health not read: {read.health_error}")
        return
    for r in read.health:
        if r.status == "pass" or (r.test == "Overall Health" and len(read.health) > 1):
            continue
        gpu = node.gpu(r.gpu) if r.gpu is not None else None
        if r.status == "unknown":
            yield _f("dcgm.health", Severity.UNKNOWN, None, f"DCGM health {r.test} not judged: {r.text}",
                     value=r.entity, threshold="a GPU of this node")
            continue
        yield _f("dcgm.health", Severity.WARN, gpu, f"{_name(node, r.gpu)}: DCGM health {r.test}: {r.text}",
                 value=r.status, threshold="healthy")
