"""Every real kernel-log line and block in tests/fixtures/kernel-log (Xid, NVLink5, Xid 154,
SXid) through the real parser and reader and the real checks."""

from __future__ import annotations

import re
from typing import List, Tuple

import pytest

from healthcheck.checks.nvswitch import sxid_severities, sxid_verdict
from healthcheck.checks.xid import xid_verdict
from healthcheck.decide.verdict import drain_reason
from healthcheck.logmodel import KernelLogRead, KernelLogWindow
from healthcheck.model import Action, Mode, Severity
from healthcheck.read.kernlog import parse_lines, parse_sxids, read_kernel_log
from healthcheck.read.sxid import parse_sxid_line
from tests.lib.fakenode import FIXTURES
from tests.lib.snapshots import NODE, found

KLOG = FIXTURES / "kernel-log"


FAIL, WARN, INFO, UNKNOWN = Severity.FAIL, Severity.WARN, Severity.INFO, Severity.UNKNOWN


def test_sxid_fatal_fails_with_reboot_and_the_reason_names_the_nvswitch_pci_address():
    lines = (KLOG / "sxid-lines.tsv").read_text().splitlines()
    fatal = [l.split("\t")[3] for l in lines if "\t24007\t" in "\t" + l]
    sxids = tuple(parse_sxids(fatal))
    node = NODE._replace(kernel_log=KernelLogRead(sxids=sxids))
    [f] = found(node, Mode.EPILOG, "sxid")
    assert (f.severity, f.action, f.gpu) == (FAIL, Action.REBOOT, None)
    assert "nvidia-nvswitch0 at PCI 0000:c3:00.0: SXid 24007 (fatal" in f.message
    assert drain_reason([f], node.gpus, Mode.EPILOG, "5") == \
        "gpu-healthcheck: sxid=24007@0000:c3:00.0 epilog job=5"


def test_sxid_severity_1_without_a_fatal_header_fails_with_reboot_talos_line():
    """A real Talos OS log (8x A100): SXid 24007 stated only as "Severity 1 Engine instance
    12", the nvswitch driver's NVSWITCH_ERROR_SEVERITY_FATAL, with no Fatal header line; its
    Data line counts with it.  Read from the file through the real reader."""
    path = KLOG / "blocks" / "vllm-issue-40652__talos-a100-sxid24007-severity1.log"
    log = read_kernel_log(str(path), KernelLogWindow())
    assert log.error is None and [(e.sxid, e.severity) for e in log.sxids] == [(24007, 1), (24007, None)]
    findings = found(NODE._replace(kernel_log=log), Mode.EPILOG, "sxid")
    [f] = findings
    assert (f.severity, f.action) == (FAIL, Action.REBOOT)
    assert "nvidia-nvswitch1 at PCI 0000:aa:00.0: SXid 24007 (fatal, 2 line(s))" in f.message


def test_sxid_severity_0_detail_lines_keep_their_non_fatal_header_and_a_fatal_header_wins():
    block = (KLOG / "blocks" / "nvtrust-issue-124__h100-nvswitch-probe-sxid22013.log").read_text().splitlines()
    events = parse_sxids(block)
    assert {e.severity for e in events if "Severity" in e.message} == {0}
    fatal_first = parse_sxids([l.replace("Non-fatal", "Fatal") for l in block])
    assert {f for _, f in sxid_severities(fatal_first)} == {True}  # "Severity 0" lines after it


def test_sxid_non_fatal_and_its_detail_lines_are_one_warning():
    block = (KLOG / "blocks" / "nvtrust-issue-124__h100-nvswitch-probe-sxid22013.log").read_text().splitlines()
    node = NODE._replace(kernel_log=KernelLogRead(sxids=tuple(parse_sxids(block))))
    [f] = found(node, Mode.EPILOG, "sxid")
    assert f.severity is WARN and not f.drains and "SXid 22013 (non-fatal" in f.message
    assert "0000:02:00.0" in f.message and f.value == "22013@0000:02:00.0"


# --- every real kernel-log line ----------------------------------------------------------

def tsv(name: str) -> List[Tuple[str, str, str]]:
    rows = []
    for line in (KLOG / name).read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        cols = line.split("\t")
        if cols[0] in ("xid", "sxid", "class"):
            continue
        rows.append((cols[0], cols[1], cols[-1]))
    return rows


def expected_xid(code: int, line: str) -> Tuple[Severity, Action]:
    """What NVIDIA's catalogue says for this line, written out independently of the code."""
    if code in range(144, 151):
        return (FAIL, Action.RESET) if re.search(r"\bFatal\b", line) else (WARN, Action.NONE)
    if code == 154:
        target = line.rsplit(" to ", 1)[1]
        return (INFO, Action.NONE) if "None" in target else (FAIL, Action.RESET)
    return {13: (INFO, Action.NONE), 31: (INFO, Action.NONE), 32: (INFO, Action.NONE),
            43: (INFO, Action.NONE), 45: (INFO, Action.NONE), 48: (FAIL, Action.RESET),
            # 63 IGNORE and 94 RESTART_APP in NVIDIA's catalogue (healthcheck/checks/
            # xid_catalogue.csv): info; a pending remap is the ecc checks' to judge
            62: (FAIL, Action.RESET), 63: (INFO, Action.NONE), 74: (FAIL, Action.RESET),
            79: (FAIL, Action.REBOOT), 94: (INFO, Action.NONE), 109: (FAIL, Action.RESET),
            119: (FAIL, Action.RESET), 120: (FAIL, Action.RESET), 140: (FAIL, Action.RESET)}[code]


