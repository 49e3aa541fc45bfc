"""Properties of the fabric parsers (read/nccltests.py, read/perftest.py) on generated text:
any text parses without an exception into sane figures; a table written in nccl-tests' or
perftest's own format (every layout, any launcher prefix) reads back exactly; a run cut at any
line is never complete; lines built to make a regex backtrack return.  The real outputs are in
tests/readers/test_fabric_outputs.py."""

from __future__ import annotations

import math
import signal

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.read.nccltests import MAX_KEPT, parse_nccl_tests, parse_row
from healthcheck.read.perftest import MB_TO_GBPS, parse_ib_write_bw

HANG_S = 20


@pytest.fixture
def no_hang():
    def hung(signum, frame):
        raise AssertionError(f"still running after {HANG_S} s: a hang (regex backtracking?)")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_nccl_tests_any_text_parses_to_sane_figures(text: str) -> None:
    run = parse_nccl_tests(text)
    for row in run.rows:
        assert row.size_bytes >= 0 and math.isfinite(row.busbw_gbps) and row.busbw_gbps >= 0
    assert run.busbw_gbps is None or run.busbw_gbps >= 0
    assert run.wrong >= 0 and len(run.warnings) <= MAX_KEPT and len(run.errors) <= MAX_KEPT


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_ib_write_bw_any_text_parses_to_sane_figures(text: str) -> None:
    run = parse_ib_write_bw(text)
    assert run.avg_gbps is None or (math.isfinite(run.avg_gbps) and run.avg_gbps >= 0)


figures = st.floats(min_value=0, max_value=9999, allow_nan=False).map(lambda f: round(f, 2))
rows = st.lists(st.tuples(st.integers(0, 1 << 34), figures, figures, st.integers(0, 10 ** 6),
                          st.integers(0, 10 ** 6)), min_size=1, max_size=12)
prefixes = st.sampled_from(["", "[1,0]<stdout>:", "        [1,0]<stdout>:", "0: ", "12: "])
layouts = st.sampled_from(["new", "new_gather", "old", "old_gather"])


def nccl_line(layout: str, size: int, out: float, inp: float, wrong_out: int, wrong_in: int) -> str:
    """One row as src/common.cu prints it (%12zi %12zi %8s %6s %6i %8s %7s %7s %6s ...)."""
    middle = {"new": "     sum      -1", "new_gather": "    none      -1", "old": "     sum",
              "old_gather": ""}[layout]
    wo, wi = (str(wrong_out), str(wrong_in)) if layout.startswith("new") else ("N/A", "N/A")
    return (f"{size:12d} {size // 4:12d}     float{middle}  {12.5:7.2f} {1.0:7.2f} {out:7.2f} {wo:>6}"
            f"  {12.5:7.2f} {1.0:7.2f} {inp:7.2f} {wi:>6}")


@settings(max_examples=200, deadline=None)
@given(rows, prefixes, layouts, st.floats(0, 500, allow_nan=False).map(lambda f: round(f, 4)))
def test_nccl_tests_table_in_its_own_format_reads_back(table, prefix, layout, avg) -> None:
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20",
             "#  Rank  0 Group  0 Pid   1887 on   worker-1 device  0 [0x8d] NVIDIA H100 80GB HBM3",
             "#       size         count      type   redop    root     time   algbw   busbw #wrong"]
    lines += [nccl_line(layout, *row) for row in table]
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg} "]
    run = parse_nccl_tests("\n".join(prefix + line for line in lines) + "\n")
    assert [(r.size_bytes, r.busbw_out_gbps, r.busbw_in_gbps) for r in run.rows] == [t[:3] for t in table]
    largest = max(t[0] for t in table)
    assert run.busbw_gbps == max(max(t[1], t[2]) for t in table if t[0] == largest)
    assert run.avg_busbw_gbps == avg and run.complete and run.hosts == ("worker-1",)
    expected = sum(t[3] + t[4] for t in table) if layout.startswith("new") else 0
    assert run.wrong == expected
    for cut in range(len(lines) - 1):  # cut before the summary: never complete
        assert not parse_nccl_tests("\n".join(lines[:cut])).complete


def test_nccl_tests_out_of_bounds_failed_counts_as_wrong() -> None:
    run = parse_nccl_tests("# Out of bounds values : 248 FAILED\n# Avg bus bandwidth    : 1.5\n")
    assert run.oob_failed and run.out_of_bounds == 248 and run.wrong == 248


