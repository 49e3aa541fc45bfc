"""The DCGM bridge on dcgmi's text forms: the real `dcgmi diag` tables of DCGM 2.4.6, 3.0.4,
3.3.8 and 4.2.3 and a real `dcgmi nvlink --link-status` (tests/fixtures/dcgm/, SOURCES.md),
tables rendered in DCGM's own layout (dcgmi/Diag.cpp: 25- and 46-wide cells, messages wrapped
every 45 characters), and properties: a round trip of any results through that layout, and
any cut or garbled table is unknown, never a drain."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import List, Optional, Tuple

from hypothesis import given, settings, strategies as st

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config, DcgmConfig
from healthcheck.deepmodel import DcgmRead, DcgmResult
from healthcheck.model import GpuSnapshot, Mode, NodeSnapshot
from healthcheck.read.dcgm import parse_diag, read_dcgm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
BORDER = "+---------------------------+------------------------------------------------+"
HEADER = [BORDER, "| Diagnostic                | Result                                         |",
          "+===========================+================================================+"]


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def dcgm_findings(results, error=None):
    node = NodeSnapshot(host="h", gpus=tuple(GpuSnapshot(i, uuid=f"GPU-{i}") for i in range(8)),
                        dcgm=DcgmRead(diag=results, diag_error=error, diag_ran=True))
    findings, crashes = run_checks(node, CheckContext(Config(), Mode.NODE, level="deep"))
    assert not crashes
    return [f for f in findings if f.check.startswith("dcgm.")]


def row(name: str, info: str) -> str:
    """One row as CommandOutputController fills DIAG_DATA: a value past its cell is cut to end in '...'."""
    if len(info) > 46:
        info = info[:43] + "..."
    return f"| {name:<25.25} | {info:<46} |"


def message(name: str, text: str) -> List[str]:
    """DisplayVerboseInfo: the name on the first row, 45 characters a row."""
    return [row(name if pos == 0 else "", text[pos:pos + 45]) for pos in range(0, len(text), 45)]


def table(*rows: str) -> str:
    return "Successfully ran diagnostic for group.\n" + "\n".join([*HEADER, *rows, BORDER]) + "\n"


def unknown_only(found, *words: str) -> None:
    assert [(f.check, f.severity.value) for f in found] == [("dcgm.diag", "unknown")], found
    assert not any(f.drains for f in found)
    for word in words:
        assert word in found[0].message, found[0].message


# --- the real fixtures: what each implies -------------------------------------------------

def test_dcgm_text_3_0_4_r3_fragment_shows_nine_deployment_passes_and_is_unknown():
    # DCGM-55: `dcgmi diag -r 3`, 3.0.4 layout (no Metadata), cut after the Integration heading
    results, error = parse_diag(fixture("issue-DCGM-55__dcgmi-diag-r3-3.0.4__fragment.txt"))
    assert [(r.gpu, r.test, r.status) for r in results] == [(None, t, "pass") for t in (
        "Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
        "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
        "Graphics Processes", "Inforom")]
    assert error == ("dcgmi diag text output cut short: the table ends after the Integration "
                     "heading without its closing border; 9 results shown, none failed")
    unknown_only(dcgm_findings(results, error), "DCGM diagnostic not judged", "cut short")


def test_dcgm_text_3_0_4_whole_table_of_passes_is_no_finding():
    text = fixture("issue-DCGM-55__dcgmi-diag-r3-3.0.4__fragment.txt").rstrip("\n")
    whole = text.rsplit("\n", 1)[0] + "\n" + BORDER + "\n"  # the table as dcgmi ends it
    results, error = parse_diag(whole)
    assert error is None and len(results) == 9 and {r.status for r in results} == {"pass"}
    assert dcgm_findings(results, error) == []


def test_dcgm_text_3_3_8_r3_8xh100_fragment_keeps_the_info_and_is_unknown():
    # nccl-tests#264: `dcgmi diag --run 3 --fail-early`, 3.3.8, cut inside an Info message
    results, error = parse_diag(fixture("issue-nccl-tests-264__dcgmi-diag-r3-8xH100__fragment.txt"))
    assert [(r.gpu, r.test, r.status) for r in results] == [(None, t, "pass") for t in (
        "Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode")]
    # the Info rows joined as DCGM wrapped them, mid-word, with nothing lost or added
    assert results[-1].text.startswith('Persistence mode for GPU 0 is disabled. Enable persistence '
                                       'mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.,'
                                       'Persistence mode for GPU 1 is disabled.')
    assert error and "ends after test 'Persistence Mode'" in error
    unknown_only(dcgm_findings(results, error), "none failed")


def test_dcgm_text_4_2_3_per_gpu_fragment_names_each_gpu_and_is_unknown():
    # DCGM-253: 4.2.3 per-GPU layout on 4 L40S, cut at the Hardware heading
    results, error = parse_diag(fixture("issue-DCGM-253__dcgmi-diag-4.2.3-per-gpu-format__fragment.txt"))
    assert [(r.gpu, r.test, r.status) for r in results] == [(g, "software", "pass") for g in range(4)]
    assert error and "ends after the Hardware heading" in error
    unknown_only(dcgm_findings(results, error), "4 results shown, none failed")


def test_dcgm_text_2_4_6_pcie_fail_all_fragment_is_unknown_naming_dcgms_fail():
    # DCGM-49: 2.4.6 r2 on an A100, "PCIe | Fail - All" with NvLink-down warnings, elided by "..."
    results, error = parse_diag(fixture("issue-DCGM-49__dcgmi-diag-r2-pcie-nvlink-down-warnings__fragment.txt"))
    assert [(r.gpu, r.test, r.status) for r in results] == [(None, "PCIe", "fail")]
    assert results[0].text.startswith("all GPUs: GPU 0GPU 0's NvLink link 0 is currently down Run a "
                                      "field diagnostic on the GPU., GPU 0GPU 0's NvLink link 1 is")
    assert "NvLink link 4 is currently down Run a field diagnostic on the GPU.," in results[0].text
    assert error.startswith("dcgmi diag text output cut short: a line that is no table row ('...') after "
                            "test 'PCIe'; it showed PCIe fail (all GPUs): all GPUs: GPU 0GPU 0's NvLink "
                            "link 0 is currently down")
    unknown_only(dcgm_findings(results, error), "PCIe fail (all GPUs)")


def test_dcgm_text_2_4_6_pcie_fail_all_in_a_whole_table_fails_the_node_with_reset():
    lines = fixture("issue-DCGM-49__dcgmi-diag-r2-pcie-nvlink-down-warnings__fragment.txt").splitlines()
    results, error = parse_diag("\n".join(HEADER + lines[:-1] + [BORDER]))
    assert error is None and [(r.gpu, r.test, r.status) for r in results] == [(None, "PCIe", "fail")]
    [f] = dcgm_findings(results, error)
    assert (f.check, f.severity.value, f.action.value, f.gpu) == ("dcgm.diag", "fail", "reset", None)
    assert f.message.startswith("node: DCGM diagnostic PCIe: fail: all GPUs: GPU 0GPU 0's NvLink link 0")


def test_dcgm_text_nvlink_link_status_is_no_diag_output_and_is_unknown():
    # DCGM-198: `dcgmi nvlink --link-status` (2 H100 NVL, 18 links Down each) where a diag was
    # asked for is not a diag: unknown.  The bridge does not run --link-status: NVML gives the
    # same link states on every level (nvlink.down; tests/cli/test_dcgm_link_status.py)
    results, error = parse_diag(fixture("issue-DCGM-198__dcgmi-nvlink-link-status-all-down__2xH100-NVL.txt"))
    assert results == () and error == "dcgmi diag output holds neither JSON nor a diagnostic table"
    unknown_only(dcgm_findings(results, error))


def test_dcgm_text_read_through_a_fake_dcgmi_that_prints_the_table(tmp_path):
    text = table(row("Memory", "Pass - All"), row("PCIe", "Pass - GPUs: 0, 1, 3"), row("", "Fail - GPU: 2"),
                 *message("Warning", "GPU 2: PCIe bandwidth 3.1 GB/s below 10 GB/s"))
    (tmp_path / "diag.txt").write_text(text)
    dcgmi = tmp_path / "dcgmi"
    dcgmi.write_text(f'#!/bin/sh\ncase "$1" in diag) cat "{tmp_path}/diag.txt"; exit 226;; '
                     f'health) cat "{FIX / "virtualclient__DCGMIHealthCheckResults.json"}";; esac\n')
    dcgmi.chmod(dcgmi.stat().st_mode | stat.S_IXUSR)
    read = read_dcgm(Config(dcgmi=str(dcgmi), dcgm=DcgmConfig(enabled="true")), diag=True)
    assert read is not None and read.diag_error is None
    node = NodeSnapshot(host="h", gpus=tuple(GpuSnapshot(i, uuid=f"GPU-{i}") for i in range(4)), dcgm=read)
    found = [f for f in run_checks(node, CheckContext(Config(), Mode.NODE, level="deep"))[0]
             if f.check.startswith("dcgm.")]
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(2, "fail", "reset")]
    assert "DCGM diagnostic PCIe: fail: GPU 2: PCIe bandwidth 3.1 GB/s below 10 GB/s" in found[0].message


# --- DCGM's layouts, rendered as Diag.cpp renders them ---------------------------------------

def test_dcgm_text_3x_mixed_result_names_the_failing_gpu_and_warn_all_keeps_the_code():
    results, error = parse_diag(table(
        "|-----  Deployment  --------+------------------------------------------------|",
        row("Denylist", "Pass"),
        "+-----  Stress  ------------+------------------------------------------------+",
        row("SM Stress", "Pass - GPUs: 1, 2, 3   "), row("", "Fail - GPU: 0   "),
        *message("Warning", "GPU 0: SM stress 12000 Gflops below 15000 expected"),
        row("Diagnostic", "Warn - All"), *message("Warning", "EUD warned"), row("", "  Code: (000000000012)")))
    assert error is None
    assert [(r.gpu, r.test, r.status) for r in results] == [
        (None, "Denylist", "pass"), (0, "SM Stress", "fail"), (1, "SM Stress", "pass"),
        (2, "SM Stress", "pass"), (3, "SM Stress", "pass"), (None, "Diagnostic", "warn")]
    assert results[-1].text == "all GPUs: EUD warned; Code: (000000000012)"
    found = dcgm_findings(results, error)
    assert [(f.gpu, f.severity.value) for f in found] == [(0, "fail"), (None, "warn")]
    assert "SM stress 12000 Gflops" in found[0].message


def test_dcgm_text_3x_gpu_list_cut_by_the_column_keeps_the_rest_as_the_node():
    gpus = ", ".join(str(i) for i in range(16))  # 16 GPUs: past the 46-wide column
    results, error = parse_diag(table(row("Memory", f"Fail - GPUs: {gpus}   ")))
    assert error is None
    shown = [r.gpu for r in results if r.gpu is not None]
    assert shown == list(range(shown[-1] + 1)) and len(shown) < 16  # the cut number is dropped
    assert results[-1] == DcgmResult(None, "Memory", "fail", "more GPUs than dcgmi's column shows")


def test_dcgm_text_4x_per_gpu_fail_and_warn_shown_as_fail_under_a_warn_test():
    results, error = parse_diag(table(
        "|-----  Metadata  ----------+------------------------------------------------|",
        row("DCGM Version", "4.2.3"),
        "+-----  Hardware  ----------+------------------------------------------------+",
        row("memory", "Fail"), row("", "GPU0: Pass"), row("", "GPU1: Fail"),
        *message("Warning: GPU1", "GPU 1: 2 double-bit ECC errors found during the memory test"),
        row("", "GPU2: "),
        row("pcie", "Warn"), row("", "GPU0: Pass"), row("", "GPU1: Fail"),  # 4.x prints warn as Fail
        *message("Warning: GPU1", "GPU 1 PCIe replay rate high"), row("", "CPU0: Pass")))
    assert error is None
    assert [(r.gpu, r.test, r.status) for r in results] == [
        (0, "memory", "pass"), (1, "memory", "fail"), (2, "memory", "skip"),
        (0, "pcie", "pass"), (1, "pcie", "warn"), (None, "pcie (CPU0)", "pass")]
    found = dcgm_findings(results, error)
    assert [(f.gpu, f.severity.value) for f in found] == [(1, "fail"), (1, "warn")]
    assert "double-bit ECC errors" in found[0].message and "replay rate high" in found[1].message


def test_dcgm_text_garbled_rows_are_unknown_never_a_drain():
    for text in (table(row("Memory", "Maybe")),                          # a result DCGM never prints
                 table(row("", "GPU0: Fail")),                            # a row before any test
                 table(row("Memory", "Fail - All")).replace(BORDER + "\n", "", 2)[:-1] + "\n\x00garbage\n",
                 "+-----  Stress  ------------+------------------------------------------------+\n"):
        results, error = parse_diag(text)
        assert error, text
        found = dcgm_findings(results, error)
        assert [f.severity.value for f in found] == ["unknown"] and not any(f.drains for f in found)


# --- properties ------------------------------------------------------------------------------

STATUSES = ("pass", "fail", "warn", "skip")
# The reader joins a message's wrapped rows and collapses runs of blanks (a wrapped row's padding is
# no part of the message), so a generated message has single blanks, as it reads back.
WORDS = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=140).map(
    lambda s: " ".join(s.split())).filter(bool)
TESTS = st.lists(st.tuples(st.sampled_from(["Memory", "PCIe", "SM Stress", "Targeted Power", "memtest"]),
                           st.lists(st.sampled_from(STATUSES), min_size=1, max_size=8),
                           st.lists(WORDS, max_size=2)),
                 min_size=1, max_size=4, unique_by=lambda t: t[0])


def render_3x(tests) -> Tuple[str, List[Tuple[Optional[int], str, str, str]]]:
    rows, want = [], []
    for name, statuses, words in tests:
        text = "; ".join(words)
        if len(set(statuses)) == 1:
            rows.append(row(name, f"{statuses[0].capitalize()} - All"))
            if statuses[0] != "pass":
                rows += [r for w in words for r in message("Warning", w)]
            want.append((None, name, statuses[0], "all GPUs" + (f": {text}" if text and statuses[0] != "pass" else "")))
            continue
        first = True
        for status in ("pass", "fail", "warn", "skip"):
            ids = [i for i, s in enumerate(statuses) if s == status]
            if ids:
                label = "GPU: " if len(ids) == 1 else "GPUs: "
                rows.append(row(name if first else "", f"{status.capitalize()} - {label}{', '.join(map(str, ids))}   "))
                first = False
        rows += [r for w in words for r in message("Warning", w)]
        want += [(i, name, s, text) for i, s in enumerate(statuses)]
    return table(*rows), want


def render_4x(tests) -> Tuple[str, List[Tuple[Optional[int], str, str, str]]]:
    rows = ["|-----  Metadata  ----------+------------------------------------------------|",
            row("DCGM Version", "4.2.3"),
            "+-----  Hardware  ----------+------------------------------------------------+"]
    want = []
    for name, statuses, words in tests:
        worst = next((s for s in ("fail", "warn") if s in statuses), "skip" if set(statuses) == {"skip"} else "pass")
        rows.append(row(name, worst.capitalize()))
        for i, status in enumerate(statuses):
            rows.append(row("", f"GPU{i}: {'Fail' if status == 'warn' else status.capitalize()}"))
            if status in ("fail", "warn"):
                rows += [r for w in words for r in message(f"Warning: GPU{i}", w)]
            # a warn printed "Fail" is read back as warn only under a test that warned
            got = "fail" if status == "warn" and worst == "fail" else status
            want.append((i, name, got, "; ".join(words) if status in ("fail", "warn") else ""))
    return table(*rows), want


@settings(max_examples=150, deadline=None)
@given(tests=TESTS, layout=st.sampled_from([render_3x, render_4x]))
def test_dcgm_text_round_trip_of_any_results_through_dcgms_layout(tests, layout):
    text, want = layout(tests)
    results, error = parse_diag(text)
    assert error is None, (error, text)
    got = sorted((r.gpu if r.gpu is not None else -1, r.test, r.status, r.text) for r in results)
    assert got == sorted((g if g is not None else -1, t, s, w) for g, t, s, w in want), text


@settings(max_examples=150, deadline=None)
@given(tests=TESTS, layout=st.sampled_from([render_3x, render_4x]), data=st.data())
def test_dcgm_text_any_cut_of_a_table_is_unknown_never_a_drain(tests, layout, data):
    lines = layout(tests)[0].splitlines()
    cut = data.draw(st.integers(0, len(lines) - 1))  # the footer never printed
    # and maybe part of a row, never all of it: the footer's whole line is the table complete
    keep = data.draw(st.integers(0, len(lines[cut]) - 1))
    text = "\n".join(lines[:cut] + ([lines[cut][:keep]] if keep else []))
    results, error = parse_diag(text)
    assert error
    found = dcgm_findings(results, error)
    assert [f.severity.value for f in found] == ["unknown"] and not any(f.drains for f in found)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([BORDER, HEADER[1], HEADER[2], row("Memory", "Fail - All"),
                                           row("", "GPU3: Fail"), row("Warning: GPU3", "x" * 45),
                                           row("", "Pass - GPU: 1"), "...", ""]),
                          st.text(max_size=90)), max_size=30))
def test_dcgm_text_any_text_parses_to_known_results_or_an_error(lines):
    results, error = parse_diag("\n".join(lines))
    assert all(r.status in STATUSES and (r.gpu is None or r.gpu >= 0) for r in results)
    assert results or error
    if error:
        found = dcgm_findings(results, error)
        assert not any(f.drains for f in found)


def test_dcgm_text_a_version_that_is_no_number_is_read_not_raised():
    # found by tests/fuzz/fuzz_dcgm_text.py: "3/3.8" raised ValueError out of the reader
    results, error = parse_diag(table("|-----  Metadata  ----------+------------------------------------------------|",
                                      row("DCGM Version", "3/3.8"),
                                      "|-----  Deployment  --------+------------------------------------------------|",
                                      row("Denylist", "Pass")))
    assert error is None and results == (DcgmResult(None, "Denylist", "pass", ""),)


# --- the real fragments of ml-engineering (DCGM 3.x, a node with faulty GPUs) ---------------

ERROR_ROW = "ml-engineering__dcgmi-diag-r3-3.x-error-row-under-category__fragment.txt"
THERMAL = "ml-engineering__dcgmi-diag-r2-3.x-gpu0-thermal-warning__fragment.txt"
UNDER_HEADING = "GPU 3 has uncorrectable memory errors and row remappings are pending"


def test_dcgm_text_error_row_under_a_category_is_read_and_named():
    # `dcgmi diag -r 3` after repeating Xid 64: the Deployment heading, then an Error row
    text = fixture(ERROR_ROW)
    results, error = parse_diag(text)
    assert [(r.gpu, r.test, r.status, r.text) for r in results] == [(3, "Deployment", "fail", UNDER_HEADING)]
    assert error and f"it showed Deployment fail (GPU 3): {UNDER_HEADING}" in error
    unknown_only(dcgm_findings(results, error), UNDER_HEADING)
    # the same rows in a whole table: GPU 3 fails, reset, and only GPU 3
    results, error = parse_diag(text + BORDER + "\n")
    assert error is None
    found = dcgm_findings(results)
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(3, "fail", "reset")]
    assert UNDER_HEADING in found[0].message


def test_dcgm_text_thermal_warning_names_gpu0_only_and_becomes_a_warn_on_a_passing_gpu():
    # `dcgmi diag -r 2` on a faulty node: GPU 0 fails GPU Memory with a thermal warning
    lines = fixture(THERMAL).splitlines()
    results, error = parse_diag("\n".join(lines))
    by_gpu = {r.gpu: r for r in results}
    assert sorted(by_gpu) == list(range(8)) and by_gpu[0].status == "fail"
    assert by_gpu[0].text.startswith("GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 "
                                     "seconds into the test for GPU 0 Verify that the cooling")
    assert all((r.status, r.text) == ("pass", "") for g, r in by_gpu.items() if g)
    assert error and "it showed GPU Memory fail (GPU 0): GPU 0 Thermal violations" in error
    # in a whole table the fail is GPU 0's alone
    whole = table(*lines[:-1], lines[-1] + " " * (78 - len(lines[-1]) - 1) + "|")
    results, error = parse_diag(whole)
    assert error is None
    assert [(f.gpu, f.severity.value) for f in dcgm_findings(results)] == [(0, "fail")]
    # the same warning on a GPU DCGM passed is that GPU's warn, not every GPU's text
    passing = [row("GPU Memory", "Pass - GPUs: 0, 1, 2, 3, 4, 5, 6, 7")] + lines[2:-1]
    results, error = parse_diag(table(*passing, row("", "ts.")))
    assert error is None
    found = dcgm_findings(results)
    assert [(f.gpu, f.severity.value, f.action.value) for f in found] == [(0, "warn", "none")]
    assert "Thermal violations" in found[0].message
