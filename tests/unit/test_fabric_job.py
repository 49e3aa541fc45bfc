"""decide/internodejob.py and the sweep's pure edges: the pair job's script, its output judged
(a hang, a missing program, a rail), the candidates read from `scontrol -o show nodes`, and
what the sweep records."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.act.scontrol import parse_show_nodes
from healthcheck.decide.sweep import SweepAction, SweepReport
from healthcheck.decide.sweepnodes import candidates
from healthcheck.report.sweep import history_record, metrics_text
from healthcheck.act.sweeprun import minutes, sbatch_args, Setup
from healthcheck.decide.internodejob import JobSpec, SetupProblem, NotSpanned, job_script, judge_job_output
from healthcheck.read.internodejob import read_job_output, split_output
from healthcheck.decide.sweep import Job, JobResult, NodeOutcome, SweepOutcome
from healthcheck.model import NodeAction, Outcome

SPEC = JobSpec("/opt/nccl-tests/build/all_reduce_perf", ("-b", "1G", "-e", "1G"), ("--mpi=pmix",), 8, 60.0,
               "ib_write_bw", ("mlx5_0",))
JOB = Job(("gpu-a", "gpu-b"), "pair", 1)
# the rank lines rank 0 prints for a job over both nodes (nccl-tests' own format)
RANKS = "".join(f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on {'gpu-a' if r < 8 else 'gpu-b':>10} device {r % 8:2d} "
                f"[0x{0x18 + r % 8:02x}] NVIDIA H100 80GB HBM3\n" for r in range(16))
TABLE = RANKS + ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
         "  1073741824     268435456     float     sum      -1   5190.8   25.86   25.86      0   5186.6   25.88   25.88      0\n"
         "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 25.87 \n")
RAIL = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        " 65536      5000             392.38             392.34 \t\t     0.748336\n" + "-" * 87 + "\n")


def judge_text(spec: JobSpec, job: Job, text: str, state: str, job_id: str) -> JobResult:
    """The job's output as act/sweeprun.py hands it over: read, then judged."""
    return judge_job_output(spec, job, read_job_output(text), state, job_id)


def output(collective: str, rc, rail: str = RAIL, rail_rc=0) -> str:
    text = f"== gpu-healthcheck collective begin\n{collective}"
    if rc is not None:
        text += f"== gpu-healthcheck collective rc={rc}\n== gpu-healthcheck rail mlx5_0 begin\n{rail}"
        if rail_rc is not None:
            text += f"== gpu-healthcheck rail mlx5_0 rc={rail_rc}\n== gpu-healthcheck end\n"
    return text


def test_fabric_job_script_runs_the_collective_and_each_rail_under_timeout() -> None:
    script = job_script(SPEC, JOB, "S1")
    assert script.startswith("#!/bin/sh\n")
    assert ("timeout --kill-after=10 60 srun --mpi=pmix --nodes=2 --ntasks-per-node=8 "
            "/opt/nccl-tests/build/all_reduce_perf -b 1G -e 1G 2>&1") in script
    assert "ib_write_bw -d mlx5_0 --use_cuda=0 --report_gbits -F" in script and "--nodelist=gpu-a,gpu-b" in script
    args = sbatch_args(Setup("S1", "/out", "gpu", "maint"), SPEC, JOB, "/out/r01.out")
    assert ["--nodes=2", "--exclusive", "--nodelist=gpu-a,gpu-b", f"--time={minutes(60)}"] == args[3:7]
    assert "--partition=gpu" in args and "--reservation=maint" in args and minutes(60) == 2 and minutes(15) == 2


def test_fabric_job_output_passes_with_its_figures() -> None:
    result = judge_text(SPEC, JOB, output(TABLE, 0), "COMPLETED", "12")
    assert (result.busbw_gbps, result.problem, result.job_id) == (25.88, None, "12")
    assert result.rails[0].gbps == 392.34 and result.rails[0].problem is None
    assert set(split_output(output(TABLE, 0))) == {"collective", "mlx5_0"}


