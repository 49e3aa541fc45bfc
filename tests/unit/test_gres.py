"""gres indices -> GPUs, as slurmd numbers them (healthcheck/read/gres.py), and the cache."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.decide.gpumap import map_gres_indices, map_job_gpus
from healthcheck.model import GpuSnapshot
from healthcheck.read.gres import (GresConfError, expand_hostlist, parse_gres_conf, read_layout,
                                   slurm_conf_gres)

# eight GPUs whose minor number is their NVML index, as on most nodes
GPUS = [GpuSnapshot(index=i, minor_number=i, uuid=f"GPU-{i}") for i in range(8)]


def test_hostlists_expand_in_written_order_with_padding_and_several_items():
    assert expand_hostlist("/dev/nvidia[0-2,4-7]") == [f"/dev/nvidia{i}" for i in (0, 1, 2, 4, 5, 6, 7)]
    assert expand_hostlist("/dev/nvidia6,/dev/nvidia4") == ["/dev/nvidia6", "/dev/nvidia4"]
    assert expand_hostlist("gpu[01-03]") == ["gpu01", "gpu02", "gpu03"]
    for bad in ("/dev/nvidia[0-", "/dev/nvidia[3-1]", "/dev/nvidia[a]", "x]"):
        with pytest.raises(GresConfError):
            expand_hostlist(bad)


def test_a_gap_shifts_every_later_index():
    layout = parse_gres_conf("AutoDetect=off\nNodeName=gpu-a,gpu-b Name=gpu File=/dev/nvidia[0-2,4-7]\n", "gpu-a")
    assert map_gres_indices(["3"], layout, GPUS) == ((4,), None)
    assert map_job_gpus(["3", "6"], GPUS, layout) == ((4, 7), None)


def test_several_lines_other_nodes_and_other_gres_are_skipped():
    text = ("# two boards taken out\n"
            "NodeName=gpu-b Name=gpu File=/dev/nvidia[0-7]\n"
            "NodeName=gpu-a Name=gpu Type=h100 File=/dev/nvidia4 Cores=0-15\n"
            "NodeName=gpu-a Name=nic File=/dev/infiniband/uverbs0\n"
            "NodeName=gpu-a Name=gpu Type=h100 File=/dev/nvidia6\n")
    layout = parse_gres_conf(text, "gpu-a")
    assert layout.files == ("/dev/nvidia4", "/dev/nvidia6") and layout.uncertain is None
    assert map_gres_indices(["0", "1"], layout, GPUS) == ((4, 6), None)


def test_an_index_past_the_list_or_a_device_nvml_does_not_show_is_unknown_not_a_guess():
    layout = parse_gres_conf("Name=gpu File=/dev/nvidia[4,6]\n", "gpu-a")
    found, error = map_gres_indices(["2"], layout, GPUS)
    assert found == () and "gres index 2" in error
    found, error = map_gres_indices(["1"], layout, GPUS[:5])
    assert found == () and "/dev/nvidia6" in error


def test_several_types_follow_slurm_conf_order_or_are_unknown():
    text = "Name=gpu Type=b File=/dev/nvidia[0-1]\nName=gpu Type=a File=/dev/nvidia[2-3]\n"
    unsure = parse_gres_conf(text, "n1")
    assert unsure.uncertain and map_gres_indices(["0"], unsure, GPUS)[0] == ()
    ordered = parse_gres_conf(text, "n1", slurm_gres=[("a", 2), ("b", 2)])
    assert map_gres_indices(["0", "2"], ordered, GPUS) == ((2, 0), None)
    conf = "NodeName=n[1-4] CPUs=8 Gres=gpu:a:2,gpu:b:2 State=UNKNOWN\n"
    assert slurm_conf_gres(conf, "n1") == [("a", 2), ("b", 2)]


def test_autodetect_nvml_maps_only_where_nvml_order_and_file_order_agree():
    # minors out of PCI order (assigned at driver load): NVML index 0 is /dev/nvidia3.  A
    # slurmd with NVML numbers in NVML order (minors 3, 0, 2), Debian's (no gpu/nvml plugin)
    # in File= order (0, 2, 3): they agree on no index here, so nothing is guessed
    gpus = [GpuSnapshot(index=i, minor_number=m) for i, m in enumerate([3, 0, 1, 2])]
    layout = parse_gres_conf("AutoDetect=nvml\nName=gpu File=/dev/nvidia[0,2,3]\n", "n1")
    found, error = map_gres_indices(["0", "1", "2"], layout, gpus)
    assert found == () and "NVML's order" in error
    in_order = [GpuSnapshot(index=i, minor_number=i) for i in range(4)]
    assert map_gres_indices(["0", "2"], layout, in_order) == ((0, 3), None)
    everything = parse_gres_conf("AutoDetect=nvml\n", "n1")  # no File=: only NVML numbers them
    assert map_gres_indices(["1"], everything, gpus) == ((1,), None)


@pytest.mark.parametrize("text", ["Name=gpu MultipleFiles=/dev/nvidia[0-1]\n", "Name=gpu Count=8\n",
                                  "AutoDetect=rsmi\nName=gpu File=/dev/dri/renderD[128-129]\n",
                                  "Include /etc/slurm/gres.d/x.conf\n", "Name=gpu File=/dev/nvidia[0-\n"])
def test_layouts_we_cannot_prove_map_nothing(text):
    found, error = map_gres_indices(["0"], parse_gres_conf(text, "n1"), GPUS)
    assert found == () and error


def test_the_layout_is_cached_on_the_files_identity(tmp_path):
    conf, state = tmp_path / "gres.conf", tmp_path / "state"
    conf.write_text("Name=gpu File=/dev/nvidia[0-2,4-7]\n")
    assert read_layout(str(conf), "n1", str(state)).files[3] == "/dev/nvidia4"
    cached = json.loads((state / "gres-map.json").read_text())
    assert cached["layout"]["files"][3] == "/dev/nvidia4"
    st = conf.stat()
    conf.write_text("Name=gpu File=/dev/nvidia[0-7]\n")  # the admin puts GPU 3 back
    os.utime(conf, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert read_layout(str(conf), "n1", str(state)).files[3] == "/dev/nvidia3"
    missing = read_layout(str(tmp_path / "nope.conf"), "n1", str(state))
    assert missing.error and "nope.conf" in missing.error


@settings(max_examples=300)
@given(st.text(max_size=200), st.text(min_size=1, max_size=20))
def test_any_gres_conf_text_parses_to_a_layout_and_never_raises(text, node):
    layout = parse_gres_conf(text, node)
    map_gres_indices(["0", "1"], layout, GPUS)
