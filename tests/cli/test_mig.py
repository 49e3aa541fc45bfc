"""MIG end to end (issue 13), through the real CLI on the fake GPUs (tests/fakegpu: MIG devices
in NVML and CUDA).  On a MIG node Slurm (21.08+, AutoDetect=nvml) treats each MIG device as a
GPU: the prolog gets SLURM_JOB_GPUS as gres indices of MIG devices and CUDA_VISIBLE_DEVICES as
their MIG- UUIDs.  Debian's slurmd has no NVML plugin (no gpu_nvml.so), so no MIG gres on the
test cluster: the prolog runs here with the environment slurmd would give it."""

from __future__ import annotations

from typing import Dict, List

MIG_NODE = "gpus = 2\ngpu.1.mig_mode = 1\ngpu.1.mig.instances = 3\n"


def _mig_uuids(node) -> List[str]:
    doc = node.run("--node", "--json", scenario=MIG_NODE).json
    return [m["uuid"] for m in doc["gpus"][1]["mig_devices"]]


def _prolog(node, visible: List[str], extra: str = "") -> Dict:
    if extra:
        node.scenario.write_text(MIG_NODE + extra)
    result = node.run("--prolog", "--json", env={
        "SLURM_JOB_ID": "31", "SLURM_JOB_GPUS": ",".join(str(i) for i in range(len(visible))),
        "CUDA_VISIBLE_DEVICES": ",".join(visible), "SLURMD_NODENAME": "gpu-a"})
    return {"rc": result.rc, "doc": result.json, "stderr": result.stderr}


def test_a_mig_node_with_healthy_instances_passes_its_prolog_and_every_instance_of_the_job_is_probed(node):
    migs = _mig_uuids(node)
    assert len(migs) == 3 and all(m.startswith("MIG-") for m in migs)
    run = _prolog(node, migs[:2])
    assert run["rc"] == 0, (run["doc"]["findings"], run["stderr"])
    probed = sorted(p["device"] for p in run["doc"]["probes"])
    assert probed == sorted(migs[:2])  # the job's two instances, never the third (another job's)
    assert all(p["status"] == "ok" and p["gpu"] == 1 for p in run["doc"]["probes"])
    assert [g["index"] for g in run["doc"]["gpus"] if g["under_test"]] == [1]


def test_cuda_probe_a_failing_mig_instance_fails_the_job_naming_the_mig_device(node):
    migs = _mig_uuids(node)
    run = _prolog(node, migs[:1], extra="gpu.1.cuda.corrupt = 1\n")
    assert run["rc"] == 1
    [probe] = [f for f in run["doc"]["findings"] if f["check"] == "cuda.probe"]
    assert probe["gpu"] == 1 and f"on MIG device {migs[0]}" in probe["message"]


def test_ecc_volatile_uncorrected_and_remap_pending_are_judged_on_the_parent_gpu(node):
    migs = _mig_uuids(node)
    run = _prolog(node, migs[:1], extra="gpu.1.ecc.volatile.uncorrected = 2\n")
    assert run["rc"] == 1
    assert [(f["check"], f["gpu"]) for f in run["doc"]["findings"] if f["severity"] == "fail"] == [
        ("ecc.volatile_uncorrected", 1)]
    assert run["doc"]["action"]["reason"].startswith("gpu-healthcheck: gpu1 ")
    # row remapping reads NOT_SUPPORTED while MIG is on (as on real boards): no finding, no failure
    run = _prolog(node, migs[:1], extra="gpu.1.remap.pending = 1\n")
    assert run["rc"] == 0 and "remap.pending" not in [f["check"] for f in run["doc"]["findings"]]


def test_processes_leftover_and_memory_leaked_other_jobs_instances_are_not_this_jobs(node):
    migs = _mig_uuids(node)
    run = _prolog(node, migs[2:], extra="gpu.1.processes = 4242:10240\ngpu.1.memory.used_mib = 30000\n")
    assert run["rc"] == 0, run["doc"]["findings"]
    assert not [f for f in run["doc"]["findings"] if f["check"] in ("processes.leftover", "memory.leaked")]


def test_cuda_probe_a_mig_gpu_is_never_failed_for_a_whole_gpu_probe(node):
    """Given the whole MIG-enabled GPU by index (--node, or a job on GPU- UUID), every MIG device
    is probed; with none configured the probe is unknown, never a failure."""
    result = node.run("--node", "--json", scenario=MIG_NODE)
    assert result.rc == 0
    assert sorted(p["device"] or "" for p in result.json["probes"] if p["gpu"] == 1) == sorted(_mig_uuids(node))
    result = node.run("--node", "--json", scenario="gpus = 1\ngpu.0.mig_mode = 1\n")
    assert result.rc == 3 and not result.checks("fail")
