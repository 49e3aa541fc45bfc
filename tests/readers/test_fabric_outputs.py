"""The fabric parsers on real outputs (tests/fixtures/fabric, SOURCES.md there): nccl-tests'
tables in both layouts, with launcher prefixes, NCCL WARN and failure lines, runs cut off
with no table; perftest's ib_write_bw in its MB/sec and Gb/sec forms.  Each file's expected
record is written out by hand from the file itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthcheck.read.nccltests import parse_nccl_tests
from healthcheck.read.perftest import parse_ib_write_bw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fabric"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


# file -> (rows, busbw at the largest size, avg busbw, out of bounds, warnings, errors, hosts, complete)
NCCL = {
    "superbench__nccl_allreduce__8xA100-SXM4-40GB.log": (34, 235.26, 68.4048, 0, 0, 0, ("localhost",), True),
    "superbench__nccl_allgather__8xA100-SXM4-40GB.log": (34, 230.07, 58.2651, 0, 0, 0, ("localhost",), True),
    "issue-aws-k8s-tester-pr503__mpirun-rank-prefix__fragment.txt": (3, 0.0, 92.3405, 0, 0, 0, (), True),
    "issue-nccl-1706__table-tail-destroy-lines.txt": (1, 25.88, 8.62002, 0, 0, 0, (), True),
    "issue-nccl-tests-150__srun-pmix-2-nodes__fragment.txt": (4, 0.0, None, None, 0, 0, (), False),
    "issue-npkit-19__error-column-floats__fragment.txt": (3, 0.0, None, None, 0, 0, ("gpu9",), False),
    "issue-nccl-473__test-nccl-failure-no-table.txt": (0, None, None, None, 0, 1, ("fastmoe",), False),
    "issue-nccl-tests-131__ncclwarn-p2p-disabled-cut-before-table__fragment.txt": (0, None, None, None, 2, 0, ("Meowth",), False),
    "issue-nccl-tests-15__ncclwarn-connection-closed-by-peer.txt": (0, None, None, None, 1, 1, (), False),
    "issue-nccl-tests-166__shm-warn-test-failure__fragment.txt": (0, None, None, None, 1, 2, (), False),
}


@pytest.mark.parametrize("name", sorted(NCCL))
def test_nccl_tests_parser_reads_each_real_output(name: str) -> None:
    rows, busbw, avg, oob, warns, errors, hosts, complete = NCCL[name]
    run = parse_nccl_tests(text(name))
    assert len(run.rows) == rows
    assert run.busbw_gbps == busbw
    assert run.avg_busbw_gbps == avg
    assert run.out_of_bounds == oob and not run.oob_failed
    assert (len(run.warnings), len(run.errors)) == (warns, errors), (run.warnings, run.errors)
    assert run.hosts == hosts
    assert run.complete is complete
    assert run.wrong == 0


def test_nccl_tests_names_the_failure_and_the_warning() -> None:
    run = parse_nccl_tests(text("issue-nccl-tests-15__ncclwarn-connection-closed-by-peer.txt"))
    assert run.warnings == ("Net : Connection closed by remote peer",)
    assert run.errors == ("NCCL failure common.cu:921 'unhandled system error'",)
    run = parse_nccl_tests(text("issue-nccl-473__test-nccl-failure-no-table.txt"))
    assert run.errors == ("Test NCCL failure common.cu:777 'unhandled system error'",) and run.ranks == 4


def test_nccl_tests_rows_keep_both_layouts_columns() -> None:
    new = parse_nccl_tests(text("issue-nccl-tests-150__srun-pmix-2-nodes__fragment.txt")).rows
    assert [r.size_bytes for r in new] == [8, 16, 32, 64]  # the cut fifth row is not a row
    assert new[0].redop == "sum" and new[0].wrong_out == 0 and new[0].time_out_us == 19.90
    old = parse_nccl_tests(text("superbench__nccl_allgather__8xA100-SXM4-40GB.log")).rows
    assert old[-1].redop is None and old[-1].wrong_out is None  # no redop column; error N/A
    assert (old[-1].busbw_out_gbps, old[-1].busbw_in_gbps) == (223.39, 230.07)
    floats = parse_nccl_tests(text("issue-npkit-19__error-column-floats__fragment.txt")).rows
    assert [r.wrong_out for r in floats] == [None, None, None]  # 1e-07 is an error, not a count


def test_nccl_tests_strips_open_mpi_tag_output_prefix() -> None:
    run = parse_nccl_tests(text("issue-aws-k8s-tester-pr503__mpirun-rank-prefix__fragment.txt"))
    assert [r.size_bytes for r in run.rows] == [8, 16, 32]
    assert run.rows[2].time_out_us == 22.25


# file -> (results, average Gb/s of the largest size, unit, device)
PERFTEST = {
    "superbench__ib_write_bw_loopback_8M__MB-per-sec.log": (2, 24056.72 * 1048576 / 125e6, "MB", "ib0"),
    "issue-perftest-273__ib_write_bw-post-list__Gb-per-sec.txt": (1, 0.48, "Gb", "ib0"),
    "issue-perftest-234__ib_write_bw-roce-row-cut__fragment.txt": (0, None, "MB", "mlx5_0"),
}


@pytest.mark.parametrize("name", sorted(PERFTEST))
def test_ib_write_bw_parser_reads_each_real_output(name: str) -> None:
    results, avg, unit, device = PERFTEST[name]
    run = parse_ib_write_bw(text(name))
    assert len(run.rows) == results
    assert run.avg_gbps == pytest.approx(avg) if avg is not None else run.avg_gbps is None
    assert (run.unit, run.device) == (unit, device)
    assert not run.errors


def test_ib_write_bw_megabytes_are_mebibytes() -> None:
    """perftest's MB/sec is MiB/s (format_factor 0x100000): 24056.72 MB/s is 201.8 Gb/s, not 192.5."""
    run = parse_ib_write_bw(text("superbench__ib_write_bw_loopback_8M__MB-per-sec.log"))
    assert round(run.avg_gbps, 1) == 201.8 and run.rows[0].size_bytes == 8388608
    assert run.link_type == "IB"


