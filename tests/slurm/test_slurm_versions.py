"""What gpu-healthcheck relies on from Slurm, observed on the Slurm that runs the tests.

`make slurm-matrix` runs these (with every other Slurm test) against each supported version:
22.05 from the host, 24.11 from the Debian 13 root and 26.05 from the Debian unstable root
(tests/slurmroot/).  OBSERVED holds what
each version did when we ran it; deploy/slurm/README.md's table of relied-on behaviour is that
dict, one column per version.  Each test asserts the running version's column, so a Slurm
that behaves differently fails here, naming what changed, before it surprises a cluster.  A
version with no column fails too: run the tests on it and add one.

The scripts slurmd runs here are small shell scripts that record what they saw in files;
the real prolog/epilog are exercised by test_slurm.py and test_fault_matrix.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from healthcheck.report.cluster import rows_from_show_nodes
from healthcheck.act.scontrol import parse_show_nodes, reason_time
from tests.lib.gpucluster import require_slurm
from tests.lib.slurmcluster import JobError, SlurmCluster, SlurmClusterError, _wait_until, slurm_version

pytestmark = pytest.mark.slurm

_GPUS = {"SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1", "GPU_DEVICE_ORDINAL": "0,1",
         "PATH": None}
_ENV_NAMES_22_05 = [
    "CUDA_VISIBLE_DEVICES", "SLURMD_NODENAME", "SLURM_CLUSTER_NAME", "SLURM_CONF", "SLURM_JOBID",
    "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_GID", "SLURM_JOB_GPUS", "SLURM_JOB_ID",
    "SLURM_JOB_NUM_NODES", "SLURM_JOB_PARTITION", "SLURM_JOB_RESTART_COUNT", "SLURM_JOB_STDIN",
    "SLURM_JOB_STDOUT", "SLURM_JOB_UID", "SLURM_JOB_USER", "SLURM_JOB_WORK_DIR", "SLURM_NODELIST",
    "SLURM_SCRIPT_CONTEXT", "SLURM_UID"]
_FINISHED = {"rc": 1, "message": "Job has already finished for job 1", "admin_comment": None}
# What both versions did alike...
_BOTH: Dict[str, object] = {
    "prolog_env": _GPUS,
    "epilog_env": _GPUS,
    "prolog_restart_count": ["0", "1"],
    "prolog_fail_nohold": {"state": "COMPLETED", "node": "gpu-b", "requeued": True},
    "prolog_fail_default": {"state": "PENDING", "reason": "launch_failed_requeued_held",
                            "priority": "0", "requeued": True},
    "admin_comment_from_epilog": _FINISHED,
    "admin_comment_after_end": _FINISHED,
    "prolog_comma-separated": {"ran": [], "job": "PENDING", "node_reason": "Prolog error"},
    "prolog_glob": {"ran": ["a", "b"], "job": "COMPLETED", "node_reason": None},
    "prolog_flags_Alloc": "batch started before gpu-b's prolog ended",
    "prolog_flags_Alloc,DeferBatch": "batch started after gpu-b's prolog ended",
    "health_check_limit_ms": 60000,
    "show_nodes_after_reason": None,  # Reason= is the last field of the line
    "show_nodes_state_drained": "IDLE+DRAIN",
}
# ...and where they differ.  What each version did, as these tests saw it.
OBSERVED: Dict[str, Dict[str, object]] = {
    "22.05": {
        **_BOTH,
        "prolog_env_names": _ENV_NAMES_22_05,
        "prolog_two Prolog= lines": {"ran": ["b"], "job": "COMPLETED", "node_reason": None},
        "reason_after_resume": None,
    },
    "24.11": {
        **_BOTH,
        "prolog_env_names": sorted(_ENV_NAMES_22_05 + [
            "SLURM_JOB_CORE_SPEC_COUNT", "SLURM_JOB_CORE_SPEC_TYPE", "SLURM_JOB_END_TIME",
            "SLURM_JOB_NODELIST", "SLURM_JOB_OVERSUBSCRIBE", "SLURM_JOB_START_TIME"]),
        "prolog_two Prolog= lines": {"ran": ["a", "b"], "job": "COMPLETED", "node_reason": None},
        "reason_after_resume": ("gpu-healthcheck: gpu1 pci=00000000:28:00.0 sn=1650522003801 "
                                "ecc.volatile_uncorrected=1 epilog job=7"),
    },
    "26.05": {
        **_BOTH,
        "prolog_env_names": sorted(_ENV_NAMES_22_05 + [
            "SLURM_JOB_CORE_SPEC_COUNT", "SLURM_JOB_CORE_SPEC_TYPE", "SLURM_JOB_END_TIME",
            "SLURM_JOB_EXCLUSIVE", "SLURM_JOB_NODELIST", "SLURM_JOB_OVERSUBSCRIBE",
            "SLURM_JOB_SLUID", "SLURM_JOB_START_TIME"]),
        "prolog_two Prolog= lines": {"ran": ["a", "b"], "job": "COMPLETED", "node_reason": None},
        "reason_after_resume": None,
        # START_ONLY: the run at slurmd's start, also after `scontrol reboot`, comes before it
        # registers; REBOOT_ONLY: none at start, one once the rebooted node has registered
        "health_check_START_ONLY": {"runs_at_start": 1, "runs_after_reboot": [
            {"state": "DOWN+REBOOT_ISSUED", "boot_time": "old"}]},
        "health_check_REBOOT_ONLY": {"runs_at_start": 0, "runs_after_reboot": [
            {"state": "IDLE", "boot_time": "new"}]},
    },
}

SCHED = ("batch_sched_delay=0,sched_min_interval=0,sched_interval=2,default_queue_depth=100,"
         "bf_interval=1")
SH_HEAD = "#!/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\nexport PATH\n"


@pytest.fixture
def version() -> str:
    require_slurm()
    v = slurm_version()
    assert v, "slurmctld -V printed no version"
    return v


def expect(version: str, seen: Dict[str, object]) -> None:
    """Assert that each observation is what this Slurm version did before (OBSERVED)."""
    column = OBSERVED.get(version, {})
    problems = []
    for key, value in seen.items():
        print(f"[observed] slurm {version} {key} = {value!r}")
        if key not in column:
            problems.append(f"no observation of {key!r} for Slurm {version} in OBSERVED; this "
                            f"run saw {value!r}: add it there and to deploy/slurm/README.md")
        elif value != column[key]:
            problems.append(f"Slurm {version} {key}: saw {value!r}, observed before {column[key]!r}")
    assert not problems, "\n".join(problems)


@contextlib.contextmanager
def running(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """A cluster already started (to see whether it starts at all), stopped at the end."""
    try:
        yield cluster
    finally:
        cluster.stop()


def script(path: Path, body: str, conf: Optional[Path] = None, head: str = SH_HEAD) -> str:
    head += f"SLURM_CONF={conf}\nexport SLURM_CONF\n" if conf else ""
    path.write_text(head + body)
    path.chmod(0o755)
    return str(path)


def records(rec: Path) -> Dict[str, str]:
    return {p.name: p.read_text() for p in sorted(rec.iterdir())}


def env_file(text: str) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def rec_dir(tmp_path: Path) -> Path:
    rec = tmp_path / "rec"
    rec.mkdir()
    rec.chmod(0o777)
    return rec


# --- the prolog and epilog environment ---------------------------------------------------

def test_prolog_and_epilog_environment_gpus_path_and_restart_count(tmp_path, version):
    """What job_from_env reads (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES), whether PATH is
    set, and the restart count a requeued job's prolog sees."""
    rec = rec_dir(tmp_path)
    dump = script(tmp_path / "dump", f'/usr/bin/env > "{rec}/$SLURM_SCRIPT_CONTEXT.$SLURM_JOB_ID.$$"\n'
                  f'/bin/date +%s%N >> "{rec}/$SLURM_SCRIPT_CONTEXT.$SLURM_JOB_ID.$$"\n',
                  head="#!/bin/sh\n")  # PATH as slurmd gives it
    with SlurmCluster(tmp_path / "c", nodes=["gpu-a"], gpus_per_node=4, prolog=dump,
                      epilog=dump) as c:
        job = c.sbatch(["--gres=gpu:2", "--requeue"],
                       '[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0\nexec sleep 300\n')
        c.wait_job(job, states=("RUNNING",), timeout=60)
        c.run(["scontrol", "requeue", job], check=True)
        c.wait_job(job, timeout=120)
        wait_for(lambda: len([n for n in records(rec) if n.startswith("epilog")]) == 2, 60,
                 "two epilogs")
    runs: Dict[str, List[Dict[str, str]]] = {"prolog_slurmd": [], "epilog_slurmd": []}
    # in the order they ran: each file ends with the time it was written
    for text in sorted(records(rec).values(), key=lambda t: int(t.split()[-1])):
        env = env_file(text)
        runs[env["SLURM_SCRIPT_CONTEXT"]].append(env)
    first, second = runs["prolog_slurmd"][0], runs["prolog_slurmd"][1]
    seen = {k: first.get(k) for k in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
                                      "GPU_DEVICE_ORDINAL", "PATH")}
    expect(version, {"prolog_env": seen,
                     "prolog_env_names": sorted(k for k in first if k.startswith(("SLURM", "CUDA"))),
                     "epilog_env": {k: runs["epilog_slurmd"][0].get(k) for k in seen},
                     "prolog_restart_count": [e.get("SLURM_JOB_RESTART_COUNT", "unset")
                                              for e in (first, second)]})


