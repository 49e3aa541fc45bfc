"""`gpu-healthcheck --gang` in-process (commands/gang.py), with stand-ins at the outside boundary
only: an scontrol that answers `show job` as slurmctld does, and an srun that starts the step's
one rank 0 of the fake nccl-tests (tests/fakegpu/fabric.py) with the step's nodes in
SLURM_STEP_NODELIST, or says what slurmstepd says when the program is not there."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from healthcheck.act.gangrun import srun_env
from healthcheck.commands.gang import GangRequest, gang
from healthcheck.config import Config, DrainConfig
from healthcheck.configsections import InternodeConfig

SHOW_JOB = "JobId=12 JobName=train UserId=alice(1001) JobState=RUNNING Requeue=1 Restarts=0 NodeList={nodes}\n"
SRUN = r"""#!/bin/sh
prog=""; nodes=""
for a in "$@"; do
  case "$a" in --nodelist=*) nodes="${a#--nodelist=}";; --*) ;; *) [ -z "$prog" ] && prog="$a";; esac
done
if [ ! -x "$prog" ]; then echo "slurmstepd: error: execve(): $prog: No such file or directory"; exit 2; fi
shift $(( $# ))
SLURM_STEP_NODELIST="$nodes" SLURM_PROCID=0 exec "$prog" -b 268435456 -e 268435456 -g 1
"""


def stand_ins(tmp_path: Path, nodes: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho '{SHOW_JOB.format(nodes=nodes).strip()}'\n")
    (bin_dir / "srun").write_text(SRUN)
    for f in ("scontrol", "srun"):
        (bin_dir / f).chmod(0o755)
    return bin_dir


def run(tmp_path: Path, fakegpu: Path, nodes: str, scenario: str, nccl_tests: str = "", as_json: bool = False,
        floor: float = 100.0):
    bin_dir = stand_ins(tmp_path, nodes)
    (tmp_path / "fabric.scenario").write_text(scenario)
    config = Config(scontrol=str(bin_dir / "scontrol"), state_dir=str(tmp_path / "state"), journal=False,
                    internode=InternodeConfig(srun=str(bin_dir / "srun"), nccl_tests=nccl_tests or str(fakegpu),
                                        busbw_floor_gbps=floor, gang_timeout_s=60.0))
    environ = {"SLURM_JOB_ID": "12", "SLURM_PROCID": "0", "SLURM_NTASKS": "4",
               "FAKEGPU_FABRIC": str(tmp_path / "fabric.scenario"), "PATH": os.environ["PATH"]}
    out, err = io.StringIO(), io.StringIO()
    code = gang(GangRequest(as_json=as_json), config, environ, out, err)
    return code, out.getvalue(), err.getvalue()


def test_gang_cli_healthy_job_passes(tmp_path, fakegpu) -> None:
    code, out, _ = run(tmp_path, fakegpu, "gpu-a,gpu-b,gpu-c,gpu-d", "")
    assert code == 0 and out == "gpu-healthcheck: gang: job 12: 4 nodes passed, busbw 380.0 GB/s at 256 MiB\n"


def test_gang_cli_user_side_names_the_slow_node_and_drains_nothing(tmp_path, fakegpu) -> None:
    code, out, _ = run(tmp_path, fakegpu, "gpu-a,gpu-b,gpu-c,gpu-d", "node.gpu-c.busbw_gbps = 41.2\n")
    assert code == 2, out
    assert "gpu-healthcheck: gang: gpu-c is bad: busbw=41.2<100 with every partner (gpu-" in out
    assert "the privileged side (SPANK allow_gang=yes) drains it and requeues the job" in out
    code, out, _ = run(tmp_path, fakegpu, "gpu-a,gpu-b,gpu-c,gpu-d", "node.gpu-c.busbw_gbps = 41.2\n", as_json=True)
    doc = json.loads(out)
    assert doc["mode"] == "gang" and doc["outcome"] == "failed" and doc["requeue"] is False
    assert [b["node"] for b in doc["bad"]] == ["gpu-c"] and doc["bad"][0]["action"] == "report_only"


def test_gang_cli_missing_collective_is_could_not_run(tmp_path, fakegpu) -> None:
    code, out, _ = run(tmp_path, fakegpu, "gpu-a,gpu-b", "", nccl_tests=str(tmp_path / "nowhere"))
    assert code == 3 and "all_reduce_perf is not installed on gpu-a,gpu-b" in out and "nothing drained" in out


@pytest.mark.parametrize("floor", [100.0, 0.0])
def test_gang_cli_collective_that_did_not_span_the_nodes_is_could_not_run_never_a_pass(tmp_path, fakegpu,
                                                                                       floor) -> None:
    """Issue 36 case 6: without MPI each task runs alone (the fake's default.nccl.no_mpi: rank
    0 on one host, busbw 0.00); with a floor that read as every pair failing, without one as a
    pass.  It is the site's setup: exit 3, nothing drained, what to fix said."""
    code, out, _ = run(tmp_path, fakegpu, "gpu-a,gpu-b,gpu-c", "default.nccl.no_mpi = 1\n", floor=floor)
    assert code == 3, out
    assert "could not run: the collective did not span gpu-a,gpu-b,gpu-c: ranks on " in out
    assert "build nccl-tests with MPI (make MPI=1) and run srun --mpi=pmix" in out and "nothing drained" in out
    assert "passed" not in out and " is bad" not in out


def test_gang_cli_outside_a_job_and_other_ranks(tmp_path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert gang(GangRequest(), Config(), {}, out, err) == 3 and "SLURM_JOB_ID is 'unset'" in err.getvalue()
    assert gang(GangRequest(), Config(), {"SLURM_JOB_ID": "12_3"}, out, err) == 3
    assert gang(GangRequest(), Config(), {"SLURM_JOB_ID": "12", "SLURM_PROCID": "3"}, out, err) == 0


def test_gang_cli_srun_env_drops_the_steps_slurm_variables() -> None:
    env = srun_env({"SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "SLURM_CONF": "/etc/slurm/slurm.conf", "HOME": "/h"})
    assert env == {"SLURM_CONF": "/etc/slurm/slurm.conf", "HOME": "/h"}


def test_gang_cli_act_needs_root() -> None:
    done = subprocess.run([sys.executable, "-m", "healthcheck.cli", "--gang", "--act"], user=65534, group=65534,
                          extra_groups=[], env={"SLURM_JOB_ID": "12", "PATH": "/usr/bin:/bin",
                                                "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 3, done.stderr
    assert "--gang --act is the privileged side" in done.stderr


SCONTROL = r'''#!/usr/bin/env python3
"""A stand-in slurmctld behind scontrol: four idle GPU nodes and job 12; drains and the
requeue are kept in STATE beside this file and logged in order."""
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
state_path, log = os.path.join(here, "state.json"), os.path.join(here, "calls.log")
state = json.load(open(state_path)) if os.path.exists(state_path) else {}
args = sys.argv[1:]
open(log, "a").write(" ".join(args) + "\n")
if args[:2] == ["show", "job"]:
    # root's own job: its steps stay root's (an ordinary user's job: slurm/test_gang_cluster.py)
    print(os.environ.get("SHOW_JOB_IDS", "UserId=root(0) GroupId=root(0)"),
          "JobId=12 JobName=train JobState=RUNNING Requeue=1 Restarts=0 NodeList=gpu-a,gpu-b,gpu-c,gpu-d")
elif args[:3] == ["-o", "show", "nodes"]:
    for n in ("gpu-a", "gpu-b", "gpu-c", "gpu-d"):
        reason = state.get(n)
        st = "IDLE+DRAIN" if reason else "IDLE"
        extra = f" Reason={reason} [root@{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(time.time() - 5))}]" if reason else ""
        print(f"NodeName={n} Arch=x86_64 CoresPerSocket=16 Gres=gpu:8 State={st} Partitions=gpu{extra}")
elif args[0] == "update" and args[1].startswith("NodeName=") and "State=DRAIN" in args:
    state[args[1][9:]] = next(a[7:] for a in args if a.startswith("Reason="))
    json.dump(state, open(state_path, "w"))
'''


def test_gang_cli_privileged_side_drains_names_the_job_and_requeues_last(tmp_path, fakegpu) -> None:
    bin_dir = stand_ins(tmp_path, "gpu-a,gpu-b,gpu-c,gpu-d")
    (bin_dir / "scontrol").write_text(SCONTROL)
    (tmp_path / "fabric.scenario").write_text("node.gpu-c.busbw_gbps = 41.2\n")
    (tmp_path / "textfile").mkdir()
    config = Config(scontrol=str(bin_dir / "scontrol"), state_dir=str(tmp_path / "state"), journal=False,
                    history_file=str(tmp_path / "history.jsonl"), drain=DrainConfig(max_fraction=0.5),
                    metrics_file=str(tmp_path / "textfile" / "gpu_healthcheck.prom"),
                    internode=InternodeConfig(srun=str(bin_dir / "srun"), nccl_tests=str(fakegpu),
                                        busbw_floor_gbps=100.0, gang_timeout_s=60.0))
    environ = {"SLURM_JOB_ID": "12", "FAKEGPU_FABRIC": str(tmp_path / "fabric.scenario"), "PATH": os.environ["PATH"]}
    out, err = io.StringIO(), io.StringIO()
    assert gang(GangRequest(act=True), config, environ, out, err) == 2, err.getvalue()
    prom = (tmp_path / "textfile" / "gpu_healthcheck_gang.prom").read_text()
    assert 'gpu_healthcheck_gang_outcome{outcome="failed"} 1' in prom
    assert 'gpu_healthcheck_gang_node_outcome{node="gpu-c",outcome="bad"} 1' in prom
    assert 'gpu_healthcheck_gang_busbw_gbps{node="gpu-c",partner="gpu-d"} 41.2' in prom
    assert "gpu_healthcheck_gang_job_nodes 4" in prom
    calls = (bin_dir / "calls.log").read_text().splitlines()
    drains = [i for i, c in enumerate(calls) if c.startswith("update NodeName=gpu-c State=DRAIN")]
    comment = [i for i, c in enumerate(calls) if c.startswith("update JobId=12 AdminComment=gpu-healthcheck: gang: gpu-c ")]
    assert drains and comment and calls[-1] == "requeue 12" and drains[0] < comment[0] < len(calls) - 1, calls
    assert "Reason=gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-" in calls[drains[0]]
    assert not any("NodeName=gpu-a" in c or "NodeName=gpu-b" in c or "NodeName=gpu-d" in c for c in calls)
    assert "busbw 41.2 GB/s; drained; requeuing the job" in out.getvalue()
    history = json.loads((tmp_path / "history.jsonl").read_text().splitlines()[-1])
    assert history["mode"] == "gang" and history["findings"][0]["node"] == "gpu-c"
    # once per job run on a node: a second trigger measures nothing and drains nothing
    assert gang(GangRequest(act=True), config, environ, io.StringIO(), err) == 0
    assert "measured on this node already" in err.getvalue()


def test_gang_cli_privileged_side_without_the_jobs_group_in_the_record_runs_nothing(tmp_path, fakegpu,
                                                                                   monkeypatch) -> None:
    """Root's steps run as the job's owner by slurmctld's uid and gid: a record without GroupId
    is "could not run" (exit 3), no step started, nothing drained, never run as root."""
    bin_dir = stand_ins(tmp_path, "gpu-a,gpu-b,gpu-c,gpu-d")
    (bin_dir / "scontrol").write_text(SCONTROL)
    monkeypatch.setenv("SHOW_JOB_IDS", "UserId=alice(1001)")
    config = Config(scontrol=str(bin_dir / "scontrol"), state_dir=str(tmp_path / "state"), journal=False,
                    history_file=str(tmp_path / "history.jsonl"),
                    internode=InternodeConfig(srun=str(bin_dir / "srun"), nccl_tests=str(fakegpu), busbw_floor_gbps=100.0))
    out = io.StringIO()
    assert gang(GangRequest(act=True), config, {"SLURM_JOB_ID": "12", "PATH": os.environ["PATH"]}, out,
                io.StringIO()) == 3
    assert "could not run: job 12: slurmctld's record has no numeric GroupId" in out.getvalue(), out.getvalue()
    assert "nothing drained" in out.getvalue()
    assert not any(c.startswith(("update", "requeue")) for c in (bin_dir / "calls.log").read_text().splitlines())


@pytest.mark.parametrize("bad", ["gpu-a", "gpu-b", "gpu-c"])
def test_gang_cli_three_nodes_name_the_slow_node_wherever_it_is(tmp_path, fakegpu, bad) -> None:
    """Three nodes through the fake nccl-tests: the slow node in the only pair (gpu-a, gpu-b) is
    found by running each with the odd one out; the odd one out by the pair's two nodes."""
    code, out, _ = run(tmp_path, fakegpu, "gpu-a,gpu-b,gpu-c", f"node.{bad}.busbw_gbps = 41.2\n")
    assert code == 2, out
    assert f"gpu-healthcheck: gang: {bad} is bad: busbw=41.2<100 with every partner (" in out
    assert out.count(" is bad: ") == 1


def test_gang_cli_two_nodes_name_both_suspects_and_drain_nothing(tmp_path, fakegpu) -> None:
    code, out, _ = run(tmp_path, fakegpu, "gpu-a,gpu-b", "node.gpu-b.busbw_gbps = 41.2\n", as_json=True)
    doc = json.loads(out)
    assert code == 2 and doc["outcome"] == "unknown" and doc["bad"] == []
    assert [s["node"] for s in doc["suspects"]] == ["gpu-a", "gpu-b"]


SCONTROL_MODELS = r"""#!/bin/sh
case "$*" in
  "show job 12") echo 'JobId=12 JobName=train UserId=alice(1001) JobState=RUNNING Requeue=1 Restarts=0 NodeList=gpu-a,gpu-b,gpu-c,gpu-d';;
  "-o show nodes gpu-a,gpu-b,gpu-c,gpu-d")
    for n in gpu-a gpu-b gpu-c gpu-d; do
      echo "NodeName=$n Arch=x86_64 Gres=gpu:h100:8(S:0-1) State=ALLOCATED Partitions=gpu"
    done;;
  *) echo "unexpected: $*" >&2; exit 1;;
esac
"""


def test_gang_cli_per_model_floor_from_the_job_nodes_gres(tmp_path, fakegpu) -> None:
    """[internode] floors for h100: one `scontrol -o show nodes` of the job's own nodes gives each
    its model, and a node at 300 GB/s, above busbw_floor_gbps, fails the H100 floor."""
    bin_dir = stand_ins(tmp_path, "gpu-a,gpu-b,gpu-c,gpu-d")
    (bin_dir / "scontrol").write_text(SCONTROL_MODELS)
    (tmp_path / "fabric.scenario").write_text("node.gpu-b.busbw_gbps = 300\n")
    internode = InternodeConfig(srun=str(bin_dir / "srun"), nccl_tests=str(fakegpu), busbw_floor_gbps=100.0,
                          floors=("H100:busbw_gbps=360",), gang_timeout_s=60.0)
    config = Config(scontrol=str(bin_dir / "scontrol"), state_dir=str(tmp_path / "state"), journal=False,
                    internode=internode)
    environ = {"SLURM_JOB_ID": "12", "SLURM_PROCID": "0", "FAKEGPU_FABRIC": str(tmp_path / "fabric.scenario"),
               "PATH": os.environ["PATH"]}
    out, err = io.StringIO(), io.StringIO()
    assert gang(GangRequest(), config, environ, out, err) == 2, (out.getvalue(), err.getvalue())
    assert "gpu-healthcheck: gang: gpu-b is bad: busbw=300.0<360 with every partner" in out.getvalue()
    # without the floors the same run passes: 300 is above busbw_floor_gbps, and no show nodes is called
    out = io.StringIO()
    assert gang(GangRequest(), config._replace(internode=internode._replace(floors=())), environ, out, err) == 0
    # slurmctld not answering about the nodes: could not run, nothing judged
    (bin_dir / "scontrol").write_text(SCONTROL_MODELS.replace('"-o show nodes gpu-a,gpu-b,gpu-c,gpu-d")', '"never")'))
    out = io.StringIO()
    assert gang(GangRequest(), config, environ, out, err) == 3
    assert "cannot read the nodes' GPU models for [internode] floors" in out.getvalue()