XID_FILES = ["nvrm-xid-lines.tsv", "xid-hopper-lines.tsv", "xid-blackwell-nvlink5-lines.tsv",
             "xid-non-hgx-platform-lines.tsv", "xid-unknown-platform-lines.tsv"]


@pytest.mark.parametrize("name", XID_FILES)
def test_xid_every_real_line_gets_its_xid_pci_severity_and_action(name):
    rows = tsv(name)
    assert rows
    for code, pci, line in rows:
        [event] = parse_lines([line])
        assert (event.xid, event.pci) == (int(code), pci), line
        verdict = xid_verdict(event)
        assert (verdict.severity, verdict.action) == expected_xid(int(code), line), line


def test_sxid_every_real_line_gets_its_sxid_pci_severity_and_action():
    rows = tsv("sxid-lines.tsv")
    assert len(rows) == 14
    for code, pci, line in rows:  # the SXid parser itself, on every line
        parsed = parse_sxid_line(line)
        assert parsed is not None and (parsed[2], parsed[0]) == (int(code), pci), line
    # Through the kernel-log reader: the one line with a "[123]" prefix (its source notes the
    # stamp looks hand-edited; dmesg prints "[ 123.456789]") is not a kernel line, so it is not
    # read, as any line some program wrote is not.
    kernel_rows = [r for r in rows if not r[2].startswith("[123]")]
    assert len(kernel_rows) == 13
    rows = kernel_rows
    events = parse_sxids([line for _, _, line in rows])
    assert len(events) == len(rows)
    stated = {"Fatal": (FAIL, Action.REBOOT), "Non-fatal": (WARN, Action.NONE),
              "Severity 1": (FAIL, Action.REBOOT), "Severity 0": (WARN, Action.NONE)}
    headers = set()
    for (code, pci, line), (event, fatal) in zip(rows, sxid_severities(events)):
        assert (event.sxid, event.pci) == (int(code), pci), line
        word = re.search(r"\): \d+, (Fatal|Non-fatal),", line)
        number = re.search(r"\): \d+, (Severity [01]) ", line)
        if word:
            headers.add((pci, code))
            assert sxid_verdict(fatal) == stated[word[1]], line
        elif number and (pci, code) not in headers:  # the driver's number, no header before it
            assert sxid_verdict(fatal) == stated[number[1]], line
        elif (pci, code) not in headers:  # a line that states no severity: warns
            assert sxid_verdict(fatal) == (WARN, Action.NONE), line
    # the detail lines of 22013 inherit its "Non-fatal"
    assert [f for e, f in sxid_severities(events) if e.sxid == 22013] == [False] * 5


def test_sxid_the_healthy_h100_nvswitch_boot_log_gives_no_finding():
    path = KLOG / "blocks" / "gpud__dmesg.decode.iso.log.1__boot-nvswitch-probe-550.90.07.log"
    assert len(path.read_text().splitlines()) >= 2360
    log = read_kernel_log(str(path), KernelLogWindow())
    assert log.error is None and log.events == () and log.sxids == ()
    node = NODE._replace(kernel_log=log)
    assert found(node, Mode.EPILOG) == [] and found(node, Mode.NODE) == []


@pytest.mark.parametrize("block, worst", [
    ("gpud__dmesg-time-format-iso__xid48-63-94.log", FAIL),
    ("nvtrust-issue-124__h100-nvswitch-probe-sxid22013.log", WARN),
    ("akash-support-209__xid79-fallen-off-bus.log", FAIL),
    ("nvsentinel-issue-155__fallen-off-bus-without-xid.log", FAIL),
])
def test_xid_and_sxid_real_blocks_read_from_a_file_judge_as_the_catalogue_says(block, worst):
    log = read_kernel_log(str(KLOG / "blocks" / block), KernelLogWindow())
    findings = found(NODE._replace(kernel_log=log), Mode.EPILOG)
    rank = [INFO, WARN, FAIL]
    assert findings and {f.check for f in findings} <= {"xid", "sxid"}
    assert max((f.severity for f in findings), key=rank.index) is worst


def test_xid_line_with_a_redacted_pci_address_is_an_unparsed_kernel_line_finding_never_dropped(tmp_path):
    """A real Xid 79 line (nvrm-xid-lines.tsv) as a poster redacts it, its PCI address written
    as xxxx: no GPU can be read from it, so it is not judged as one, but it is shown (info,
    "unparsed kernel line") instead of vanishing; the other lines still count."""
    [real] = [line for code, _, line in tsv("nvrm-xid-lines.tsv") if code == "79"][:1]
    redacted = real.replace("(PCI:0000:01:00)", "(PCI:xxxx:xx:xx)")
    assert redacted != real
    log_file = tmp_path / "kern.log"
    log_file.write_text(redacted + "\n" + redacted + "\n")
    log = read_kernel_log(str(log_file), KernelLogWindow())
    assert log.events == () and log.unparsed_lines == 2 and log.unparsed[0].endswith("GPU has fallen off the bus.")
    [f] = found(NODE._replace(kernel_log=log), Mode.EPILOG, "xid")
    assert (f.severity, f.action, f.value, f.drains) == (INFO, Action.NONE, 2, False)
    assert "2 unparsed kernel line(s)" in f.message and "(PCI:xxxx:xx:xx): 79" in f.message
    # beside an attributed line: both are there
    log_file.write_text(redacted + "\n" + real + "\n")
    log = read_kernel_log(str(log_file), KernelLogWindow())
    assert [e.xid for e in log.events] == [79] and log.unparsed_lines == 1