@pytest.mark.parametrize("line", [
    "     8     2     float     sum      -1    12.90    0.00",  # cut off
    "     8     2     words     sum      -1    12.90    0.00    0.00      0    12.87    0.00    0.00      0",
    "     8     2     float     sum      -1    12.90    0.00    nan      0    12.87    0.00    0.00      0",
    "     8     2     float     sum      -1    12.90    0.00   -1.00      0    12.87    0.00    0.00      0",
    "    -8     2     float     sum      -1    12.90    0.00    1.00      0    12.87    0.00    0.00      0",
    "     8     2     float     sum      xx    12.90    0.00    1.00      0    12.87    0.00    0.00      0",
])
def test_nccl_tests_row_that_is_not_whole_is_no_row(line: str) -> None:
    assert parse_row(line) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1 << 30), st.integers(1, 10 ** 9), figures, figures),
                min_size=1, max_size=6), st.sampled_from(["Gb", "MB"]))
def test_ib_write_bw_table_in_its_own_format_reads_back(table, unit) -> None:
    lines = ["                    RDMA_Write BW Test", " Dual-port       : OFF\t\tDevice         : mlx5_3",
             "-" * 87, f" #bytes     #iterations    BW peak[{unit}/sec]    BW average[{unit}/sec]   MsgRate[Mpps]"]
    lines += ["Conflicting CPU frequency values detected: 3295.212000 != 5003.410000. CPU Frequency is not max."]
    lines += [f" {b:<10d} {i:<10d}       {p:.2f}            {a:.2f}\t\t   0.003007" for b, i, p, a in table]
    lines += ["-" * 87]
    run = parse_ib_write_bw("\n".join(lines))
    factor = 1.0 if unit == "Gb" else MB_TO_GBPS
    assert [(r.size_bytes, r.avg_gbps) for r in run.rows] == [(b, a * factor) for b, _, _, a in table]
    assert run.device == "mlx5_3" and run.unit == unit
    assert parse_ib_write_bw("\n".join(lines[:4])).avg_gbps is None  # cut before any result


@pytest.mark.parametrize("text", [
    ("x NCCL WARN a" + " " * 60000 + "b\n") * 4,  # a lazy (.*?)\s*$ took ~10 s a line
    ("Test NCCL failure" + " " * 60000 + "x\n") * 4,
    "# Avg bus bandwidth" + " " * 60000 + ":",
    "#  Rank  0 Group" + "  0 Group" * 6000,
    " #bytes" + " " * 60000 + "#iterations",
    "Device" + " " * 60000 + ":",
    "[1,0]<stdout>:" * 4000,
])
def test_fabric_parsers_return_on_backtracking_bait(text: str, no_hang) -> None:
    parse_nccl_tests(text)
    parse_ib_write_bw(text)


def test_nccl_tests_summary_without_hash_of_older_versions() -> None:
    """nccl-tests before 2.10 printed " Out of bounds values : %d %s" and " Avg bus bandwidth
    : %g" without the leading "#" (its src/common.cu PRINT calls)."""
    run = parse_nccl_tests("  Rank  0 Pid   1320 on ip-172-31-20-228 device  0 [0x00] Tesla V100\n"
                           " Out of bounds values : 2 FAILED\n Avg bus bandwidth    : 11.25 \n")
    assert run.oob_failed and run.wrong == 2 and run.avg_busbw_gbps == 11.25
    assert run.hosts == ("ip-172-31-20-228",)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**15), st.integers(0, 10**15), st.sampled_from(["new", "new_gather"]))
def test_nccl_tests_wrong_in_percent_g_form_reads_back_as_its_count(wrong_out, wrong_in, layout) -> None:
    """nccl-tests prints a large #wrong with %g ("1.04858e+06"): counted, to %g's precision."""
    line = nccl_line(layout, 1 << 20, 11.17, 9.77, 0, 0)
    cells = line.split()
    cells[-5], cells[-1] = f"{wrong_out:g}", f"{wrong_in:g}"
    row = parse_row("  ".join(cells))
    assert row is not None
    assert (row.wrong_out, row.wrong_in) == (round(float(f"{wrong_out:g}")), round(float(f"{wrong_in:g}")))
    assert (row.wrong_out > 0) is (wrong_out > 0) and (row.wrong_in > 0) is (wrong_in > 0)
