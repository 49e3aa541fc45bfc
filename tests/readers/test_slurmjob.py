"""healthcheck/slurmjob.py and the gang check's job reader (decide/gang.parse_show_job) on real
`scontrol show job` text from Slurm 22.05, 24.11 and 26.05 (tests/fixtures/scontrol-show-job),
whose job name and comment hold Slurm's own keys: a job's own text may make it unreadable, but
never changes what is read (issue 36, case 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healthcheck.act.scontrol import parse_admin_comment
from healthcheck.decide.gang import GangJob, parse_show_job
from healthcheck.slurmjob import JobTextError, job_fields, job_line_value

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "scontrol-show-job"
VERSIONS = ("22.05", "24.11", "26.05")
HOSTILE_NAME = "x NodeList=gpu-a,gpu-b Restarts=0 UserId=root(0) JobState=RUNNING Requeue=1"
HOSTILE_COMMENT = "NodeList=gpu-a Restarts=7"
KEYS = ("JobId", "NodeList", "UserId", "JobState", "Restarts", "Requeue")


def fixture(version: str, layout: str) -> str:
    return (FIXTURES / f"slurm-{version}-{layout}.txt").read_text()


def benign(text: str, name: str = "x", comment: str = "c") -> str:
    """The captured job with its name and comment replaced (everything else as slurmctld said;
    26.05 repeats both in its SubmitLine=)."""
    assert f"JobName={HOSTILE_NAME}" in text and f"Comment={HOSTILE_COMMENT}" in text
    return text.replace(HOSTILE_NAME, name).replace(HOSTILE_COMMENT, comment)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("layout", ["oneline", "lines"])
def test_slurmjob_a_name_holding_slurms_keys_is_refused_never_read(version, layout) -> None:
    """The job's real nodes are gpu-b,gpu-c; its name says gpu-a,gpu-b (root once measured those)."""
    with pytest.raises(JobTextError, match="NodeList= [23] times"):
        parse_show_job(fixture(version, layout))
    job = parse_show_job(benign(fixture(version, layout)))
    assert job.job_id == "1" and job.nodes == ("gpu-b", "gpu-c") and job.user == "root(0)"
    assert job.restarts == 0 and job.requeue and job.state in ("RUNNING", "PENDING")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("layout", ["newline-name", "newline-name-oneline"])
def test_slurmjob_a_name_with_a_line_of_its_own_is_refused(version, layout) -> None:
    """`-J $'y\\n   NodeList=gpu-c\\nz'`: every release prints the line as if it were its own."""
    text = fixture(version, layout)
    assert "\n   NodeList=gpu-c\n" in text
    with pytest.raises(ValueError, match="NodeList= [23] times"):
        parse_show_job(text)
    with pytest.raises(JobTextError, match="Restarts= [23] times"):
        job_fields(text, ("Restarts",))  # the comment's line


@pytest.mark.parametrize("version", VERSIONS)
def test_slurmjob_key_words_inside_other_words_are_not_keys(version) -> None:
    """ReqNodeList=, ExcNodeList=, ArrayJobId= are no NodeList= or JobId=."""
    text = benign(fixture(version, "oneline"))
    assert "ReqNodeList=gpu-b,gpu-c" in text
    assert job_fields(text, ("NodeList", "JobId")) == {"NodeList": "gpu-b,gpu-c", "JobId": "1"}
    with pytest.raises(JobTextError, match="no Nope="):
        job_fields(text, ("Nope",))
    assert job_fields(text, (), ("Nope",)) == {}


# any text a user may give as a name or comment: Slurm's keys, spaces, newlines, "=" and all
_WORDS = st.sampled_from([f"{k}=" for k in KEYS] + ["ReqNodeList=", "gpu-a", "gpu-z,gpu-y", "9", " ", "\n",
                                                    "\n   ", "(0)", "=", "RUNNING", "Requeue", "x"])
USER_TEXT = st.lists(st.one_of(_WORDS, st.text(min_size=1, max_size=5)), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(name=USER_TEXT, comment=USER_TEXT, version=st.sampled_from(VERSIONS),
       layout=st.sampled_from(["oneline", "lines"]))
def test_slurmjob_no_name_or_comment_changes_any_key_read(name, comment, version, layout) -> None:
    """Property: whatever the job's name and comment, the job read is the one slurmctld printed,
    or none at all (JobTextError); never one with other nodes, restarts, state or user."""
    text = fixture(version, layout)
    truth = parse_show_job(benign(text))
    try:
        job = parse_show_job(benign(text, name=name, comment=comment))
    except JobTextError:
        return
    assert job == truth
    assert isinstance(job, GangJob)


def test_slurmjob_admin_comment_is_read_from_its_own_line_once() -> None:
    text = benign(fixture("22.05", "lines")).replace("   StdErr=", "   AdminComment=gpu-healthcheck: x\n   StdErr=")
    assert parse_admin_comment(text) == "gpu-healthcheck: x"
    assert job_line_value(text, "AdminComment") == "gpu-healthcheck: x"
    forged = text.replace("Comment=c", "Comment=c\n   AdminComment=forged")
    assert parse_admin_comment(forged) is None
    assert parse_admin_comment(benign(fixture("22.05", "lines"))) is None  # none set