# --- a failing prolog: requeue, hold -----------------------------------------------------

@pytest.mark.parametrize("nohold", [True, False], ids=["nohold_on_prolog_fail", "default"])
def test_prolog_failure_drains_and_requeues_held_unless_nohold(tmp_path, version, nohold):
    fail_a = script(tmp_path / "prolog", '[ "$SLURMD_NODENAME" = gpu-a ] && exit 1\nexit 0\n')
    extra = [] if nohold else [f"SchedulerParameters={SCHED}"]
    with SlurmCluster(tmp_path / "c", nodes=["gpu-a", "gpu-b"], gpus_per_node=2, prolog=fail_a,
                      node_weights={"gpu-a": 1, "gpu-b": 10}, extra_conf=extra) as c:
        job = c.sbatch(["--gres=gpu:1"], "echo ran on $SLURMD_NODENAME\n")
        if nohold:
            info = c.wait_job(job, timeout=180)  # a requeued job waits cred_expire
            seen = {"state": info["JobState"], "node": info["NodeList"],
                    "requeued": int(info.get("Restarts", "0")) >= 1}
        else:
            try:
                c.wait_job(job, timeout=60)
                raise AssertionError("the job completed although nohold_on_prolog_fail is off")
            except JobError as held:
                info = held.info
            seen = {"state": info["JobState"], "reason": info.get("Reason"),
                    "priority": info.get("Priority"), "requeued": int(info.get("Restarts", "0")) >= 1}
        node_reason = c.node_reason("gpu-a")
        drained = "DRAIN" in c.node_info("gpu-a").get("State", "")
    expect(version, {"prolog_fail_" + ("nohold" if nohold else "default"): seen})
    assert drained and node_reason == "Prolog error", node_reason


