"""gres indices -> GPUs against a real `slurmd -G` (issue 22, items 5, 6, 13, 14).

Each case writes slurm.conf, gres.conf (and, for AutoDetect, fake_gpus.conf: the system GPU
list Slurm 22.05's gres/gpu reads instead of NVML, `_get_system_gpu_list_fake`) into tmp_path,
runs `slurmd -G`, and compares the device list slurmd prints with ours.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import List, Optional, Sequence, Tuple

import pytest

from healthcheck.decide.gpumap import map_gres_indices, nvml_type
from healthcheck.model import GpuSnapshot
from healthcheck.read.gres import parse_gres_conf, read_layout

CHR = 0o020000


def _slurmd_g(tmp_path, gres: str, gres_conf: str, system: Sequence[Tuple[str, int]] = ()) -> Tuple[List[str], str]:
    """(the device files in gres index order, slurmd's whole output) of a real `slurmd -G`.

    system: the GPUs NVML would enumerate, in NVML order, as (NVML name, minor)."""
    if not shutil.which("slurmd", path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip("slurmd is not installed")
    if os.geteuid() != 0:
        pytest.skip("character device files need root (mknod)")
    for minor in range(4):
        if not (tmp_path / f"nvidia{minor}").exists():
            os.mknod(tmp_path / f"nvidia{minor}", 0o666 | CHR, os.makedev(195, minor))
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=g\nSlurmctldHost=localhost\nGresTypes=gpu\n"
        f"NodeName=n1 Gres={gres} CPUs=1\nPartitionName=p Nodes=n1\n")
    (tmp_path / "gres.conf").write_text(gres_conf.replace("DIR", str(tmp_path)))
    if system:
        links = lambda i: ",".join("-1" if j == i else "0" for j in range(len(system)))  # noqa: E731
        (tmp_path / "fake_gpus.conf").write_text("".join(
            f"{nvml_type(name)}|1|0|{links(i)}|{tmp_path}/nvidia{minor}\n"
            for i, (name, minor) in enumerate(system)))
    done = subprocess.run(["slurmd", "-G", "-N", "n1"], capture_output=True, text=True, timeout=60,
                          env={"SLURM_CONF": str(tmp_path / "slurm.conf"), "PATH": "/usr/sbin:/usr/bin"})
    output = done.stdout + done.stderr
    lines = [l for l in output.splitlines() if "Gres Name=gpu" in l]
    if not lines and "cannot create auth context for auth/munge" in output:
        pytest.skip("this slurmd's -G needs a running munged (Slurm >= 24.11)")
    files: List[str] = []
    for line in lines:  # one line per record: File=DIR/nvidia[0-2] expands in written order
        from healthcheck.read.gres import expand_hostlist

        files.extend(os.path.basename(f) for f in expand_hostlist(re.search(r"File=(\S+)", line).group(1)))
    return files, output


def _ours(tmp_path, gpus: Sequence[GpuSnapshot], count: int) -> List[Optional[str]]:
    """Our device file (nvidiaM, M = the GPU's minor) at each gres index 0..count-1."""
    layout = read_layout(str(tmp_path / "gres.conf"), "n1")
    by_index = {g.index: g.minor_number for g in gpus}
    out: List[Optional[str]] = []
    for position in range(count):
        found, _ = map_gres_indices([str(position)], layout, gpus)
        out.append(f"nvidia{by_index[found[0]]}" if found else None)
    return out


GPUS4 = [GpuSnapshot(index=i, minor_number=i) for i in range(4)]


@pytest.mark.parametrize("gres,conf", [
    # the case: a --gres=gpu:a100:1 job got index 1, which is nvidia2, not nvidia1
    ("gpu:v100:1,gpu:a100:1", "Name=gpu Type=v100 File=DIR/nvidia[0-1]\nName=gpu Type=a100 File=DIR/nvidia[2-3]\n"),
    ("gpu:a100:1,gpu:v100:1", "Name=gpu Type=v100 File=DIR/nvidia0\nName=gpu Type=a100 File=DIR/nvidia[2-3]\n"
                              "Name=gpu Type=v100 File=DIR/nvidia1\n"),
    ("gpu:a100:1,gpu:v100:2", "Name=gpu Type=v100 File=DIR/nvidia0\nName=gpu Type=a100 File=DIR/nvidia[2-3]\n"
                              "Name=gpu Type=v100 File=DIR/nvidia1\n"),
    ("gpu:3", "Name=gpu File=DIR/nvidia[0-3]\n"),
])
def test_slurm_job_gpus_keeps_the_first_count_files_of_each_type_as_slurmd_does(tmp_path, gres, conf):
    theirs, output = _slurmd_g(tmp_path, gres, conf)
    if "gpu:3" not in gres:
        assert "Ignoring extra GRES" in output
    assert _ours(tmp_path, GPUS4, len(theirs)) == theirs
    layout = read_layout(str(tmp_path / "gres.conf"), "n1")
    assert len(layout.files) == len(theirs)  # the ignored files are no gres index at all


def test_slurm_job_gpus_takes_device_numbers_from_the_file_not_its_name(tmp_path):
    # /dev/gpu/slot0 is the device nvidia1 (a site's udev names): slurmd lists slot0 first,
    # and that gres index is the GPU with minor 1
    os.makedirs(tmp_path / "gpu")
    if os.geteuid() == 0:
        os.mknod(tmp_path / "gpu" / "slot0", 0o666 | CHR, os.makedev(195, 1))
        os.mknod(tmp_path / "gpu" / "slot1", 0o666 | CHR, os.makedev(195, 0))
    theirs, _ = _slurmd_g(tmp_path, "gpu:2", "Name=gpu File=DIR/gpu/slot[0-1]\n")
    assert theirs == ["slot0", "slot1"]
    assert _ours(tmp_path, GPUS4, 2) == ["nvidia1", "nvidia0"]
    assert read_layout(str(tmp_path / "gres.conf"), "n1").note is None


def test_slurm_job_gpus_falls_back_to_the_names_digits_and_says_so(tmp_path):
    (tmp_path / "gres.conf").write_text(f"Name=gpu File={tmp_path}/absent/nvidia[2-3]\n")
    layout = read_layout(str(tmp_path / "gres.conf"), "n1")
    assert layout.minors == (2, 3)
    assert "cannot stat" in layout.note and "absent/nvidia2" in layout.note and "digits" in layout.note
    assert map_gres_indices(["1"], layout, GPUS4) == ((3,), None)


@pytest.mark.parametrize("conf,nvml", [
    ("AutoDetect=nvml\nName=gpu File=DIR/nvidia[0-1]\n", True),
    ("NodeName=n1 AutoDetect=off\nAutoDetect=nvml\nName=gpu File=DIR/nvidia[0-1]\n", False),
    ("AutoDetect=nvml\nNodeName=n1 AutoDetect=off Name=gpu File=DIR/nvidia[0-1]\n", False),
    ("Name=gpu AutoDetect=nvml File=DIR/nvidia[0-1]\n", False),  # in-line without NodeName
    ("NodeName=n1 AutoDetect=nvml\nAutoDetect=off\nName=gpu File=DIR/nvidia[0-1]\n", True),
    ("NodeName=n2 AutoDetect=nvml\nName=gpu File=DIR/nvidia[0-1]\n", False),
])
def test_slurm_job_gpus_autodetect_precedence_is_slurmds(tmp_path, conf, nvml):
    # Debian's slurmd has no NVML library: it says so exactly when it took AutoDetect=nvml
    _, output = _slurmd_g(tmp_path, "gpu:2", conf)
    took_nvml = "configured with nvml functionality" in output
    assert took_nvml is nvml, output
    ours = parse_gres_conf(conf.replace("DIR", str(tmp_path)), "n1").autodetect
    assert (ours == "nvml") is took_nvml


V100, A100 = "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-80GB"
SYSTEM = [(V100, 3), (A100, 0), (V100, 1), (A100, 2)]  # NVML order; minors out of order
MIXED = [GpuSnapshot(index=i, minor_number=m, name=n) for i, (n, m) in enumerate(SYSTEM)]


@pytest.mark.parametrize("gres,conf", [
    ("gpu:v100:2,gpu:a100:2", "AutoDetect=nvml\nName=gpu Type=v100 Count=2\nName=gpu Type=a100 Count=2\n"),
    ("gpu:a100:2,gpu:V100:2", "AutoDetect=nvml\nName=gpu Type=V100 Count=2\nName=gpu Type=a100 Count=2\n"),
    ("gpu:h100:2,gpu:a100:2", "AutoDetect=nvml\nName=gpu Type=h100 Count=2\nName=gpu Type=a100 Count=2\n"),
    ("gpu:a100:1,gpu:v100:2", "AutoDetect=nvml\nName=gpu Type=v100 Count=2\nName=gpu Type=a100 Count=1\n"),
    ("gpu:sxm:4", "AutoDetect=nvml\nName=gpu Type=sxm Count=4\n"),
])
def test_slurm_job_gpus_matches_type_against_the_nvml_name_as_slurmd_does(tmp_path, gres, conf):
    theirs, _ = _slurmd_g(tmp_path, gres, conf, SYSTEM)
    assert _ours(tmp_path, MIXED, len(theirs)) == theirs
    layout = read_layout(str(tmp_path / "gres.conf"), "n1")
    assert map_gres_indices([str(len(theirs))], layout, MIXED)[0] == ()  # past the list: unknown


def test_slurm_job_gpus_autodetect_with_type_and_file_never_maps_a_wrong_gpu(tmp_path):
    conf = "AutoDetect=nvml\nName=gpu Type=V100 File=DIR/nvidia[1,3]\nName=gpu Type=a100 File=DIR/nvidia[0,2]\n"
    theirs, _ = _slurmd_g(tmp_path, "gpu:a100:2,gpu:V100:2", conf, SYSTEM)
    ours = _ours(tmp_path, MIXED, len(theirs))
    assert all(o is None or o == t for o, t in zip(ours, theirs)), (ours, theirs)


def test_slurm_job_gpus_a_gpu_without_a_name_leaves_only_later_indices_unknown():
    layout = parse_gres_conf("AutoDetect=nvml\nName=gpu Type=v100 Count=2\nName=gpu Type=a100 Count=2\n", "n1")
    gpus = [g._replace(name=None) if g.index == 2 else g for g in MIXED]
    assert map_gres_indices(["0", "1"], layout, gpus) == ((0, 1), None)
    found, error = map_gres_indices(["2"], layout, gpus)
    assert found == () and "GPU 2 did not tell its name" in error
