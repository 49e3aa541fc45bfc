"""NVSwitches found on the PCI bus (read.sysfs, on a fake sysfs tree) make the repair reboot an
HGX A100, whose GPUs report no NVML fabric state (only Hopper and later do), instead of
resetting one GPU.  The Repairer runs against the in-process scontrol door."""

from __future__ import annotations

from healthcheck.act.repair import Repairer
from healthcheck.act.slurm import Slurm
from healthcheck.act.state import StateStore
from healthcheck.config import Config, RepairConfig
from healthcheck.decide import repair as rd
from healthcheck.decide.verdict import NodeState
from healthcheck.model import Action, Finding, GpuSnapshot, NodeSnapshot, Severity
from healthcheck.read.sysfs import read_sysfs_nvidia

from tests.lib.fakenode import make_sysfs
from tests.lib.slurmdoor import FakeDoor

OURS = "gpu-healthcheck: gpu2 pci=00000000:2B:00.0 sn=SN2 ecc.volatile_uncorrected=1 epilog job=7"
DBE2 = Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=2, value=1, action=Action.RESET)


def repairer(tmp_path, door):
    config = Config(state_dir=str(tmp_path / "state"), repair=RepairConfig(enabled=True, cooldown_s=0))
    return Repairer(config, Slurm(config, {}, ctl=door, sleep=lambda s: None),
                    StateStore(config.state_dir), "gpu-a", [], {})


def test_repair_hgx_a100_nvswitches_on_the_pci_bus_reboot_the_node_instead_of_a_single_gpu_reset(tmp_path):
    addresses = [f"0000:{0x07 + 0x0a * i:02x}:00.0" for i in range(8)]
    switches = [f"0000:{0xc4 + i:02x}:00.0" for i in range(6)]  # six NVSwitches on the baseboard
    sysfs = read_sysfs_nvidia(str(make_sysfs(tmp_path / "sys", addresses, nvswitches=switches)))
    assert (sysfs.gpus, sysfs.nvswitches, sysfs.error) == (tuple(addresses), tuple(switches), None)
    a100 = tuple(GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}", name="NVIDIA A100-SXM4-80GB",
                             pci_bus_id=f"0000{a.upper()}") for i, a in enumerate(addresses))
    snapshot = NodeSnapshot(host="gpu-a", gpus=a100, sysfs_gpus=sysfs.gpus, sysfs_nvswitches=sysfs.nvswitches)
    door = FakeDoor([NodeState(name="gpu-a", state="IDLE+DRAIN", reason=OURS)])
    rep = repairer(tmp_path, door)
    assert rep.start(snapshot, [DBE2], False) is False  # a reboot: validated after the boot
    assert rep.plan is not None and rep.plan.action == rd.REBOOT and rep.plan.why == rd.NVSWITCH_WHY
    assert [c[0] for c in door.calls if c[0] == "reboot"] == ["reboot"]
    assert not any("reset GPU(s)" in e.message for e in rep.events)
    # the same board without NVSwitches on its bus (a PCIe A100 server) resets GPU 2 alone
    pcie = read_sysfs_nvidia(str(make_sysfs(tmp_path / "sys2", addresses)))
    assert pcie.nvswitches == ()
    other = repairer(tmp_path / "pcie", FakeDoor([NodeState(name="gpu-a", state="IDLE+DRAIN", reason=OURS)]))
    other.start(snapshot._replace(sysfs_nvswitches=pcie.nvswitches), [DBE2], True)  # report_only
    assert other.plan is not None and (other.plan.action, other.plan.gpus) == (rd.RESET, (2,))