# nccl-tests 2.17 after a failed validation (issue 36, case 10): the real 2.17.1 run of CSCS
# with wrong elements in its 1 MiB row, and the line 2.17 prints after every failed validation
CSCS_217 = "cscs-docs__nccl-md__srun-pmix-2x4-GH200-ompi__2.17.1.txt"
ROW_1MIB = ("         1048576        262144     float     sum      -1    164.3    6.38   11.17      0"
            "    187.7    5.59    9.77      0")


def with_wrong(out: str, inp: str) -> str:
    real = text(CSCS_217)
    assert ROW_1MIB in real
    row = ROW_1MIB[:-len("      0    187.7    5.59    9.77      0")] + f" {out:>6}    187.7    5.59    9.77 {inp:>6}"
    return real.replace(ROW_1MIB, row) + "    .. nid005471 pid 204199: Test failure common.cu:1189\n"


def test_nccl_tests_217_real_wrong_leads_the_reason_not_the_test_failure_line() -> None:
    from healthcheck.decide.sweep import judge_collective, reason_token

    run = parse_nccl_tests(with_wrong("96", "32"))
    assert run.wrong == 128 and run.errors == ("Test failure common.cu:1189",)
    busbw, why = judge_collective(run, 1, False)
    assert why is not None and why.startswith("wrong=128")
    assert reason_token(why) == "wrong=128"


def test_nccl_tests_wrong_in_percent_g_form_is_counted() -> None:
    run = parse_nccl_tests(with_wrong("1.04858e+06", "0"))
    assert run.wrong == 1048580
    # the older layout's error column is a float error, never a count
    run = parse_nccl_tests(text("issue-npkit-19__error-column-floats__fragment.txt"))
    assert run.wrong == 0


def test_nccl_tests_the_real_217_two_node_run_is_healthy() -> None:
    from healthcheck.decide.sweep import judge_collective

    run = parse_nccl_tests(text(CSCS_217))
    assert judge_collective(run, 0, False) == (123.11, None)
    assert run.hosts == ("nid005471", "nid005487") and run.ranks == 8
