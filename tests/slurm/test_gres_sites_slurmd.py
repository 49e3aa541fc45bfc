"""Real sites' slurm.conf and gres.conf (tests/fixtures/gres/) against each matrix version's
`slurmd -G` (make slurm-matrix: 22.05 on the host, later ones in their roots), with a munged of
the test's own where that slurmd needs one.  Our device list must be the list that slurmd
prints; tests/readers/test_gres_sites.py holds the same check against 22.05's recorded lists
for hosts without slurmd."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.lib.slurmdg import copy_site, private_munged, slurmd_gres
from tests.readers.test_gres_sites import CASES, SITES, _ours

pytestmark = pytest.mark.slurm


def _version() -> str:
    done = subprocess.run(["slurmd", "-V"], capture_output=True, text=True, timeout=30)
    return done.stdout.strip()


@pytest.mark.parametrize("site,node", CASES)
def test_gres_site_configs_map_as_this_slurmds_slurmd_g_says(tmp_path, site, node):
    if os.geteuid() != 0:
        pytest.skip("the device files need root (mknod)")
    conf = copy_site(SITES / site, tmp_path / site)
    with private_munged(tmp_path / "munge") as socket:
        with open(conf / "slurm.conf", "a") as handle:
            handle.write(f"AuthInfo=socket={socket}\n")
        live = slurmd_gres(conf, node)
    assert live is not None, f"{_version()}: slurmd -G did not run"
    assert _ours(conf, node) == live[0], f"{_version()}:\n{live[1][-2000:]}"
