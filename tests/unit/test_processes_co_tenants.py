"""processes.leftover: who counts as a co-tenant of a shared GPU (issue 22, item 4; pure parts,
the real cluster case is tests/slurm/test_processes_co_tenants.py)."""

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config
from healthcheck.model import GpuProcess, GpuSnapshot, JobContext, Mode, NodeSnapshot, Severity, not_a_co_tenant
from healthcheck.read.gres import parse_gres_conf, slurm_conf_shared

LIVE = GpuProcess(2891, 61440, "alice", "python train.py", job_id="1", job_live=True, job_gpus=(0,))


def _leftover(proc, shared=("shard",), mode=Mode.PROLOG, gpu_index=0):
    gpu = GpuSnapshot(index=gpu_index, uuid=f"GPU-{gpu_index}", memory_total_mib=81559,
                      memory_used_mib=61444, processes=(proc,))
    node = NodeSnapshot(host="a", gpus=(gpu,), sysfs_gpus=(), selected=(gpu_index,),
                        job=JobContext(job_id="9", gpu_ids=(str(gpu_index),)), shared_gres=shared)
    found, _ = run_checks(node, CheckContext(Config(), mode, selected=(gpu_index,)))
    [f] = [f for f in found if f.check == "processes.leftover"]
    return f


def test_processes_leftover_a_live_job_on_its_own_gpu_of_a_shared_node_is_a_co_tenant():
    assert not_a_co_tenant(LIVE, 0, ("shard",), "9") is None
    f = _leftover(LIVE)
    assert f.severity is Severity.INFO and "shared with live job(s) 1" in f.message
    assert "gres/shard" in f.message
    # gres/mps sets no SLURM_JOB_GPUS: which GPU the job has cannot be known, so it is exempt
    assert not_a_co_tenant(LIVE._replace(job_gpus=None), 0, ("mps",), "9") is None


def test_processes_leftover_a_stale_job_cgroup_is_a_leftover():
    stale = LIVE._replace(job_id="4242", job_live=False, job_gpus=None)
    assert "job 4242 no longer runs here" in not_a_co_tenant(stale, 0, ("shard",), "9")
    f = _leftover(stale)
    assert f.severity is Severity.FAIL and f.drains and "stale job cgroup" in f.message
    # slurmd not asked (it could not say): not proven live, a leftover
    unasked = LIVE._replace(job_live=None)
    assert "could not say" in not_a_co_tenant(unasked, 0, ("shard",), "9")
    assert _leftover(unasked).severity is Severity.FAIL


def test_processes_leftover_a_live_job_on_a_gpu_it_was_not_given_is_a_leftover():
    rogue = LIVE._replace(job_gpus=(0,))
    assert "was given GPU(s) 0, not this one" in not_a_co_tenant(rogue, 3, ("shard",), "9")
    f = _leftover(rogue, gpu_index=3)
    assert f.severity is Severity.FAIL and "not this one" in f.message
    assert _leftover(rogue, gpu_index=3, mode=Mode.EPILOG).severity is Severity.WARN


def test_processes_leftover_a_live_job_or_the_mps_server_on_a_node_that_shares_no_gpu_is_a_leftover():
    assert "no GPU of this node is shared" in not_a_co_tenant(LIVE, 0, (), "9")
    f = _leftover(LIVE, shared=())
    assert f.severity is Severity.FAIL and "job 1's, but no GPU of this node is shared" in f.message
    mps = GpuProcess(50, 30, "root", "nvidia-cuda-mps-server")
    assert not_a_co_tenant(mps, 0, ("mps",), "9") is None
    assert _leftover(mps, shared=()).severity is Severity.FAIL
    # a process in no job says only that (no note about sharing on the common path)
    f = _leftover(GpuProcess(7, 100, "bob", "python old.py"), shared=())
    assert f.severity is Severity.FAIL and "shared" not in f.message


def test_processes_leftover_gres_conf_and_slurm_conf_say_which_nodes_share_their_gpus():
    conf = ("AutoDetect=off\nNodeName=a Name=gpu File=/dev/nvidia[0-1]\n"
            "NodeName=a Name=shard Count=8 File=/dev/nvidia[0-1]\n"
            "NodeName=b Name=gpu File=/dev/nvidia[0-1]\n")
    assert parse_gres_conf(conf, "a").shared == ("shard",)
    assert parse_gres_conf(conf, "b").shared == ()
    slurm = "NodeName=c[1-4] Gres=gpu:4,mps:400 CPUs=8\nNodeName=d Gres=gpu:a100:4\n"
    assert slurm_conf_shared(slurm, "c2") == ("mps",) and slurm_conf_shared(slurm, "d") == ()
    assert slurm_conf_shared("", "c2") == ()