# --- AdminComment of a finished job (the epilog gap) -------------------------------------

def test_admin_comment_of_a_job_from_its_epilog_and_after_it_finished(tmp_path, version):
    rec = rec_dir(tmp_path)
    c = SlurmCluster(tmp_path / "c", nodes=["gpu-a"], gpus_per_node=1)
    c.epilog = script(tmp_path / "epilog",
                      f'scontrol update JobId=$SLURM_JOB_ID AdminComment=from-epilog '
                      f'> "{rec}/epilog.out" 2>&1\necho $? > "{rec}/epilog.rc"\n', c.conf_path)
    with c:
        job = c.sbatch([], "true\n")
        c.wait_job(job, timeout=60)
        wait_for(lambda: (rec / "epilog.rc").exists(), 60, "the epilog")
        in_epilog = {"rc": int((rec / "epilog.rc").read_text()),
                     "message": (rec / "epilog.out").read_text().strip(),
                     "admin_comment": c.job_info(job).get("AdminComment")}
        r = c.run(["scontrol", "update", f"JobId={job}", "AdminComment=after-the-end"])
        after = {"rc": r.returncode, "message": (r.stdout + r.stderr).strip(),
                 "admin_comment": c.job_info(job).get("AdminComment")}
    expect(version, {"admin_comment_from_epilog": in_epilog, "admin_comment_after_end": after})


# --- several Prolog= scripts --------------------------------------------------------------

@pytest.mark.parametrize("form", ["two Prolog= lines", "comma-separated", "glob"])
def test_several_prolog_scripts(tmp_path, version, form):
    rec = rec_dir(tmp_path)
    d = tmp_path / "prolog.d"
    d.mkdir()
    a = script(d / "10-a", f'touch "{rec}/a"\n')
    b = script(d / "20-b", f'touch "{rec}/b"\n')
    lines = {"two Prolog= lines": [f"Prolog={a}", f"Prolog={b}"],
             "comma-separated": [f"Prolog={a},{b}"],
             "glob": [f"Prolog={d}/*"]}[form]
    c = SlurmCluster(tmp_path / "c", nodes=["gpu-a"], gpus_per_node=1, extra_conf=lines)
    try:
        c.start()
    except SlurmClusterError as exc:
        seen: object = "rejected: " + _fatal_line(str(exc))
    else:
        with running(c):
            job = c.sbatch([], "true\n")
            # the job completes, or the prolog fails and drains the node
            wait_for(lambda: c.job_info(job).get("JobState") == "COMPLETED"
                     or "DRAIN" in c.node_info("gpu-a").get("State", ""), 60, "the job or a drain")
            seen = {"ran": sorted(records(rec)), "job": c.job_info(job).get("JobState"),
                    "node_reason": c.node_reason("gpu-a") or None}
    expect(version, {f"prolog_{form}": seen})


