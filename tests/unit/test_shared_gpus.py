"""Shared GPUs (gres/mps, gres/shard): co-tenants are not leftovers (pure parts; the real
cluster case is in tests/slurm/test_fault_matrix.py)."""

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config
from healthcheck.model import GpuProcess, GpuSnapshot, JobContext, Mode, NodeSnapshot, Severity
from healthcheck.read.procinfo import job_of_cgroup, with_jobs
from healthcheck.act.scontrol import parse_listpids

# `scontrol listpids * gpu-a` on Slurm 22.05.8 with two gres/mps jobs (seen)
LISTPIDS = """PID      JOBID    STEPID   LOCALID GLOBALID
2891     1        batch    0       0
2899     1        batch    -       -
2900     2        batch    0       0
"""


def test_listpids_and_cgroup_name_the_job():
    assert parse_listpids(LISTPIDS) == {2891: "1", 2899: "1", 2900: "2"}
    assert parse_listpids("") == {} and parse_listpids("PID JOBID\nx y\n") == {}
    v2 = "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n"
    v1 = "12:devices:/slurm/uid_1000/job_77/step_batch\n4:memory:/slurm/uid_1000/job_77/step_batch\n"
    assert job_of_cgroup(v2) == "1234" and job_of_cgroup(v1) == "77"
    assert job_of_cgroup("0::/user.slice/user-0.slice/session-1.scope\n") is None
    # Slurm 22.05's cgroup/v1 with several slurmd on one host (slurmd -N), as it wrote it here
    # (tests/README.md): the job's lines after the other controllers' root ones
    multi = ("9:name=systemd:/\n6:freezer:/slurm_gpu-a/uid_0/job_1/step_batch\n"
             "5:devices:/slurm_gpu-a/uid_0/job_1/step_batch/task_0\n0::/\n")
    assert job_of_cgroup(multi) == "1"


def _prolog(processes, job="9"):
    gpu = GpuSnapshot(index=0, uuid="GPU-0", memory_total_mib=81559, memory_used_mib=2052,
                      processes=processes)
    node = NodeSnapshot(host="a", gpus=(gpu,), sysfs_gpus=(), selected=(0,),
                        job=JobContext(job_id=job, gpu_ids=("0",)), shared_gres=("mps",))
    found, _ = run_checks(node, CheckContext(Config(), Mode.PROLOG, selected=(0,)))
    return [f for f in found if f.check == "processes.leftover"]


def test_processes_leftover_a_live_jobs_process_or_the_mps_server_is_a_co_tenant_and_anything_else_a_leftover():
    tenant = GpuProcess(2891, 2048, "alice", "python train.py", job_id="1", job_live=True)
    [f] = _prolog((tenant,))
    assert f.severity is Severity.INFO and "shared with live job(s) 1" in f.message
    mps = GpuProcess(50, 30, "root", "nvidia-cuda-mps-server")
    assert _prolog((mps,))[0].severity is Severity.INFO
    stray = GpuProcess(4242, 2048, "bob", "python old.py")
    [f] = _prolog((tenant, stray))
    assert f.severity is Severity.FAIL and f.value == 1 and "pid 4242" in f.message
    assert with_jobs((GpuSnapshot(index=0, processes=(stray,)),), {4242: "5"})[0].processes[0].job_id == "5"


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_the_parsers_of_slurm_and_proc_text_never_raise(text):
    """Any text from scontrol listpids or /proc/PID/cgroup (property)."""
    jobs = parse_listpids(text)
    assert all(isinstance(pid, int) and job.replace("_", "").replace("+", "").isdigit()
               for pid, job in jobs.items())
    job = job_of_cgroup(text)
    assert job is None or job.isdigit()
