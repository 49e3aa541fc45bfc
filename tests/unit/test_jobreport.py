"""--job-report's pure parts and the prolog's level choice (the SPANK plugin's Python side);
the whole path runs on a real cluster in tests/slurm/test_spank.py."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from healthcheck.cli import _fast_args
from healthcheck.commands.prolog import job_level as _level
from healthcheck.commands.jobreport import job_report
from healthcheck.report.jobreport import report_lines, requeue_line
from healthcheck.model import Action, Finding, Mode, NodeSnapshot, Severity
from healthcheck.act.scontrol import parse_admin_comment

ECC = Finding("ecc.volatile_uncorrected", Severity.FAIL,
              "GPU 2 (00000000:38:00.0, SN 1650522003802): 3 volatile uncorrected ECC errors, "
              "limit 0. Drain; reset the GPU.", gpu=2, value=3, threshold=0, action=Action.RESET)
AGGREGATE = ECC._replace(check="ecc.aggregate_uncorrected", message="GPU 2 (...): 3 during the job.")
OTHER_GPU = ECC._replace(gpu=5, message="GPU 5 (00000000:68:00.0, SN 1650522003805): 1 volatile "
                                        "uncorrected ECC errors, limit 0. Drain; reset the GPU.")
WARN = Finding("thermal.margin", Severity.WARN, "GPU 3 (...): 4 C below slowdown.", gpu=3)


def test_one_line_per_faulty_gpu_of_the_job_naming_host_gpu_pci_serial_and_the_fault():
    snapshot = NodeSnapshot(host="gpu-a", selected=(2, 3))
    assert report_lines("gpu-a", [WARN, ECC, AGGREGATE, OTHER_GPU], snapshot) == [
        "gpu-healthcheck: gpu-a GPU 2 (00000000:38:00.0, SN 1650522003802): 3 volatile "
        "uncorrected ECC errors, limit 0; this node will be drained"]


def test_a_fault_on_another_jobs_gpu_is_not_this_jobs_and_warnings_are_not_faults():
    lines = report_lines("gpu-a", [WARN, OTHER_GPU], NodeSnapshot(host="gpu-a", selected=(2, 3)))
    assert lines == ["gpu-healthcheck: gpu-a: the job's GPUs (2, 3) look healthy (ECC, row "
                     "remapping, retired pages, lost GPUs read through NVML)"]


def test_a_node_wide_fault_is_named_whatever_the_jobs_gpus():
    nvml = Finding("nvml.init", Severity.FAIL, "NVML cannot initialise: DRIVER_NOT_LOADED. Drain.",
                   action=Action.DRAIN)
    assert report_lines("gpu-a", [nvml], NodeSnapshot(host="gpu-a", selected=())) == [
        "gpu-healthcheck: gpu-a NVML cannot initialise: DRIVER_NOT_LOADED; this node will be drained"]


def test_requeue_line_says_why_from_our_admin_comment_and_nothing_for_a_first_run():
    reason = "gpu-healthcheck: gpu5 pci=00000000:68:00.0 sn=1650522003805 ecc.volatile_uncorrected=4 prolog job=7"
    assert requeue_line(0, reason) is None
    assert requeue_line(1, reason) == (
        "gpu-healthcheck: this job was requeued once; the node it was first given failed its "
        "check: gpu5 pci=00000000:68:00.0 sn=1650522003805 ecc.volatile_uncorrected=4 prolog job=7")
    assert requeue_line(2, "admin: node maintenance") == (
        "gpu-healthcheck: this job was requeued 2 times; AdminComment: admin: node maintenance")
    assert requeue_line(3, None) == ("gpu-healthcheck: this job was requeued 3 times; Slurm "
                                     "recorded no reason the job can see")


def test_a_requeue_phase_report_reads_nothing_when_the_job_never_restarted():
    out = io.StringIO()
    assert job_report({"GPU_HEALTHCHECK_REPORT": "requeued", "SLURM_RESTART_COUNT": "0",
                       "SLURM_JOB_ID": "7"}, out) == 0
    assert out.getvalue() == ""


SHOW_JOB = """JobId=7 JobName=train
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=1 Nice=0 Account=(null) QOS=(null)
   Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0
   AdminComment=gpu-healthcheck: gpu5 pci=00000000:68:00.0 sn=1 ecc.volatile_uncorrected=4 prolog job=7 
   Comment=my run
"""


def test_admin_comment_from_scontrol_show_job_keeps_key_value_text_inside_it():
    assert parse_admin_comment(SHOW_JOB) == (
        "gpu-healthcheck: gpu5 pci=00000000:68:00.0 sn=1 ecc.volatile_uncorrected=4 prolog job=7")
    assert parse_admin_comment(SHOW_JOB.replace("   AdminComment=", "   Other=")) is None
    assert parse_admin_comment("") is None


@given(st.text(alphabet=st.characters(blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
               max_size=300))
def test_admin_comment_property_any_one_line_text_comes_back_stripped(text):
    parsed = parse_admin_comment(f"JobId=1\n   AdminComment={text} \n   Comment=x\n")
    assert parsed == (text.strip() or None)


def test_prolog_level_comes_from_the_command_line_else_the_jobs_spank_choice_else_quick():
    spank = {"SPANK_GPU_HEALTHCHECK_LEVEL": "full"}
    assert _level(None, Mode.PROLOG, spank) == "full"
    assert _level("quick", Mode.PROLOG, spank) == "quick"  # the plugin decided (allow_full=no)
    assert _level(None, Mode.EPILOG, spank) == "quick"
    assert _level(None, Mode.NODE, spank) == "quick"  # a job's choice never reaches --node
    assert _level(None, Mode.PROLOG, {"SPANK_GPU_HEALTHCHECK_LEVEL": "everything"}) == "quick"


def test_what_the_plugin_runs_takes_the_fast_path_with_its_level():
    args = _fast_args(["--prolog", "--level", "full"])
    assert args is not None and args.prolog and args.level == "full"
    assert _fast_args(["--prolog", "--level", "bogus"]) is None  # argparse says what is wrong
    assert _fast_args(["--prolog"]).level is None
