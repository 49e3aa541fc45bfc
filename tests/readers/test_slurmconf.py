"""slurm.conf and gres.conf read as slurmd reads them (healthcheck/read/slurmconf.py): Include
followed, loops, depth, globs and ambiguous relative names refused with the file named, and
AutoDetect=full / nvidia ordered only where every order slurmd may use agrees."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.decide.gpumap import map_gres_indices
from healthcheck.model import GpuSnapshot
from healthcheck.read.gres import parse_gres_conf, read_layout, slurm_conf_gres
from healthcheck.read.slurmconf import (MAX_INCLUDE_DEPTH, ConfReadError, logical_lines, read_conf)
from tests.lib.slurmdg import slurmd_gres

GPUS = [GpuSnapshot(index=i, minor_number=i) for i in range(12)]


def _tree(tmp_path, files: dict) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text.replace("DIR", str(tmp_path)))


def test_gres_include_in_gres_conf_is_followed_as_slurmd_does(tmp_path):
    _tree(tmp_path, {"slurm.conf": "ClusterName=c\nSlurmctldHost=localhost\nGresTypes=gpu\n"
                                   "NodeName=n1 CPUs=1 Gres=gpu:3\nPartitionName=p Nodes=n1\n",
                     "gres.conf": "AutoDetect=off\nInclude gres.d.conf\nNodeName=n1 Name=gpu File=DIR/nvidia3\n",
                     "gres.d.conf": "NodeName=n1 Name=gpu File=DIR/nvidia[0,2]\n"})
    layout = read_layout(str(tmp_path / "gres.conf"), "n1")
    assert [os.path.basename(f) for f in layout.files] == ["nvidia0", "nvidia2", "nvidia3"]
    assert map_gres_indices(["1", "2"], layout, GPUS) == ((2, 3), None)
    for minor in (0, 2, 3):
        os.mknod(tmp_path / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(195, minor))
    live = slurmd_gres(tmp_path, "n1")
    if live is None:
        pytest.skip("no slurmd -G here")
    assert live[0] == ["nvidia0", "nvidia2", "nvidia3"], live[1]


def test_gres_include_in_slurm_conf_gives_the_node_line_and_percent_c(tmp_path):
    _tree(tmp_path, {"slurm.conf": "ClusterName=Big\nINCLUDE nodes-%c.conf\n",
                     "nodes-big.conf": "NodeName=n[1-4] Gres=gpu:b:1,gpu:a:1\n",
                     "gres.conf": "Name=gpu Type=a File=/dev/nvidia0\nName=gpu Type=b File=/dev/nvidia1\n"})
    layout = read_layout(str(tmp_path / "gres.conf"), "n2")
    assert layout.files == ("/dev/nvidia1", "/dev/nvidia0") and layout.uncertain is None


@pytest.mark.parametrize("files,message", [
    ({"gres.conf": "Include a.conf\n", "a.conf": "Include gres.conf\n"}, "include loop"),
    ({"gres.conf": "Include gres.conf\n"}, "include loop"),
    ({"gres.conf": "Include gres.d/*.conf\n"}, "globs"),
    ({"gres.conf": "Include missing.conf\n"}, "missing.conf: cannot read"),
    ({"gres.conf": "Include x-%c.conf\n"}, "%c"),
    ({"gres.conf": "Include\t\n"}, "names no file"),
    ({"gres.conf": "Include sub/a.conf\n", "sub/a.conf": "Include b.conf\n", "b.conf": ""}, "absolute path"),
])
def test_gres_include_errors_name_the_file(tmp_path, files, message):
    _tree(tmp_path, files)
    layout = read_layout(str(tmp_path / "gres.conf"), "n1")
    assert layout.error and message in layout.error and str(tmp_path) in layout.error, layout.error
    assert map_gres_indices(["0"], layout, GPUS)[0] == ()


def test_gres_include_deeper_than_the_limit_is_refused_naming_the_file(tmp_path):
    chain = {f"f{i}.conf": f"Include f{i + 1}.conf\n" for i in range(MAX_INCLUDE_DEPTH + 2)}
    chain["gres.conf"] = "Include f0.conf\n"
    _tree(tmp_path, chain)
    with pytest.raises(ConfReadError, match=f"nested more than {MAX_INCLUDE_DEPTH} deep") as raised:
        read_conf(str(tmp_path / "gres.conf"), str(tmp_path))
    assert f"f{MAX_INCLUDE_DEPTH}.conf" in str(raised.value)
    del chain[f"f{MAX_INCLUDE_DEPTH - 1}.conf"]
    chain[f"f{MAX_INCLUDE_DEPTH - 1}.conf"] = "Name=gpu File=/dev/nvidia0\n"
    _tree(tmp_path, chain)
    lines, files = read_conf(str(tmp_path / "gres.conf"), str(tmp_path))
    assert [l.text for l in lines] == ["Name=gpu File=/dev/nvidia0"] and len(files) == MAX_INCLUDE_DEPTH + 1


def test_gres_include_edit_in_an_included_file_rebuilds_the_cache(tmp_path):
    _tree(tmp_path, {"gres.conf": "Include more.conf\n", "more.conf": "Name=gpu File=/dev/nvidia[0-1]\n"})
    state = str(tmp_path / "state")
    assert len(read_layout(str(tmp_path / "gres.conf"), "n1", state).files) == 2
    st = (tmp_path / "more.conf").stat()
    (tmp_path / "more.conf").write_text("Name=gpu File=/dev/nvidia[0-2]\n")
    os.utime(tmp_path / "more.conf", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert len(read_layout(str(tmp_path / "gres.conf"), "n1", state).files) == 3
    (tmp_path / "slurm.conf").write_text("NodeName=n1 Gres=gpu:1\n")  # appears later
    assert len(read_layout(str(tmp_path / "gres.conf"), "n1", state).files) == 1


def test_gres_lines_follow_slurms_comments_continuations_and_escapes():
    text = "Name=gpu \\\nFile=/dev/nvidia0 # a comment\nName=gpu File=/dev/nvidia\\#1\n  \n"
    assert [(l.number, l.text.strip()) for l in logical_lines(text, "g")] == [
        (1, "Name=gpu File=/dev/nvidia0"), (3, "Name=gpu File=/dev/nvidia#1")]


def test_gres_a_type_slurm_conf_does_not_give_the_node_is_dropped_and_default_gres_holds():
    conf = "NodeName=DEFAULT Gres=gpu:v100:2\nNodeName=n[1-2] CPUs=4\nNodeName=n3 CPUs=4 Gres=gpu:a:1\n"
    assert slurm_conf_gres(conf, "n2") == [("v100", 2)] and slurm_conf_gres(conf, "n3") == [("a", 1)]
    assert slurm_conf_gres("NodeName=n9 CPUs=1\n", "n9") == [] and slurm_conf_gres("", "n9") is None
    layout = parse_gres_conf("Name=gpu Type=v100 File=/dev/nvidia[0-2]\nName=gpu Type=t File=/dev/nvidia3\n",
                             "n1", slurm_gres=[("v100", 2)])
    assert layout.files == ("/dev/nvidia0", "/dev/nvidia1") and layout.uncertain is None


def test_gres_autodetect_full_and_nvidia_map_only_where_their_orders_agree():
    # 12 GPUs, minors = NVML index.  gpu/nvidia sorts by file name: nvidia10 before nvidia2
    files = "Name=gpu File=/dev/nvidia[0-11]\n"
    for value in ("full", "nvidia", "FULL"):
        layout = parse_gres_conf(f"AutoDetect={value}\n{files}", "n1")
        assert layout.uncertain is None
        found, error = map_gres_indices(["0", "1"], layout, GPUS)
        assert found == (0, 1) and error is None
        found, error = map_gres_indices(["2"], layout, GPUS)
        assert found == () and "differ" in error
    nvml = parse_gres_conf(f"AutoDetect=nvml\n{files}", "n1")
    assert map_gres_indices(["2", "11"], nvml, GPUS) == ((2, 11), None)  # gpu/nvml: NVML order
    amd = parse_gres_conf("AutoDetect=rsmi\nName=gpu File=/dev/dri/renderD128\n", "n1")
    assert "not NVIDIA's" in amd.uncertain


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("Include \\#\n=ab/*%c[]0-9")), max_size=120))
def test_gres_any_text_with_includes_reads_or_raises_conf_read_error(tmp_path_factory, text):
    where = tmp_path_factory.mktemp("conf")
    (where / "gres.conf").write_text(text)
    try:
        lines, _ = read_conf(str(where / "gres.conf"), str(where))
    except ConfReadError as exc:
        assert str(where) in str(exc)
        return
    assert all(l.path.startswith(str(where)) for l in lines)


NODE = "n1 CPUs=1"
CASES = [
    ("NodeName=DEFAULT Gres=gpu:2\nNodeName=n1 CPUs=1", "Name=gpu File=DIR/nvidia[0-3]\n"),
    (f"NodeName={NODE} Gres=gpu:3", "Name=GPU Files=DIR/nvidia[3,1,0]\n"),
    (f"NodeName={NODE} Gres=gpu:4", "AutoDetect=full\nName=gpu File=DIR/nvidia[2,0,3,1]\n"),
    (f"NodeName={NODE} Gres=gpu:4", "AutoDetect=nvidia\nName=gpu File=DIR/nvidia[1-3]\nName=gpu File=DIR/nvidia0\n"),
    (f"NodeName={NODE} Gres=gpu:a:1,gpu:b:2", "Name=gpu Type=b File=DIR/nvidia[0-2]\nName=gpu Type=c File=DIR/nvidia3\n"
                                             "Name=gpu Type=A File=DIR/nvidia3\n"),
    (f"NodeName={NODE} Gres=gpu:3", "Name=gpu Type=x \\\nFile=DIR/nvidia[0-1] # two\nName=gpu Type=y File=DIR/nvidia3\n"),
    (f"NodeName={NODE} Gres=gpu:2", "NodeName=n[0-3] Name=gpu File=DIR/nvidia[1-2]\nNodeName=n2 Name=gpu File=DIR/nvidia0\n"),
    (f"NodeName={NODE}", "Name=gpu File=DIR/nvidia[0-1]\n"),
]


@pytest.mark.parametrize("node_line,gres", CASES)
def test_gres_slurmd_agrees_on_defaults_case_continuations_types_and_autodetect(tmp_path, node_line, gres):
    _tree(tmp_path, {"slurm.conf": f"ClusterName=c\nSlurmctldHost=localhost\nGresTypes=gpu\n{node_line}\n"
                                   "PartitionName=p Nodes=n1\n", "gres.conf": gres})
    layout = read_layout(str(tmp_path / "gres.conf"), "n1")
    ours = [os.path.basename(f) for f in layout.files]
    mapped = {i: map_gres_indices([str(i)], layout, GPUS)[0] for i in range(len(ours))}
    for minor in range(4):
        os.mknod(tmp_path / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(195, minor))
    live = slurmd_gres(tmp_path, "n1")
    if live is None:
        pytest.skip("no slurmd -G here")
    assert ours == live[0], live[1]
    # every index we map is the GPU slurmd gives it (22.05 without gpu/nvml: File= order)
    assert all(f"nvidia{g[0]}" == live[0][i] for i, g in mapped.items() if g), (mapped, live[0])
