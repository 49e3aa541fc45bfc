"""healthcheck/checks/xid.py, pure: Xid events judged per NVIDIA's catalogue (Xid 154, NVLink5),
by mode, on snapshot records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config
from healthcheck.logmodel import KernelLogRead, XidEvent
from healthcheck.model import Action, Mode, NodeSnapshot, Severity
from healthcheck.read.kernlog import aggregate, parse_lines
from tests.lib.snapshots import FAULTS, NODE, catalogue_cases, faulty, findings_of, found

FAIL, WARN, INFO, UNKNOWN = Severity.FAIL, Severity.WARN, Severity.INFO, Severity.UNKNOWN


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("xid"))


def test_xid_prolog_ignores_old_xids():
    change = FAULTS["xid"][0]
    assert findings_of(faulty(change), Mode.PROLOG, "xid") == []


def test_xid_application_xids_are_info():
    node = faulty(dict(kernel_log=KernelLogRead(events=(XidEvent("0000:18:00", 13, "x"),))))
    [finding] = findings_of(node, Mode.EPILOG, "xid")
    assert finding.severity is Severity.INFO and finding.gpu == 0


def test_xid_unreadable_kernel_log_is_unknown_for_xid_only():
    node = faulty(dict(kernel_log=KernelLogRead(error="cannot read /dev/kmsg: Permission denied")))
    found, _ = run_checks(node, CheckContext(Config(), Mode.EPILOG, selected=(0,)))
    assert [(f.check, f.severity) for f in found] == [("xid", Severity.UNKNOWN)]


# --- Xid 154 and NVLink5 on snapshots --------------------------------------------------------

def xids(*messages: str) -> NodeSnapshot:
    """The events as the reader gives them: aggregated per GPU and Xid."""
    events = aggregate(parse_lines(messages)).events
    return NODE._replace(kernel_log=KernelLogRead(events=events))


def test_xid_a_later_154_back_to_none_clears_the_earlier_reset():
    pci = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from "
    node = xids(pci + "0x0 (None) to 0x1 (GPU Reset Required)", pci + "0x1 (GPU Reset Required) to 0x0 (None)")
    [f] = found(node, Mode.EPILOG, "xid")
    assert (f.severity, f.action) == (INFO, Action.NONE) and "(2 times)" in f.message
    assert f.message.endswith("to 0x0 (None)")
    node = xids(pci + "0x0 (None) to 0x1 (GPU Reset Required)", pci + "0x1 (GPU Reset Required) to 0x2 (Node Reboot Required)")
    [f] = found(node, Mode.EPILOG, "xid")
    assert (f.severity, f.action, f.gpu) == (FAIL, Action.REBOOT, 0)


def test_xid_a_fatal_nvlink5_line_is_not_hidden_by_non_fatal_ones_of_the_same_xid():
    pci = "NVRM: Xid (PCI:0000:18:00): 149, "
    node = xids(*[pci + "NETIR_BER_EVENT Nonfatal XC0 i0 Link 01 (0x00082226 0x00000001 0x0 0x0 0x0 0x0)"] * 5,
                pci + "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x0 0x0 0x0 0x0)")
    assert sorted((f.severity.value, f.action.value) for f in found(node, Mode.EPILOG, "xid")) == [
        ("fail", "reset"), ("warn", "none")]


# Xid 154 by its code (issue 36, case 9): the driver's own line (tests/fixtures/kernel-log/
# xid-blackwell-nvlink5-lines.tsv) with the labels drivers print for the same codes
@pytest.mark.parametrize("target,expected", [
    ("0x1 (PF FLR)", (FAIL, Action.RESET)),                  # NVML GPU_RESET, newer drivers' label
    ("0x1 (GPU Reset Required)", (FAIL, Action.RESET)),
    ("0x2 (OS Reboot)", (FAIL, Action.REBOOT)),              # NODE_REBOOT
    ("0x3 (Drain P2P)", (FAIL, Action.DRAIN)),               # DRAIN_P2P
    ("0x4 (Drain and Reset)", (FAIL, Action.RESET)),         # DRAIN_AND_RESET
    ("0x1 (Some Future Words)", (FAIL, Action.RESET)),       # the code decides, not the label
    ("0x2 (Reset)", (FAIL, Action.REBOOT)),
    ("0x0 (Reset Required)", (INFO, Action.NONE)),
])
def test_xid_154_is_decided_by_nvmls_recovery_action_code_not_the_label(target, expected):
    line = f"NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to {target}"
    [f] = found(xids(line), Mode.EPILOG, "xid")
    assert (f.severity, f.action) == expected
    assert target in f.message


def test_xid_154_a_code_nvml_does_not_define_is_for_a_person_naming_the_code():
    line = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x2a (Rebuild)"
    [f] = found(xids(line), Mode.EPILOG, "xid")
    assert (f.severity, f.action) == (FAIL, Action.DRAIN)
    assert "0x2a (Rebuild), which NVML does not define here: a person must look" in f.message


# A finding quotes only what the log holds (issue 36, case 11): real lines of
# tests/fixtures/kernel-log/blocks (akash-network/support#209, NVIDIA/NVSentinel#155)
AKASH = "[Fri Apr  5 21:29:39 2024] NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus."
NVSENTINEL = ["[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
              "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
              "               NVRM: fallen off the bus and is not responding to commands."]


def test_xid_fallen_off_the_bus_quotes_the_logs_own_line_not_catalogue_words():
    [f] = found(xids(AKASH), Mode.EPILOG, "xid")
    assert (f.severity, f.action) == (FAIL, Action.REBOOT)
    quote = f.message.split("Log: ", 1)[1]
    assert quote == "NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus."
    assert "not responding" not in f.message


def test_xid_fallen_off_the_bus_over_three_lines_quotes_the_three_lines():
    [f] = found(xids(*NVSENTINEL), Mode.EPILOG, "xid")
    quote = f.message.split("Log: ", 1)[1]
    logged = [line.strip() for line in NVSENTINEL]
    # every word quoted is in the log, in its order; the stamp is not the driver's
    assert quote.split() == " ".join(line[line.index("NVRM:"):] for line in logged).split()[:len(quote.split())]
    assert quote.startswith("NVRM: The NVIDIA GPU 0000:b3:00.0")


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.one_of(st.sampled_from([AKASH, *NVSENTINEL, "NVRM: GPU 0000:18:00.0: GPU has",
                                                 "NVRM: fallen off the bus.", "[ 5.0] NVRM: loading"]),
                                st.text(alphabet="NVRM: GPUfalenofthbus0123456789.[] ", max_size=50)),
                      max_size=12))
def test_xid_fallen_off_the_bus_message_holds_only_words_of_the_log(lines):
    logged = " ".join(lines).split()
    for event in parse_lines(lines, 2024):
        if event.xid is None:
            assert "fallen off the bus" in event.message
            assert all(word in logged for word in event.message.split())