@pytest.mark.parametrize("text, state, problem", [
    (output("# Using devices\n", 124), "COMPLETED", "hang: ended by its time limit"),
    (output("# Using devices\n", None), "TIMEOUT", "hang: ended by its time limit"),
    (output("# Using devices\n", None), "CANCELLED", "hang: ended by its time limit"),
    ("", "FAILED", "the job printed nothing of ours (Slurm state FAILED)"),
    (output("gpu-a: Test NCCL failure common.cu:1148 'unhandled system error'\n", 1), "FAILED",
     "Test NCCL failure common.cu:1148 'unhandled system error'"),
])
def test_fabric_job_output_failures_are_named(text: str, state: str, problem: str) -> None:
    assert judge_text(SPEC, JOB, text, state, "12").problem == problem


def test_fabric_job_output_rail_hang_and_no_result() -> None:
    assert judge_text(SPEC, JOB, output(TABLE, 0, rail="", rail_rc=124), "COMPLETED", "1").rails[0].problem == "hang"
    assert judge_text(SPEC, JOB, output(TABLE, 0, rail="", rail_rc=1), "COMPLETED", "1").rails[0].problem == \
        "no result (exit status 1)"


def test_fabric_job_missing_program_stops_the_sweep() -> None:
    text = output("slurmstepd: error: execve(): /opt/nccl-tests/build/all_reduce_perf: No such file or directory\n"
                  "srun: error: gpu-a: task 0: Exited with exit code 2\n", 2)
    with pytest.raises(SetupProblem, match="all_reduce_perf is not installed on gpu-a,gpu-b"):
        judge_text(SPEC, JOB, text, "FAILED", "12")


LINES = "\n".join([
    "NodeName=gpu-a Arch=x86_64 Gres=gpu:8 State=IDLE Partitions=gpu Reason=(null)",
    "NodeName=gpu-b Arch=x86_64 Gres=gpu:8 State=IDLE+DRAIN Partitions=gpu Reason=bad fan [root@2026-12-01T10:00:00]",
    "NodeName=gpu-c Arch=x86_64 Gres=gpu:8 State=MIXED Partitions=gpu",
    "NodeName=gpu-d Arch=x86_64 Gres=gpu:8 State=IDLE Partitions=debug",
    "NodeName=cpu-e Arch=x86_64 Gres=(null) State=IDLE Partitions=gpu",
    "NodeName=gpu-f Arch=x86_64 Gres=gpu:8 State=IDLE+RESERVED+MAINT Partitions=gpu",
    "NodeName=gpu-g Arch=x86_64 Gres=gpu:8 State=IDLE Partitions=gpu,debug",
    "NodeName=gpu-h Arch=x86_64 Gres=gpu:8 State=IDLE* Partitions=gpu",
])


def test_fabric_sweep_candidates_are_plainly_idle_gpu_nodes_of_the_partition() -> None:
    assert candidates(parse_show_nodes(LINES), None, None, None)[0] == ["gpu-a", "gpu-d", "gpu-g"]
    chosen, why = candidates(parse_show_nodes(LINES), [f"gpu-{c}" for c in "abcdfghz"] + ["cpu-e"], "gpu", None)
    assert chosen == ["gpu-a", "gpu-g"]
    assert why == {"gpu-b": "not idle (IDLE+DRAIN)", "gpu-c": "not idle (MIXED)", "gpu-d": "not in partition gpu",
                   "gpu-f": "not idle (IDLE+RESERVED+MAINT)", "gpu-h": "not idle (IDLE*)",
                   "gpu-z": "not a node scontrol knows", "cpu-e": "no GPUs"}
    assert candidates(parse_show_nodes(LINES), None, None, ["gpu-f", "gpu-a"])[0] == ["gpu-a", "gpu-f"]


