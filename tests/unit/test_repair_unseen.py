"""A GPU lost before any run listed it (decide.ledgers.name_unseen, finding_ledger): named by
the address the driver logged in its Xid 79 line and by the gres layout's device file no listed
GPU has; counted in one ledger before and after the boot; "node" only when nothing names it,
and then from the first reboot on."""

from __future__ import annotations

from hypothesis import given, strategies as st

from healthcheck.decide import repair as rd
from healthcheck.logmodel import XidEvent
from healthcheck.model import Action, Finding, GpuSnapshot, Severity

FILES = tuple(f"/dev/nvidia{i}" for i in range(8))


def addr(i: int) -> str:
    return f"00000000:{0x18 + 16 * i:02X}:00.0"


def eight_with_3_lost():
    return tuple(GpuSnapshot(index=i, lost="GPU_IS_LOST") if i == 3 else
                 GpuSnapshot(index=i, serial=f"SN{i}", uuid=f"GPU-{i}", pci_bus_id=addr(i), minor_number=i)
                 for i in range(8))


def xid79(pci: str) -> XidEvent:
    return XidEvent(pci=pci, xid=79, message="GPU has fallen off the bus.")


def test_the_address_in_the_xid_79_line_and_the_gres_device_name_the_lost_gpu():
    naming = rd.name_unseen(eight_with_3_lost(), [xid79("0000:48:00")], FILES)
    assert naming is not None and (naming.gpu, naming.pci, naming.device) == (3, addr(3), "/dev/nvidia3")
    assert any("Xid 79" in s for s in naming.named_by) and any("gres.conf" in s for s in naming.named_by)
    assert naming.why_node == ""
    # an Xid of a GPU NVML lists is no name for the lost one
    assert rd.name_unseen(eight_with_3_lost(), [xid79("0000:38:00")], FILES).pci == ""


def test_before_and_after_the_boot_its_reboots_count_in_one_ledger():
    gpus = eight_with_3_lost()
    naming = rd.name_unseen(gpus, [xid79("0000:48:00")], FILES)
    named = tuple(g._replace(pci_bus_id=naming.pci) if g.index == 3 else g for g in gpus)
    lost = Finding("gpu.lost", Severity.FAIL, "lost", gpu=3, action=Action.REBOOT)
    xid = Finding("xid.79", Severity.FAIL, "off the bus", pci="0000:48:00", action=Action.REBOOT)
    before = {rd.finding_ledger(f, named, (), "gpu-a").key for f in (lost, xid)}
    # after the boot: seven GPUs, the missing one known by the address kept (known-gpus.json)
    seven = tuple(g for g in named if g.index != 3)
    missing = (GpuSnapshot(index=3, pci_bus_id=addr(3)),)
    count = Finding("gpu.count", Severity.FAIL, "7", value=7, pci=addr(3), action=Action.REBOOT)
    after = rd.finding_ledger(count, seven, missing, "gpu-a").key
    assert before == {after} == {"~index3@0000-48-00.0"}


def test_nothing_names_it_the_node_counts_from_the_first_reboot_and_says_why():
    gpus = eight_with_3_lost()
    naming = rd.name_unseen(gpus, [], FILES)
    assert naming is not None and naming.pci == "" and "no Xid 79 line names one" in naming.why_node
    two = rd.name_unseen(gpus, [xid79("0000:48:00"), xid79("0000:a8:00")], FILES)
    assert two.pci == "" and "logged 2 lost addresses" in two.why_node
    lost = Finding("gpu.lost", Severity.FAIL, "lost", gpu=3, action=Action.REBOOT)
    count = Finding("gpu.count", Severity.FAIL, "7", value=7, action=Action.REBOOT)
    # the same ledger before the boot (an index ledger no later run could find) and after
    assert rd.finding_ledger(lost, gpus, (), "gpu-a") == rd.finding_ledger(count, gpus[:7], (), "gpu-a") \
        == rd.node_ledger("gpu-a")
    assert rd.name_unseen(tuple(g for g in gpus if g.index != 3), [], FILES) is None  # none nameless


@given(st.sets(st.integers(0, 7), min_size=1), st.sets(st.integers(0, 15)))
def test_the_name_is_never_a_listed_gpus_address(present, logged):
    gpus = tuple(GpuSnapshot(index=i, serial=f"SN{i}", pci_bus_id=addr(i)) for i in sorted(present)) \
        + (GpuSnapshot(index=99, lost="GPU_IS_LOST"),)
    naming = rd.name_unseen(gpus, [xid79(f"0000:{0x18 + 16 * i:02x}:00") for i in sorted(logged)], ())
    assert naming is not None
    assert naming.pci not in {addr(i) for i in present}
    assert bool(naming.pci) == (len(logged - present) == 1) and bool(naming.why_node) != bool(naming.pci)
