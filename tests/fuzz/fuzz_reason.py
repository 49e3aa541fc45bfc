#!/usr/bin/env python3
"""atheris target: healthcheck.decide.verdict.parse_reason and sanitise (reasons read back from Slurm).

    python3 tests/fuzz/fuzz_reason.py -max_total_time=20 tests/fuzz/corpus/reason

Invariants: never raises; sanitise gives printable ASCII without quotes, backslashes or
runs of whitespace, at most 255 bytes, and is idempotent; parse_reason is None exactly for
text not starting with "gpu-healthcheck:", else keeps the text as "raw".  Input starting
with "D" is structured: a reason built by drain_reason from fuzzed findings parses back to
the same gpu, check and job.
"""

import re
import sys

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.decide import verdict
    from healthcheck.checks import CATALOGUE
    from healthcheck.model import Action, Finding, GpuSnapshot, Mode, Severity

CHECKS = sorted(CATALOGUE)
DRAINING = [Action.DRAIN, Action.RESET, Action.REBOOT, Action.RMA]
SAFE = re.compile(r"[^0-9A-Za-z._:-]")  # what NVML puts in a serial, PCI id or uuid


def check_sanitised(text, limit=verdict.MAX_REASON_BYTES):
    out = verdict.sanitise(text, limit)
    assert len(out.encode()) <= limit, len(out)
    assert all(" " <= ch <= "~" and ch not in "\"'`\\" for ch in out), out
    # Cutting at `limit` comes after the strip, so the cut may leave one trailing space
    # (sanitise("a" * 39 + " b", 40) == "a" * 39 + " "); harmless, and sanitise is then
    # idempotent up to that space.
    assert "  " not in out and out == out.lstrip(), out
    assert verdict.sanitise(out, limit) == out.rstrip(" "), out


def structured(fdp):
    index = fdp.ConsumeIntInRange(0, 255)
    serial = SAFE.sub("", fdp.ConsumeUnicodeNoSurrogates(30)) or None
    pci = SAFE.sub("", fdp.ConsumeUnicodeNoSurrogates(20)) or None
    uuid = SAFE.sub("", fdp.ConsumeUnicodeNoSurrogates(45)) or None
    check = CHECKS[fdp.ConsumeIntInRange(0, len(CHECKS) - 1)]
    kind = fdp.ConsumeIntInRange(0, 3)
    value = [None, fdp.ConsumeBool(), fdp.ConsumeInt(8), fdp.ConsumeUnicodeNoSurrogates(60)][kind]
    job = fdp.ConsumeUnicodeNoSurrogates(70) or None
    node_wide = fdp.ConsumeBool()
    more = fdp.ConsumeIntInRange(0, 3)
    mode = list(Mode)[fdp.ConsumeIntInRange(0, 2)]
    action = DRAINING[fdp.ConsumeIntInRange(0, 3)]
    gpu = None if node_wide else index
    findings = [Finding(check, Severity.FAIL, "m", gpu=gpu, value=value, action=action)]
    findings += [Finding("gpu.lost", Severity.FAIL, "m", gpu=0, action=Action.DRAIN)] * more
    gpus = [GpuSnapshot(index=index, uuid=uuid, serial=serial, pci_bus_id=pci)]
    reason = verdict.drain_reason(findings, gpus, mode, job)
    assert reason is not None and len(reason.encode()) <= verdict.MAX_REASON_BYTES
    fields = verdict.parse_reason(reason)
    assert fields is not None and fields["raw"] == reason
    # the fuzzed finding ranks first (an equal rank keeps its place), so it is the one named
    assert fields["check"] == check, (reason, fields)
    assert fields["gpu"] == (None if node_wide else str(index)), (reason, fields)
    if len(reason) < verdict.MAX_REASON_BYTES - 20:  # not cut short: the job is all there
        expected = verdict._value_text(job) if job else None
        assert fields["job"] == (verdict.sanitise(expected) if expected else None), (reason, fields)
        assert fields["rma"] == ("rma" if action is Action.RMA else None), (reason, fields)


def TestOneInput(data: bytes) -> None:
    if data[:1] == b"D":
        structured(atheris.FuzzedDataProvider(data[1:]))
        return
    text = _common.text(data)
    check_sanitised(text)
    check_sanitised(text, limit=40)
    fields = verdict.parse_reason(text)
    assert (fields is None) == (not text.startswith(verdict.PREFIX))
    if fields is not None:
        assert fields["raw"] == text
    verdict.is_rma(text)
    verdict.is_ours(text)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
