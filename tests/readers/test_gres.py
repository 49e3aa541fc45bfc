"""Our model of slurmd's gres order checked against what a real slurmd builds (`slurmd -G`)."""

from __future__ import annotations

import os

import pytest

from healthcheck.model import GpuSnapshot
from healthcheck.read.gres import parse_gres_conf


def _slurmd_gres_order(tmp_path, gres_conf: str, gres_count: int, system: list) -> list:
    """The device files in gres index order as a real slurmd builds them (`slurmd -G`).

    system: the GPUs NVML would enumerate, as (minor) in NVML order.  Slurm 22.05's gres/gpu
    reads them from fake_gpus.conf beside slurm.conf when that file exists
    (`_get_system_gpu_list_fake`), and then runs the same merge as with AutoDetect=nvml
    (`_merge_system_gres_conf`), Links marking each GPU's enumeration position as gpu_nvml.c
    does.  Debian's slurmd has no gpu/nvml plugin, so this is how its NVML path can be driven.
    """
    import re
    import shutil
    import subprocess

    if not shutil.which("slurmd", path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip("slurmd is not installed")
    minors = sorted(set(system) | {int(m) for m in re.findall(r"(\d+)", gres_conf.split("File=")[-1])})
    for minor in minors:
        os.mknod(tmp_path / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(195, minor))
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=g\nSlurmctldHost=localhost\nGresTypes=gpu\n"
        f"NodeName=n1 Gres=gpu:{gres_count} CPUs=1\nPartitionName=p Nodes=n1\n")
    (tmp_path / "gres.conf").write_text(gres_conf.replace("DIR", str(tmp_path)))
    links = lambda i: ",".join("-1" if j == i else "0" for j in range(len(system)))  # noqa: E731
    (tmp_path / "fake_gpus.conf").write_text("".join(
        f"(null)|1|0|{links(i)}|{tmp_path}/nvidia{minor}\n" for i, minor in enumerate(system)))
    done = subprocess.run(["slurmd", "-G", "-N", "n1"], capture_output=True, text=True, timeout=60,
                          env={"SLURM_CONF": str(tmp_path / "slurm.conf"), "PATH": "/usr/sbin:/usr/bin"})
    lines = [l for l in done.stdout.splitlines() + done.stderr.splitlines() if "Gres Name=gpu" in l]
    if not lines and "cannot create auth context for auth/munge" in done.stderr:
        # Slurm 24.11's slurmd creates a munge credential before it prints the gres list (22.05
        # does not); this test runs a bare slurmd, no munged.  It still runs on 22.05.
        pytest.skip("this slurmd's -G needs a running munged (Slurm >= 24.11), which this test "
                    "does not start:\n" + done.stderr[-500:])
    assert lines, done.stdout + done.stderr
    return [int(re.search(r"File=\S*nvidia(\d+)\b", l).group(1)) for l in lines]


@pytest.mark.parametrize("conf,count", [("Name=gpu File=DIR/nvidia[0,2,3]\n", 3),
                                        ("Name=gpu File=DIR/nvidia[0-3]\n", 4),
                                        ("Name=gpu File=DIR/nvidia2\nName=gpu File=DIR/nvidia0\n", 2)])
def test_our_model_of_slurmds_nvml_order_is_what_a_real_slurmd_builds(tmp_path, conf, count):
    from healthcheck.decide.gpumap import nvml_order

    system = [3, 0, 1, 2]  # NVML index i is /dev/nvidia<system[i]>: minors out of PCI order
    gpus = [GpuSnapshot(index=i, minor_number=m) for i, m in enumerate(system)]
    layout = parse_gres_conf("AutoDetect=nvml\n" + conf.replace("DIR", "/dev"), "n1")
    ours = [system[i] for i in nvml_order(layout, gpus)]
    assert ours == _slurmd_gres_order(tmp_path, conf, count, system)
