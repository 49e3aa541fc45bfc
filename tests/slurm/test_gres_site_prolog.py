"""A site's gres layout through the real Slurm: SLAC's hep-gpu01 (tests/fixtures/gres/slac),
its NodeName lines in a file slurm.conf Includes, gres.conf's File= with gaps for the type
slurm.conf counts and two records of a type it does not count, which slurmd ignores."""

from __future__ import annotations

import pytest

from tests.lib.gpucluster import GpuCluster, pci, require_slurm, serial

pytestmark = pytest.mark.slurm


def test_gres_slac_layout_the_8_gpu_job_is_probed_on_its_gpus_and_a_fault_on_one_drains(tmp_path, fakegpu):
    require_slurm()
    c = GpuCluster(tmp_path, fakegpu, nodes=["gpu-a"], gres_minors={"gpu-a": [0, 2, 3, 4, 6, 7, 8, 9]},
                   gres_types={"gpu-a": "gtx"}, gres_extra={"gpu-a": [("titan_xp", [1, 5])]},
                   nodes_include=True)
    ten = "gpus = 10\n"
    c.scenario("gpu-a").write_text(ten + "gpu.1.cuda.corrupt = 1\n")  # a TITAN Xp: no job gets it
    with c.cluster:
        assert "Include nodes.conf" in c.cluster.conf_path.read_text()
        first = c.cluster.sbatch(["--gres=gpu:gtx:8", "-w", "gpu-a"], "echo gpus=$SLURM_JOB_GPUS\n")
        c.cluster.wait_job(first, timeout=60)
        assert "gpus=" in c.cluster.job_output(first)
        assert not c.drained("gpu-a"), c.reason("gpu-a")
        # gres index 7 is /dev/nvidia9: a fault there is the job's, found and named
        c.scenario("gpu-a").write_text(ten + "gpu.9.cuda.corrupt = 1\n")
        second = c.cluster.sbatch(["--gres=gpu:gtx:8", "-w", "gpu-a"], "echo gpus=$SLURM_JOB_GPUS\n")
        reason = c.wait_reason("gpu-a")
        assert reason.startswith(f"gpu-healthcheck: gpu9 pci={pci(9)} sn={serial(9)} "), reason
        assert f"prolog job={second}" in reason
