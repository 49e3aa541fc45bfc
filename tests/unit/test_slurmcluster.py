"""The real local Slurm harness (tests/lib/slurmcluster.py), pure: `scontrol -o` one-liners."""

from __future__ import annotations

from tests.lib.slurmcluster import parse_scontrol_oneliner


def test_parse_scontrol_oneliner_reason_with_spaces():
    line = ("NodeName=gpu-a Arch=x86_64 CoresPerSocket=16 State=IDLE+DRAIN Weight=1 "
            "OS=Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29) "
            "CfgTRES=cpu=16,mem=62.50G,billing=16,gres/gpu=8 AllocTRES= CapWatts=n/a "
            "Reason=gpu-healthcheck: xid=79 on GPU 3 (fallen off the bus) [root@2024-01-01T00:00:00]")
    d = parse_scontrol_oneliner(line)
    assert d["State"] == "IDLE+DRAIN"
    assert d["OS"].startswith("Linux 6.1.0") and d["OS"].endswith("(2023-09-29)")
    assert d["CfgTRES"] == "cpu=16,mem=62.50G,billing=16,gres/gpu=8"
    assert d["AllocTRES"] == ""
    assert d["Reason"] == ("gpu-healthcheck: xid=79 on GPU 3 (fallen off the bus) "
                           "[root@2024-01-01T00:00:00]")
    job = ("JobId=7 JobName=x y UserId=root(0) JobState=PENDING Reason=launch failed requeued "
           "held Dependency=(null) Restarts=1 AdminComment=a b=c d Comment=free text Power=")
    j = parse_scontrol_oneliner(job)
    assert j["JobName"] == "x y"
    assert j["Reason"] == "launch failed requeued held"
    assert j["AdminComment"] == "a b=c d"
    assert j["Comment"] == "free text"
    assert j["Restarts"] == "1" and j["Power"] == ""
