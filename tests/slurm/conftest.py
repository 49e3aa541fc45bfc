"""Fixtures of the Slurm layer's tests."""

from __future__ import annotations

import pytest

from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.localuser import local_user, open_dir
from tests.lib.repair import enable_repair


@pytest.fixture
def repair_cluster(tmp_path, fakegpu):
    require_slurm()
    cluster = GpuCluster(tmp_path, fakegpu)
    for node in cluster.nodes:
        enable_repair(cluster, node)
    with cluster.cluster:
        yield cluster


@pytest.fixture
def job_user(isolation):
    """An ordinary user, made for the test, who submits its jobs, as on a real cluster
    (SlurmCluster.job_user); root submits only in a test about root that says so.  Her login
    shell is /bin/sh, as a cluster user's is: Slurm 26.05's slurmd loaded her login environment
    (`su - USER -c env`) for test_spank_round3's job of `--export=ALL,VAR=...`, and with nologin
    held it ("_get_user_env: Unable to get user's local environment")."""
    with local_user("hc36s", shell="/bin/sh") as user:
        yield user


@pytest.fixture
def open_wd():
    """A work folder the job's user can pass and read (pytest's tmp is 0700 above each test's):
    her sbatch reaches slurm.conf and the munge socket, her tasks the scripts and files in it."""
    with open_dir("hc36-", 0o711) as path:
        yield path
