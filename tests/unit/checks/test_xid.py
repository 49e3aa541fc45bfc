"""healthcheck/checks/xid.py, pure: Xid events judged per NVIDIA's catalogue (Xid 154, NVLink5),
by mode, on snapshot records."""

from __future__ import annotations

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config
from healthcheck.model import Action, KernelLogRead, Mode, NodeSnapshot, Severity, XidEvent
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
