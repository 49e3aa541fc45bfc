"""The repair's reset on a GPU in persistence mode (the default of the fake GPUs, as of most
cluster nodes), on the real test Slurm: the driver refuses a reset while persistence mode holds
the device (NVIDIA/NVSentinel#1690, real), so the repair turns it off for the reset and on
again after, and says so in the journal."""

from __future__ import annotations

import pytest

from tests.lib.repair import drain_by_epilog, repair_events

pytestmark = pytest.mark.slurm


def test_repair_reset_turns_persistence_mode_off_for_the_reset_and_on_again(repair_cluster, tmp_path):
    c = repair_cluster
    assert "persistence_mode" not in c.scenario("gpu-a").read_text()  # the fake's default: on
    drain_by_epilog(c, tmp_path)
    done = c.check("gpu-a", "--node", "--act", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not c.drained("gpu-a"), c.reason("gpu-a")
    text = c.scenario("gpu-a").read_text()
    # off, the reset, on again: in that order, only on GPU 2
    assert text.index("gpu.2.persistence_mode = 0") < text.index("# fakegpu nvidia-smi --gpu-reset -i 2") \
        < text.index("gpu.2.persistence_mode = 1"), text
    assert "gpu.3.persistence_mode" not in text
    steps = [e["message"] for e in repair_events(c, "gpu-a")]

    def at(text: str) -> int:
        return next(i for i, m in enumerate(steps) if text in m)

    assert at("persistence mode of GPU(s) 2 turned off") < at("reset GPU(s) 2 (") \
        < at("persistence mode of GPU(s) 2 turned on again") < at("is resumed"), steps
