"""The DCGM bridge against real dcgmi outputs (tests/fixtures/dcgm/, SOURCES.md) and fake
dcgmi programs that hang or print garbage: unknown, never a drain."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config, DcgmConfig
from healthcheck.model import GpuSnapshot, Mode, NodeSnapshot
from healthcheck.read.dcgm import parse_diag, parse_health, read_dcgm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def dcgm_findings(read):
    node = NodeSnapshot(host="h", gpus=tuple(GpuSnapshot(i, uuid=f"GPU-{i}") for i in range(8)), dcgm=read)
    findings, crashes = run_checks(node, CheckContext(Config(), Mode.NODE, level="deep"))
    assert not crashes
    return [f for f in findings if f.check.startswith("dcgm.")]


def test_dcgm_diag_3_1_json_all_pass_maps_every_test_of_every_gpu():
    # the raw string of DCGM's own test: a warning line, a tab indent, null entries
    results, error = parse_diag(fixture("NVIDIA-DCGM__JsonResultTests__real-output-dcgm-3.1.0-8gpu.txt"))
    assert error is None
    assert {r.gpu for r in results} == set(range(8))
    assert {r.status for r in results} == {"pass"}
    assert "Denylist" in {r.test for r in results}
    from healthcheck.deepmodel import DcgmRead

    assert dcgm_findings(DcgmRead(diag=results, diag_ran=True)) == []


def test_dcgm_diag_r3_skip_and_r2_pass_are_not_findings():
    for name in ("virtualclient__DCGMIDiag_r2_results.json", "virtualclient__DCGMIDiag_r3_results.json"):
        results, error = parse_diag(fixture(name))
        assert error is None, name
        assert results and {r.status for r in results} <= {"pass", "skip"}
    results, _ = parse_diag(fixture("virtualclient__DCGMIDiag_r3_results.json"))
    assert any("gigaflops" in r.text for r in results)


def test_dcgm_diag_fail_and_warn_become_findings_with_gpu_test_and_dcgms_text():
    text = fixture("virtualclient__DCGMIDiag_r2_results.json").replace(
        '"status" : "Pass"', '"status" : "Fail"', 1)
    results, error = parse_diag(text)
    from healthcheck.deepmodel import DcgmRead, DcgmResult

    results = results + (DcgmResult(3, "PCIe", "warn", "GPU 3 PCIe bandwidth low"),)
    found = dcgm_findings(DcgmRead(diag=results, diag_ran=True))
    fail = [f for f in found if f.severity.value == "fail"]
    assert fail and fail[0].action.value == "reset" and "Denylist" in fail[0].message
    warn = [f for f in found if f.severity.value == "warn"]
    assert warn[0].gpu == 3 and "PCIe" in warn[0].message and "bandwidth low" in warn[0].message


def test_dcgm_health_healthy_is_no_finding():
    results, error = parse_health(fixture("virtualclient__DCGMIHealthCheckResults.json"))
    assert error is None and [r.status for r in results] == ["pass"]


def test_dcgm_garbage_output_is_unknown_never_a_drain():
    from healthcheck.deepmodel import DcgmRead

    for text in ("", "Error: unable to connect to host engine", "{", '{"DCGM GPU Diagnostic": 3}'):
        results, error = parse_diag(text)
        assert results == () and error
        found = dcgm_findings(DcgmRead(diag_error=error, diag_ran=True))
        assert [f.severity.value for f in found] == ["unknown"]
        assert not any(f.drains for f in found)


def fake_dcgmi(tmp_path: Path, body: str) -> str:
    path = tmp_path / "dcgmi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_dcgm_hanging_dcgmi_ends_by_the_deadline_as_unknown(tmp_path):
    config = Config(dcgmi=fake_dcgmi(tmp_path, "exec sleep 600\n"),
                    dcgm=DcgmConfig(enabled="true", timeout_s=0.5, health_timeout_s=0.5))
    read = read_dcgm(config, diag=True)
    assert read is not None
    assert "did not finish within 0.5 s" in (read.diag_error or "")
    assert "did not finish within 0.5 s" in (read.health_error or "")
    found = dcgm_findings(read)
    assert {f.severity.value for f in found} == {"unknown"}


def test_dcgm_missing_dcgmi_is_unknown_when_enabled_and_silent_on_auto(tmp_path):
    missing = str(tmp_path / "no-dcgmi")
    assert read_dcgm(Config(dcgmi=missing, dcgm=DcgmConfig(enabled="auto")), diag=True) is None
    read = read_dcgm(Config(dcgmi=missing, dcgm=DcgmConfig(enabled="true")), diag=True)
    assert read is not None and "dcgmi not found" in (read.diag_error or "")
    assert {f.severity.value for f in dcgm_findings(read)} == {"unknown"}


def test_dcgm_real_output_through_a_fake_dcgmi(tmp_path):
    diag = FIX / "NVIDIA-DCGM__JsonResultTests__real-output-dcgm-3.1.0-8gpu.txt"
    health = FIX / "virtualclient__DCGMIHealthCheckResults.json"
    script = f'case "$1" in diag) cat "{diag}"; exit 0;; health) cat "{health}";; esac\n'
    read = read_dcgm(Config(dcgmi=fake_dcgmi(tmp_path, script), dcgm=DcgmConfig(enabled="true")), diag=True)
    assert read is not None and read.diag_error is None and read.health_error is None
    assert len(read.diag) > 8 and dcgm_findings(read) == []
    assert os.path.exists(diag)


def test_dcgm_output_of_a_gibibyte_is_read_to_the_cap_without_holding_it(tmp_path):
    # a dcgmi gone wrong that prints 1 GiB: we keep read.dcgm.MAX_OUTPUT and drop the rest as it
    # is read, so the reading process's peak memory stays far below the output's size (measured
    # in a child of its own, as /proc's VmHWM: the peak of that process image alone, where
    # ru_maxrss would carry the pytest parent's peak across the exec)
    body = 'head -c 1073741824 /dev/zero | tr "\\0" "x"\n'
    dcgmi = fake_dcgmi(tmp_path, body)
    code = ("import sys\n"
            "from healthcheck.read.dcgm import MAX_OUTPUT, run_dcgmi\n"
            f"out, error = run_dcgmi([{dcgmi!r}, 'diag', '-r', '2', '-j'], 300)\n"
            "assert error is None and len(out) == MAX_OUTPUT, (error, len(out))\n"
            "print([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    peak_kib = int(done.stdout.split()[-1])
    assert peak_kib < 128 << 10, f"reading dcgmi's output peaked at {peak_kib >> 10} MiB"


def test_dcgm_deadline_ends_dcgmi_with_sigterm_so_it_stops_nvvs(tmp_path):
    # dcgmi stops a running diagnostic (and its nvvs children) on SIGTERM, not on SIGKILL
    marker = tmp_path / "stopped"
    body = f"trap 'echo nvvs-stopped > {marker}; exit 1' TERM\nwhile :; do sleep 0.1; done\n"
    config = Config(dcgmi=fake_dcgmi(tmp_path, body),
                    dcgm=DcgmConfig(enabled="true", timeout_s=0.5, health_timeout_s=0.5))
    read = read_dcgm(config, diag=True)
    assert read is not None and "did not finish within 0.5 s" in (read.diag_error or "")
    assert marker.read_text().strip() == "nvvs-stopped"
