"""The gres cache keys on slurm.conf too (issue 22, item 12)."""

from __future__ import annotations

import os

from healthcheck.read.gres import read_layout

GRES = "Name=gpu Type=v100 File=/dev/nvidia[0-1]\nName=gpu Type=a100 File=/dev/nvidia[2-3]\n"


def _slurm_conf(path, gres: str) -> None:
    old = path.stat() if path.exists() else None
    path.write_text(f"NodeName=n1 Gres={gres} CPUs=8\n")
    if old is not None:  # an edit within the clock's tick still changes the identity
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns + 1_000_000))


def test_slurm_job_gpus_cache_rereads_when_slurm_conf_changes_the_type_order(tmp_path):
    (tmp_path / "gres.conf").write_text(GRES)
    state = tmp_path / "state"
    _slurm_conf(tmp_path / "slurm.conf", "gpu:a100:2,gpu:v100:2")
    first = read_layout(str(tmp_path / "gres.conf"), "n1", str(state))
    assert first.files[0] == "/dev/nvidia2" and (state / "gres-map.json").exists()
    _slurm_conf(tmp_path / "slurm.conf", "gpu:v100:2,gpu:a100:2")  # gres.conf untouched
    assert read_layout(str(tmp_path / "gres.conf"), "n1", str(state)).files[0] == "/dev/nvidia0"
    # and the cache still answers while neither file changes
    again = read_layout(str(tmp_path / "gres.conf"), "n1", str(state))
    assert again.files == ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3")
