"""--level deep on a GPU that a live co-tenant shares (gres/shard), through the real CLI on the
fake GPUs: the memory test sizes itself by what the co-tenant leaves, as the CUDA probe does,
and what the deep tests find there is unknown, never a fail.  slurmd's answer to `scontrol
listpids` is a stub (the Slurm boundary), as in tests/cli/test_probe_co_tenants.py."""

import os

from tests.cli.test_probe_co_tenants import JOB, shard_node

MIB = 1 << 20


def test_deep_on_a_shared_gpu_sizes_by_what_the_co_tenant_leaves_and_never_fails(node, tmp_path):
    pid = os.getpid()
    shard_node(node, tmp_path, pid)
    node.write_config(node.config_extra + "\n[deep]\nbandwidth_mib = 2\nduration_s = 0.5\n"
                      "[dcgm]\nenabled = false\n")
    result = node.run("--prolog", "--level", "deep", "--json", env=JOB, scenario=(
        f"gpus = 8\ngpu.*.memory.total_mib = 48\ngpu.0.processes = {pid}:16\n"
        "gpu.0.compute.wrong = 3\n"))
    assert result.rc == 0, result.stdout + result.stderr
    [row] = [r for r in result.json["deep"]["gpus"] if r["gpu"] == 0]
    # at most half of the 32 MiB job 77 leaves (with the probe's margins), never the whole board
    assert 0 < row["memory_bytes"] <= 16 * MIB, row["memory_bytes"]
    assert row["wrong_elements"] > 0  # the fake's wrong answers were seen...
    [wrong] = [f for f in result.json["findings"] if f["check"] == "deep.compute_wrong"]
    # ...and are not judged on a GPU a live job shares: unknown, no action, saying why
    assert wrong["gpu"] == 0 and wrong["severity"] == "unknown" and wrong["action"] == "none"
    assert "live co-tenants hold 16 MiB" in wrong["message"]
    assert not [f for f in result.json["findings"] if f["severity"] == "fail"]