def _fatal_line(log: str) -> str:
    for line in log.splitlines():
        if "fatal" in line.lower() or "error" in line.lower():
            return line.split("]", 1)[-1].strip()[:120]
    return log.splitlines()[0][:120] if log else ""


# --- PrologFlags=Alloc,DeferBatch on a two-node job --------------------------------------

WINDOW_S = 8  # how long we watch for the batch script while gpu-b's prolog is held


@pytest.mark.parametrize("flags", ["Alloc", "Alloc,DeferBatch"])
def test_batch_script_start_while_the_second_nodes_prolog_runs(tmp_path, version, flags):
    """Whether the batch script starts on the first node before the prolog of the second node
    finished.  gpu-b's prolog waits for a file; we watch the batch script for WINDOW_S
    seconds, then release it.  (A watch window, not a timing assertion: what we record is
    whether the script started at all while the prolog was held.)"""
    rec = rec_dir(tmp_path)
    go = tmp_path / "go"
    prolog = script(tmp_path / "prolog", f'[ "$SLURMD_NODENAME" = gpu-b ] || exit 0\n'
                    f'touch "{rec}/b-in"\nwhile [ ! -e "{go}" ]; do sleep 0.1; done\n'
                    f'touch "{rec}/b-done"\n')
    c = SlurmCluster(tmp_path / "c", nodes=["gpu-a", "gpu-b"], gpus_per_node=1, prolog=prolog,
                     extra_conf=[f"PrologFlags={flags}"])
    try:
        c.start()
    except SlurmClusterError as exc:
        expect(version, {f"prolog_flags_{flags}": "rejected: " + _fatal_line(str(exc))})
        return
    with running(c):
        job = c.sbatch(["-N2", "--gres=gpu:1"],
                       f'if [ -e "{rec}/b-done" ]; then echo after > "{rec}/batch"; '
                       f'else echo before > "{rec}/batch"; fi\n')
        wait_for(lambda: (rec / "b-in").exists(), 60, "gpu-b's prolog")
        deadline = time.monotonic() + WINDOW_S
        while not (rec / "batch").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        go.touch()
        c.wait_job(job, timeout=60)
        seen = (rec / "batch").read_text().strip()
    expect(version, {f"prolog_flags_{flags}": "batch started " + seen + " gpu-b's prolog ended"})


# --- the HealthCheckProgram time limit ----------------------------------------------------

def test_health_check_program_is_killed_at_slurmds_limit(tmp_path, version):
    """slurmd runs HealthCheckProgram at start and every HealthCheckInterval, and kills it past
    a fixed limit.  Ours must end well inside it; this prints how long slurmd let it run."""
    rec = rec_dir(tmp_path)
    hc = script(tmp_path / "hc", f'date +%s > "{rec}/hc.$$"\nexec sleep 250\n')
    with SlurmCluster(tmp_path / "c", nodes=["gpu-a"], gpus_per_node=1, health_check_program=hc,
                      health_check_interval=3600, start_timeout=200) as c:
        pid_file = wait_for(lambda: next(iter(rec.iterdir()), None), 200, "the health check")
        pid = int(pid_file.name.split(".")[1])
        started = int(pid_file.read_text())
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), 240,
                 "slurmd to stop the health check")
        ran_s = time.time() - started
        log = c.logs()["slurmd-gpu-a"]
    print(f"[observed] slurm {version} HealthCheckProgram ran {ran_s:.0f} s before slurmd ended it")
    limit = re.search(r"health_check poll timeout @ (\d+) msec", log)
    assert limit, "slurmd logged no timeout of the health check it ended"
    expect(version, {"health_check_limit_ms": int(limit.group(1))})


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


# --- scontrol -o show nodes, and a resumed node's reason ---------------------------------

