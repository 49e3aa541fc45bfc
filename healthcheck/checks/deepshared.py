"""What the deep level may conclude on a GPU that live co-tenants share (pure), for every deep
check (checks/deep.py, checks/deepload.py)."""

from __future__ import annotations

from typing import Iterable, Iterator

from ..model import Action, Finding, GpuSnapshot, NodeSnapshot, Severity, co_tenant_mib


def shared(findings: Iterable[Finding], gpu: GpuSnapshot, node: NodeSnapshot) -> Iterator[Finding]:
    """The deep findings of a GPU as judged: on a GPU live co-tenants share, a warn or fail is
    unknown (no action): their load slows every figure and their memory shrinks the test, so
    the deep level cannot tell the GPU's fault from theirs.  Rerun it on an idle GPU."""
    held = co_tenant_mib(gpu, node)
    for f in findings:
        if held and f.severity in (Severity.WARN, Severity.FAIL):
            f = f._replace(severity=Severity.UNKNOWN, action=Action.NONE,
                           message=f"{f.message} [not judged: live co-tenants hold {held:,} MiB of "
                                   f"this GPU; rerun --level deep when it is idle]")
        yield f
