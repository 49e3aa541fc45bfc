"""Fixtures of the Slurm layer's tests."""

from __future__ import annotations

import pytest

from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.repair import enable_repair


@pytest.fixture
def repair_cluster(tmp_path, fakegpu):
    require_slurm()
    cluster = GpuCluster(tmp_path, fakegpu)
    for node in cluster.nodes:
        enable_repair(cluster, node)
    with cluster.cluster:
        yield cluster