def test_show_nodes_parses_and_a_resumed_node_keeps_or_clears_its_reason(tmp_path, version):
    reason = ("gpu-healthcheck: gpu1 pci=00000000:28:00.0 sn=1650522003801 "
              "ecc.volatile_uncorrected=1 epilog job=7")
    with SlurmCluster(tmp_path / "c", nodes=["gpu-a", "gpu-b"], gpus_per_node=2) as c:
        c.drain("gpu-a", reason)
        text = c.run(["scontrol", "-o", "show", "nodes"], check=True).stdout
        nodes = {n.name: n for n in parse_show_nodes(text)}
        assert nodes["gpu-a"].drained and nodes["gpu-a"].reason == reason
        assert not nodes["gpu-b"].drained and nodes["gpu-b"].reason is None
        line = next(l for l in text.splitlines() if l.startswith("NodeName=gpu-a "))
        assert reason_time(line)
        after_reason = line.split(" [", 1)[1].split("]", 1)[1].split()
        seen = {"show_nodes_after_reason": after_reason[0].split("=")[0] if after_reason else None,
                "show_nodes_state_drained": nodes["gpu-a"].state}
        c.resume("gpu-a")
        c.wait_node("gpu-a", lambda info: info.get("State") == "IDLE", 60)
        text = c.run(["scontrol", "-o", "show", "nodes"], check=True).stdout
        resumed = {n.name: n for n in parse_show_nodes(text)}["gpu-a"]
        seen["reason_after_resume"] = resumed.reason
        expect(version, seen)
        # either way, --cluster does not list a node back in service
        assert [r["node"] for r in rows_from_show_nodes(text)] == []


# --- HealthCheckNodeState=START_ONLY / REBOOT_ONLY around `scontrol reboot` ---------------

_ONLY_STATES = {"START_ONLY": (25, 11), "REBOOT_ONLY": (26, 5)}


@pytest.mark.parametrize("state", sorted(_ONLY_STATES))
def test_health_check_node_state_only_runs_around_a_reboot(tmp_path, version, state):
    """When slurmd runs HealthCheckProgram with HealthCheckNodeState=START_ONLY (25.11) or
    REBOOT_ONLY (26.05): at its first start, and after `scontrol reboot`; and what slurmctld
    shows of the node at that run (still flagged REBOOT, its new BootTime or not).  Our repair
    loop's post-boot check validates only at a run that sees the boot registered (no REBOOT
    flag, BootTime after the claim): docs/repair.md says what each state means for it.  The
    reboot is tests/lib/fake-reboot (slurmd stopped, started again freshly "booted").  Each
    watch below is a window, not a timing assertion: what is recorded is which runs happened."""
    if tuple(int(p) for p in version.split(".")) < _ONLY_STATES[state]:
        pytest.skip(f"HealthCheckNodeState={state} is Slurm "
                    f"{'.'.join(map(str, _ONLY_STATES[state]))} and later")
    rec = rec_dir(tmp_path)
    c = SlurmCluster(tmp_path / "c", nodes=["gpu-a"], gpus_per_node=1, health_check_interval=3600,
                     extra_conf=[f"HealthCheckNodeState={state}", "ResumeTimeout=300",
                                 f"RebootProgram={Path(__file__).parents[1] / 'lib' / 'fake-reboot'}"])
    c.health_check_program = script(
        tmp_path / "hc", f'n=$(ls "{rec}" | wc -l)\n'
        f'scontrol -o show node gpu-a > "{rec}/run.$n.$$.tmp" 2>&1\n'
        f'mv "{rec}/run.$n.$$.tmp" "{rec}/run.$n.$$"\n', c.conf_path)

    def runs() -> List[Dict[str, str]]:
        done = sorted((p for p in rec.iterdir() if not p.name.endswith(".tmp")),
                      key=lambda p: int(p.name.split(".")[1]))
        return [dict(kv.split("=", 1) for kv in p.read_text().split() if "=" in kv) for p in done]

    def watch(n_before: int) -> List[Dict[str, str]]:
        deadline = time.monotonic() + WINDOW_S
        while time.monotonic() < deadline and len(runs()) == n_before:
            time.sleep(0.1)
        # a run that began in the window finishes writing (its .tmp renamed into place)
        _wait_until(lambda: not any(p.name.endswith(".tmp") for p in rec.iterdir()), 60,
                    what="the health check runs to finish writing")
        return runs()[n_before:]

    with c:
        c.wait_node("gpu-a", lambda i: i.get("State") == "IDLE", 60)
        at_start = watch(0)
        boot_before = c.node_info("gpu-a")["BootTime"]
        c.run(["scontrol", "reboot", "gpu-a"], check=True)
        c.wait_node("gpu-a", lambda i: "REBOOT" not in i.get("State", "")
                    and i.get("BootTime", "") > boot_before, 120)
        after = watch(len(at_start))
    seen = {"runs_at_start": len(at_start),
            "runs_after_reboot": [{"state": r.get("State"),
                                   "boot_time": "new" if r.get("BootTime", "") > boot_before else "old"}
                                  for r in after]}
    expect(version, {f"health_check_{state}": seen})
