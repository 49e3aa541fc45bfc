"""The fabric fakes (tests/fakegpu/fabric.py as build/all_reduce_perf, all_gather_perf and
ib_write_bw) print what the real programs print: our parsers read their output as they read the
real outputs of tests/fixtures/fabric, and each scenario key changes what it should."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from pathlib import Path

import pytest

from healthcheck.read.nccltests import parse_nccl_tests
from healthcheck.read.perftest import parse_ib_write_bw

FAKE = Path(__file__).resolve().parents[1] / "fakegpu" / "build"


def run(tool: str, scenario: Path, nodes: str, *args: str, rank: int = 0, timeout: float = 30):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(FAKEGPU_FABRIC=str(scenario), SLURM_STEP_NODELIST=nodes, SLURM_PROCID=str(rank),
               SLURM_NTASKS="4")
    return subprocess.run([str(FAKE / tool), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def scenario(tmp_path: Path, fakegpu: Path) -> Path:
    path = tmp_path / "fabric"
    path.write_text("node.gpu-c.busbw_gbps = 41.2\npair.gpu-a,gpu-b.fail_once = 1\n"
                    "pair.gpu-d,gpu-e.busbw_gbps = 90\nnode.gpu-f.nccl.error = NET/IB : Got completion with error 12\n"
                    "node.gpu-g.wrong = 3\nnode.gpu-e.rail.mlx5_1.gbps = 150\n")
    return path


@pytest.mark.parametrize("tool", ["all_reduce_perf", "all_gather_perf"])
def test_fakegpu_fabric_collective_prints_nccl_tests_output(scenario: Path, tool: str) -> None:
    done = run(tool, scenario, "gpu-a,gpu-h", "-b", "512M", "-e", "2G", "-f", "2", "-g", "1")
    assert done.returncode == 0, done.stderr
    parsed = parse_nccl_tests(done.stdout)
    assert parsed.complete and parsed.busbw_gbps == 380.0 and parsed.wrong == 0
    assert [r.size_bytes for r in parsed.rows] == [512 << 20, 1 << 30, 2 << 30]
    assert parsed.hosts == ("gpu-a", "gpu-h") and parsed.ranks == 4
    assert parsed.rows[0].redop == ("none" if tool == "all_gather_perf" else "sum")


def test_fakegpu_fabric_slow_node_and_pair(scenario: Path) -> None:
    assert parse_nccl_tests(run("all_reduce_perf", scenario, "gpu-c,gpu-a").stdout).busbw_gbps == 41.2
    assert parse_nccl_tests(run("all_reduce_perf", scenario, "gpu-e,gpu-d").stdout).busbw_gbps == 90.0
    assert parse_nccl_tests(run("all_reduce_perf", scenario, "gpu-d,gpu-h").stdout).busbw_gbps == 380.0


def test_fakegpu_fabric_fail_once_fails_the_first_run_only(scenario: Path) -> None:
    first = run("all_reduce_perf", scenario, "gpu-b,gpu-a")
    assert first.returncode == 1 and parse_nccl_tests(first.stdout).wrong == 1
    again = run("all_reduce_perf", scenario, "gpu-a,gpu-b")
    assert again.returncode == 0 and parse_nccl_tests(again.stdout).wrong == 0
    assert (scenario.parent / "fabric.state").read_text() == "gpu-a,gpu-b\n"


def test_fakegpu_fabric_error_and_wrong(scenario: Path) -> None:
    error = run("all_reduce_perf", scenario, "gpu-f,gpu-a")
    parsed = parse_nccl_tests(error.stdout)
    assert error.returncode == 1 and parsed.warnings == ("NET/IB : Got completion with error 12",)
    assert parsed.errors and not parsed.complete
    wrong = run("all_reduce_perf", scenario, "gpu-g,gpu-a")
    assert wrong.returncode == 1 and parse_nccl_tests(wrong.stdout).oob_failed


def test_fakegpu_fabric_hang_never_finishes(tmp_path: Path, fakegpu: Path) -> None:
    """It prints its header, then hangs: still running after it, for as long as we look (the
    header waited for with a deadline, not a fixed time: a loaded host starts Python slowly)."""
    path = tmp_path / "fabric"
    path.write_text("node.gpu-b.nccl.hang = 1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(FAKEGPU_FABRIC=str(path), SLURM_STEP_NODELIST="gpu-a,gpu-b", SLURM_PROCID="0", SLURM_NTASKS="4")
    proc = subprocess.Popen([str(FAKE / "all_reduce_perf")], env=env, stdout=subprocess.PIPE)
    try:
        out = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + 120
            while b"# Using devices" not in out and time.monotonic() < deadline:
                if sel.select(timeout=deadline - time.monotonic()):
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    assert chunk, out.decode()  # it ended instead of hanging
                    out += chunk
        assert b"# Using devices" in out, out.decode()
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
    finally:
        proc.kill()
        proc.wait()


def test_fakegpu_fabric_other_ranks_print_nothing(scenario: Path) -> None:
    assert run("all_reduce_perf", scenario, "gpu-a,gpu-h", rank=3).stdout == ""
    assert run("ib_write_bw", scenario, "gpu-d,gpu-e", "-d", "mlx5_1", rank=1).stdout == ""


@pytest.mark.parametrize("gbits", [True, False])
def test_fakegpu_fabric_ib_write_bw_per_rail(scenario: Path, gbits: bool) -> None:
    args = ["-d", "mlx5_1", "--use_cuda=0", "-s", "1048576"] + (["--report_gbits"] if gbits else []) + ["gpu-e"]
    parsed = parse_ib_write_bw(run("ib_write_bw", scenario, "gpu-d,gpu-e", *args).stdout)
    assert parsed.device == "mlx5_1" and parsed.unit == ("Gb" if gbits else "MB")
    assert parsed.avg_gbps == pytest.approx(150.0, abs=0.01)
    assert parse_ib_write_bw(run("ib_write_bw", scenario, "gpu-d,gpu-e", "-d", "mlx5_0", "--report_gbits").stdout).avg_gbps == 392.0


def test_fakegpu_fabric_malformed_scenario_is_an_error(tmp_path: Path, fakegpu: Path) -> None:
    path = tmp_path / "fabric"
    path.write_text("node.gpu-a.busbw = 3\n")
    done = run("all_reduce_perf", path, "gpu-a,gpu-b")
    assert done.returncode == 2 and "not a fabric key" in done.stderr and done.stdout == ""


def test_fakegpu_fabric_no_mpi_runs_each_task_alone_and_the_pair_is_a_setup_problem(tmp_path: Path, fakegpu: Path) -> None:
    from healthcheck.decide.internodejob import JobSpec, NotSpanned, judge_job_output
    from healthcheck.read.internodejob import read_job_output
    from healthcheck.decide.sweep import Job

    spec = JobSpec("all_reduce_perf", ("-b", "1G", "-e", "1G", "-g", "1"), (), 1, 60.0)
    job = Job(("gpu-a", "gpu-b"), "pair", 1)
    path = tmp_path / "fabric"
    path.write_text("default.nccl.no_mpi = 1\n")

    def task(rank: int, node: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env.update(FAKEGPU_FABRIC=str(path), SLURM_STEP_NODELIST="gpu-a,gpu-b", SLURM_PROCID=str(rank),
                   SLURM_STEP_NUM_TASKS="2", SLURMD_NODENAME=node)
        done = subprocess.run([str(FAKE / "all_reduce_perf"), *spec.collective_args], env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    both = task(0, "gpu-a") + task(1, "gpu-b")
    assert parse_nccl_tests(both).busbw_gbps == 0.0 and parse_nccl_tests(both).rank_lines == 2
    text = f"== gpu-healthcheck collective begin\n{both}== gpu-healthcheck collective rc=0\n== gpu-healthcheck end\n"
    with pytest.raises(NotSpanned, match="each task ran as its own single-node job"):
        judge_job_output(spec, job, read_job_output(text), "COMPLETED", "5")
    # the same pair with MPI: rank 0 prints both nodes' ranks, and it passes
    path.write_text("")
    mpi = task(0, "gpu-a")
    text = f"== gpu-healthcheck collective begin\n{mpi}== gpu-healthcheck collective rc=0\n== gpu-healthcheck end\n"
    assert judge_job_output(spec, job, read_job_output(text), "COMPLETED", "5").problem is None