def test_fabric_sweep_records_history_and_metrics() -> None:
    bad = NodeOutcome("gpu-c", "bad", 41.2, ("gpu-a", "gpu-b"), "busbw=41.2<100")
    results = (JobResult(Job(("gpu-c", "gpu-d"), "pair", 1), 41.2), JobResult(Job(("gpu-a", "gpu-b"), "pair", 1), 380.0))
    outcome = SweepOutcome((bad, NodeOutcome("gpu-a", "pass")), 3, 8, 380.0, results)
    reason = "gpu-healthcheck: fabric busbw=41.2<100 ..."
    report = SweepReport("S1", outcome, {"gpu-c": SweepAction(reason, drain=NodeAction(
        "drain", reason, outcome=Outcome.APPLIED))}, {})
    record = history_record(report, [], 0.0)
    assert record["mode"] == "fabric-sweep" and record["verdict"] == "fail" and record["action"]["taken"] == "drain"
    assert record["findings"][0]["node"] == "gpu-c"
    prom = metrics_text(report, 1.0)
    assert 'gpu_healthcheck_fabric_busbw_gbps{node="gpu-d",partner="gpu-c"} 41.2' in prom
    assert 'gpu_healthcheck_fabric_sweep_nodes{outcome="bad"} 1' in prom and "gpu_healthcheck_fabric_sweep_rounds 3" in prom
    # one series per judged node, for the mixin's node-health join (node = hostname)
    per_node = [line for line in prom.splitlines() if line.startswith("gpu_healthcheck_fabric_sweep_node_outcome{")]
    assert per_node == ['gpu_healthcheck_fabric_sweep_node_outcome{node="gpu-a",outcome="pass"} 1',
                        'gpu_healthcheck_fabric_sweep_node_outcome{node="gpu-c",outcome="bad"} 1']


# A pair passes only when its output proves it spanned both nodes (issue 36, case 6), on real
# outputs (tests/fixtures/fabric/SOURCES.md): superbench's single-node 8xA100 run is what each
# task prints when nccl-tests has no MPI (or srun no --mpi=pmix); CSCS's 2.17.1 run spans two.
FABRIC = Path(__file__).resolve().parents[1] / "fixtures" / "fabric"
SINGLE_NODE = (FABRIC / "superbench__nccl_allreduce__8xA100-SXM4-40GB.log").read_text()
TWO_NODES = (FABRIC / "cscs-docs__nccl-md__srun-pmix-2x4-GH200-ompi__2.17.1.txt").read_text()


def each_task_alone(*hosts: str) -> str:
    """Each node's task as its own single-node job: its own header, rank 0 up, its own host."""
    return "".join(SINGLE_NODE.replace("localhost", host) for host in hosts)


def test_fabric_job_two_single_node_runs_at_235_gbps_are_a_setup_problem_never_a_pass() -> None:
    text = output(each_task_alone("gpu-a", "gpu-b"), 0)
    with pytest.raises(NotSpanned, match="did not span gpu-a,gpu-b: its ranks were numbered anew on each host") as err:
        judge_text(SPEC, JOB, text, "COMPLETED", "12")
    assert "build nccl-tests with MPI" in str(err.value) and "srun --mpi=pmix" in str(err.value)
    assert isinstance(err.value, SetupProblem)  # the sweep stops: nothing drained, exit 3


def test_fabric_job_g1_single_rank_runs_reading_zero_are_a_setup_problem() -> None:
    one = ("# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20\n"
           "# Using devices\n#  Rank  0 Group  0 Pid  1887 on {host} device  0 [0x18] NVIDIA H100 80GB HBM3\n#\n"
           "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
           "  1073741824     268435456     float     sum      -1    120.1  8940.2    0.00      0    118.3  9076.4    0.00      0\n"
           "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0 \n#\n")
    text = output(one.format(host="gpu-a") + one.format(host="gpu-b"), 0)
    with pytest.raises(NotSpanned, match="2 rank lines for 1 ranks"):
        judge_text(SPEC, JOB, text, "COMPLETED", "12")


def test_fabric_job_ranks_on_one_node_only_name_it() -> None:
    text = output(SINGLE_NODE.replace("localhost", "gpu-a"), 0)
    with pytest.raises(NotSpanned, match="ranks on gpu-a only"):
        judge_text(SPEC, JOB, text, "COMPLETED", "12")


def test_fabric_job_the_real_two_node_run_passes_and_a_hang_before_the_header_stays_a_hang() -> None:
    result = judge_text(SPEC, Job(("nid005471", "nid005487"), "pair", 1), output(TWO_NODES, 0), "COMPLETED", "7")
    assert (result.busbw_gbps, result.problem) == (123.11, None)
    # no rank lines at all: unproven, unless the run failed on its own (then the failure counts)
    with pytest.raises(NotSpanned, match="printed no rank lines"):
        judge_text(SPEC, JOB, output(TABLE.replace(RANKS, ""), 0), "COMPLETED", "12")
    assert judge_text(SPEC, JOB, output("# Using devices\n", 124), "COMPLETED", "12").problem == \
        "hang: ended by its time limit"
