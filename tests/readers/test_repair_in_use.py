"""nvidia-smi's own refusal "In use by another client" (the real text of NVIDIA/NVSentinel#1690,
tests/fixtures/nvidia-smi/) after persistence mode is off: the reset did not run, so it is
"repair blocked", never an attempt.  The Repairer runs against the in-process scontrol door,
and an nvidia-smi stand-in that answers -pm with "All done." and the reset with the fixture."""

from __future__ import annotations

from pathlib import Path

from healthcheck.act import ledger
from healthcheck.act.repair import Repairer
from healthcheck.act.slurm import Slurm
from healthcheck.act.state import StateStore
from healthcheck.config import Config, RepairConfig
from healthcheck.decide import repair as rd
from healthcheck.decide.verdict import NodeState
from healthcheck.model import Action, Finding, GpuSnapshot, NodeSnapshot, Severity

from tests.lib.fakenode import FIXTURES
from tests.lib.slurmdoor import FakeDoor

OURS = "gpu-healthcheck: gpu2 pci=00000000:38:00.0 sn=SN2 ecc.volatile_uncorrected=1 epilog job=7"


def refusal() -> str:
    path = FIXTURES / "nvidia-smi" / "issue-nvsentinel-1690__nvidia-smi-gpu-reset-FAILED-in-use.txt"
    text = path.read_text()
    return text[:text.index("exit=255")]


def test_repair_in_use_by_another_client_is_blocked_not_an_attempt_and_persistence_is_restored(tmp_path: Path):
    answer = tmp_path / "refusal.txt"
    answer.write_text(refusal())
    calls = tmp_path / "calls"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n'
                   f'case "$1" in -pm) echo "All done."; exit 0;; esac\ncat "{answer}"\nexit 255\n')
    smi.chmod(0o755)
    config = Config(state_dir=str(tmp_path / "state"), nvidia_smi=str(smi), proc_root=str(tmp_path / "proc"),
                    repair=RepairConfig(enabled=True, cooldown_s=0, max_attempts=2))
    gpus = tuple(GpuSnapshot(index=i, uuid=f"GPU-{i}", serial=f"SN{i}", pci_bus_id=f"00000000:{0x18 + 16 * i:02X}:00.0",
                             persistence_mode=True) for i in range(4))
    dbe = Finding("ecc.volatile_uncorrected", Severity.FAIL, "dbe", gpu=2, value=1, action=Action.RESET)
    door = FakeDoor([NodeState(name="gpu-a", state="IDLE+DRAIN", reason=OURS)])
    for run in range(3):  # repair.max_attempts = 2: never rma
        events: list = []
        rep = Repairer(config, Slurm(config, {}, ctl=door, sleep=lambda s: None), StateStore(config.state_dir),
                       "gpu-a", events, {})
        assert rep.start(NodeSnapshot(host="gpu-a", gpus=gpus), [dbe], False) is False
        steps = [e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") for e in events]
        assert steps == ["claimed", "persistence_off", "persistence_on", "reset_blocked"], steps
    [blocked] = [e for e in events if e.fields.get("GPU_HEALTHCHECK_REPAIR_STEP") == "reset_blocked"]
    assert blocked.fields["GPU_HEALTHCHECK_REPAIR_BLOCKED"] == rd.IN_USE
    assert blocked.fields["GPU_HEALTHCHECK_REPAIR_HELD_BY"] == "a client nvidia-smi does not name"
    assert "In use by another client" in blocked.message
    attempts = ledger.read_ledger(config.state_dir, rd.ledger_of(gpus[2]))
    assert len(attempts) == 3 and not any(rd.counted(a) for a in attempts)
    assert "rma" not in (door.nodes["gpu-a"].reason or "").split()
    assert calls.read_text().splitlines()[:3] == ["-pm 0 -i 2", "--gpu-reset -i 2", "-pm 1 -i 2"]
