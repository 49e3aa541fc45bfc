"""Issue 17 on the real Slurm cluster, as root: what a local user must not be able to steer where
a drain is involved (the rest: tests/cli/test_trust.py).

Each test ran against the code before the fix and failed; the unprivileged user is a real
account created with useradd and removed afterwards.
"""

from __future__ import annotations

import json as _json
from pathlib import Path

import pytest

from tests.lib.gpucluster import GpuCluster, HEALTHY, pci, require_slurm
from tests.lib.localuser import as_user, open_dir
from tests.lib.localuser import local_user as make_local_user

HER_REASON = "Maintenance by ops - do not resume until 2027"


@pytest.fixture(scope="module")
def local_user(isolation):
    with make_local_user("hc17") as user:
        yield user


@pytest.fixture
def shared_dir():
    """A directory every user may write into, sticky, as /tmp is."""
    with open_dir("hc17-shared-", 0o1777) as path:
        yield path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path_factory.mktemp("trust"), fakegpu)
    with c.cluster:
        yield c


@pytest.mark.slurm
@pytest.mark.parametrize("how", ["state_dir is her symlink", "state_dir is her directory"])
def test_a_local_user_cannot_plant_a_pending_drain_nor_make_root_unlink_her_file(cluster, local_user, shared_dir, how):
    pending = _json.dumps({"reason": f"gpu-healthcheck: {HER_REASON}", "node": "gpu-b", "mode": "node",
                           "job_id": None, "created_at": 0})
    if how == "state_dir is her symlink":
        as_user(local_user, f"mkdir {shared_dir}/hers && printf '%s' '{pending}' > {shared_dir}/hers/pending-drain.json"
                            f" && ln -s {shared_dir}/hers {shared_dir}/state")
        planted = shared_dir / "hers" / "pending-drain.json"
    else:
        as_user(local_user, f"mkdir -m 0700 {shared_dir}/state && printf '%s' '{pending}' > {shared_dir}/state/pending-drain.json")
        planted = shared_dir / "state" / "pending-drain.json"
    cluster.write_config("gpu-b", state_dir=shared_dir / "state")
    try:
        done = cluster.check("gpu-b", "--node", "--act", "--json")
    finally:
        cluster.write_config("gpu-b")
    assert not cluster.drained("gpu-b"), cluster.reason("gpu-b")
    assert HER_REASON not in done.stderr  # never drained with her text, not even for a moment
    assert planted.exists()  # root removed nothing of hers
    assert f"{shared_dir}/state" in done.stderr
    assert done.returncode == 0  # a refused state_dir is our problem, not the node's


@pytest.mark.slurm
def test_a_node_down_not_responding_with_a_dbe_is_drained_with_our_reason_and_stays_out_when_slurmd_returns(cluster):
    c = cluster
    c.cluster.stop_slurmd("gpu-c")
    try:
        c.cluster.wait_node("gpu-c", lambda info: "DOWN" in info.get("State", "")
                            and "Not responding" in (info.get("Reason") or ""), 120)
        c.scenario("gpu-c").write_text(HEALTHY + "gpu.1.ecc.volatile.uncorrected = 2\n")
        done = c.check("gpu-c", "--node", "--act", "--json")
        assert done.returncode == 2, done.stderr
        assert c.reason("gpu-c").startswith(f"gpu-healthcheck: gpu1 pci={pci(1)} ")
    finally:
        c.cluster.start_slurmd("gpu-c")
    # slurmd answers again: ReturnToService clears DOWN, our DRAIN keeps the bad GPU out
    info = c.cluster.wait_node("gpu-c", lambda i: "DOWN" not in i.get("State", "") and "*" not in i.get("State", ""), 120)
    assert "DRAIN" in info["State"] and c.reason("gpu-c").startswith("gpu-healthcheck: gpu1 ")
    c.scenario("gpu-c").write_text(HEALTHY)
    c.cluster.resume("gpu-c")


@pytest.mark.slurm
def test_a_serial_with_spaces_keeps_the_rma_token_and_the_node_is_never_resumed(cluster):
    c = cluster
    c.scenario("gpu-a").write_text(HEALTHY + 'gpu.2.serial = 1650 5220 0380 2\ngpu.2.remap.failure = 1\n')
    done = c.check("gpu-a", "--node", "--act")
    assert done.returncode == 2
    reason = c.reason("gpu-a")
    assert " sn=1650_5220_0380_2 remap.failure=1 rma " in reason
    c.scenario("gpu-a").write_text(HEALTHY)  # the board looks fine again: still RMA
    done = c.check("gpu-a", "--node", "--act")
    assert c.drained("gpu-a") and "RMA" in done.stderr + done.stdout
    c.cluster.resume("gpu-a")
