"""Whom the gang check's privileged side runs its srun steps as (decide/gang.step_user): the
job's owner, by the uid and gid of slurmctld's record, with her groups from the node's account
database; never root's, and nothing at all when the record lacks them.  slurmctld lets only a
job's owner create a step in it (tests/slurm/test_gang_cluster.py runs it on real Slurm)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.act.gangrun import srun_env
from healthcheck.outside import run_bounded
from healthcheck.decide.gang import StepUser, parse_show_job, step_user
from healthcheck.read.slurmconf import expand_hostlist

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scontrol-show-job"
ALICE = """JobId=1234 JobName=train
   UserId=alice(1001) GroupId=physics(2001) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   NodeList=gpu-[01-02]
"""


def groups(asked: List[Tuple[int, int]], found: List[int]):
    def groups_of(uid: int, gid: int) -> List[int]:
        asked.append((uid, gid))
        return found
    return groups_of


def test_step_user_is_the_jobs_owner_from_slurmctlds_record_with_her_node_groups() -> None:
    asked: List[Tuple[int, int]] = []
    user = step_user(parse_show_job(ALICE, expand_hostlist), groups(asked, [2001, 3000, 3001]))
    assert user == StepUser(1001, 2001, (2001, 3000, 3001))
    assert asked == [(1001, 2001)]  # her groups are looked up by her ids, never root's


def test_step_user_always_sets_her_groups_even_when_the_node_knows_none() -> None:
    """An explicit list, her gid alone: the child never keeps root's supplementary groups."""
    user = step_user(parse_show_job(ALICE, expand_hostlist), groups([], []))
    assert (user.uid, user.gid, user.groups) == (1001, 2001, (2001,))
    assert 0 not in (user.uid, user.gid, *user.groups)


@pytest.mark.parametrize("record", [
    ALICE.replace("UserId=alice(1001) ", ""),                  # no UserId
    ALICE.replace("GroupId=physics(2001) ", ""),               # no GroupId
    ALICE.replace("alice(1001)", "alice"),                     # no numeric uid
    ALICE.replace("physics(2001)", "physics(n/a)"),
])
def test_step_user_refuses_a_record_without_both_ids(record: str) -> None:
    with pytest.raises(ValueError, match="cannot run its steps as its owner"):
        step_user(parse_show_job(record, expand_hostlist), groups([], [0]))


def test_step_user_a_name_holding_root_ids_makes_the_job_unreadable_not_roots() -> None:
    """Her job's name `x UserId=root(0) GroupId=root(0)` comes first in scontrol's text: a key
    seen twice is refused, so nothing runs, and never as root."""
    named = ALICE.replace("JobName=train", "JobName=x UserId=root(0) GroupId=root(0)")
    with pytest.raises(ValueError):
        step_user(parse_show_job(named, expand_hostlist), groups([], []))


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("slurm-*.txt")))
def test_step_user_reads_real_slurm_text(fixture: str) -> None:
    """Real 22.05, 24.11 and 26.05 text (root's own jobs there: uid 0 is then the owner)."""
    text = (FIXTURES / fixture).read_text()
    try:
        job = parse_show_job(text, expand_hostlist)
    except ValueError:
        return  # the newline-name captures are refused upstream: nothing to run as anyone
    assert step_user(job, groups([], [])) == StepUser(0, 0, (0,))


@settings(max_examples=80, deadline=None)
@given(uid=st.integers(min_value=1, max_value=2**31), gid=st.integers(min_value=1, max_value=2**31),
       name=st.from_regex(r"[a-z_][a-z0-9_.-]{0,20}", fullmatch=True))
def test_step_user_any_ordinary_owner_is_never_root(uid: int, gid: int, name: str) -> None:
    text = ALICE.replace("alice(1001)", f"{name}({uid})").replace("physics(2001)", f"{name}({gid})")
    user = step_user(parse_show_job(text, expand_hostlist), groups([], [gid]))
    assert (user.uid, user.gid, user.groups) == (uid, gid, (gid,))


def test_srun_env_as_her_drops_roots_home_and_session_but_keeps_the_fabric_settings() -> None:
    root = {"PATH": "/usr/bin", "HOME": "/root", "USER": "root", "LOGNAME": "root", "SSH_AUTH_SOCK": "/x",
            "XDG_RUNTIME_DIR": "/run/user/0", "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_NTASKS": "4",
            "NCCL_IB_HCA": "mlx5_0"}
    env = srun_env(root, StepUser(1001, 2001, (2001,)))
    assert env == {"PATH": "/usr/bin", "HOME": "/tmp", "SLURM_CONF": "/etc/slurm/slurm.conf",
                   "NCCL_IB_HCA": "mlx5_0"}
    assert srun_env(root, StepUser(0, 0, (0,)))["HOME"] == "/root"  # root's own job: root's steps


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_run_bounded_as_user_drops_uid_gid_and_every_root_group() -> None:
    """The drop itself (outside.run_bounded as_user): the child is exactly her, not one of
    root's supplementary groups left."""
    ran = run_bounded(["id", "-u"], 10, as_user=(65534, 65534, [65534]))
    assert ran.returncode == 0 and ran.text().strip() == "65534", ran.why()
    ran = run_bounded(["sh", "-c", "id -g; id -G"], 10, as_user=(65534, 65534, [65534]), cwd="/tmp")
    assert ran.text().split() == ["65534", "65534"], ran.why()
