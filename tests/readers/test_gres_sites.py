"""Real sites' slurm.conf and gres.conf (tests/fixtures/gres/, SOURCES.md there): our gres
index -> device file list agrees with what the real `slurmd -G -N NODE` builds.

expected.json holds what Slurm 22.05's slurmd printed for each node (recorded with
tests/lib/slurmdg.py); every host checks ours against it, and a host with slurmd (as root)
also checks that its slurmd still prints it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from healthcheck.decide.gpumap import map_job_gpus
from healthcheck.model import GpuSnapshot
from healthcheck.read.gres import read_layout
from tests.lib.slurmdg import copy_site, slurmd_gres

SITES = Path(__file__).resolve().parents[1] / "fixtures" / "gres"
EXPECTED = json.loads((SITES / "expected.json").read_text())
CASES = [(site, node) for site, nodes in sorted(EXPECTED.items()) for node in sorted(nodes)]


def _ours(conf_dir: Path, node: str) -> list:
    layout = read_layout(str(conf_dir / "gres.conf"), node)
    assert layout.error is None and layout.uncertain is None, layout
    return [os.path.basename(f) for f in layout.files]


@pytest.mark.parametrize("site,node", CASES)
def test_gres_site_configs_map_as_slurmd_says(tmp_path, site, node):
    conf = copy_site(SITES / site, tmp_path / site)
    assert _ours(conf, node) == EXPECTED[site][node]
    live = slurmd_gres(conf, node)
    if live is None:
        pytest.skip("no slurmd -G here (not installed, not root, or it needs munged): "
                    "checked against the recorded list only")
    assert live[0] == EXPECTED[site][node], live[1][-2000:]


def test_gres_slac_8_gpu_job_is_probed_on_its_gpus_not_the_titan_xps(tmp_path):
    # hep-gpu01: ten boards, gres.conf also lists the two TITAN Xp that slurm.conf (in the
    # file it Includes) does not give the node; slurmd ignores them ("Ignoring extra GRES")
    conf = copy_site(SITES / "slac", tmp_path / "slac")
    layout = read_layout(str(conf / "gres.conf"), "hep-gpu01")
    gpus = [GpuSnapshot(index=i, minor_number=i, uuid=f"GPU-{i}",
                        name="NVIDIA TITAN Xp" if i in (1, 5) else "NVIDIA GeForce GTX 1080 Ti")
            for i in range(10)]
    found, error = map_job_gpus([str(i) for i in range(8)], gpus, layout)
    assert error is None
    assert found == (0, 2, 3, 4, 6, 7, 8, 9)
