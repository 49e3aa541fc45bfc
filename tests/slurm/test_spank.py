"""The SPANK plugin (spank/gpu_healthcheck.c) on a real Slurm cluster: slurmd loads it from this
cluster's plugstack.conf, sbatch offers its option, and it runs the real gpu-healthcheck against
per-node fake-GPU scenarios, with or without Prolog=/Epilog= scripts beside it.

Every job is an ordinary user's, made for the test (the job_user fixture), as on a real cluster:
her task-exit report runs as her, and so cannot read root's 0700 state_dir (docs/trust.md).

The plugin is built by `make -C spank` against whatever <slurm/spank.h> the machine has.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from tests.lib.fakenode import ROOT
from tests.lib.gpucluster import HEALTHY, GpuCluster, pci, require_slurm, serial, spank_plugin
from tests.lib.localuser import LocalUser
from tests.lib.slurmcluster import slurm_version

pytestmark = pytest.mark.slurm

WAIT_FOR_GO = "echo started gpus=$SLURM_JOB_GPUS host=$SLURMD_NODENAME\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"
# Small fake GPUs: a full memory test of 2 GiB is fast, and still far more than quick's 256 MiB.
SMALL = "gpus = 8\ngpu.*.memory.total_mib = 2048\n"


def _cluster(wd: Path, fakegpu: Path, user: LocalUser, **kw):
    """A cluster in `wd` (open_wd) whose jobs `user` submits."""
    require_slurm()
    return GpuCluster(wd, fakegpu, job_user=user, **kw)


@pytest.fixture
def plugin_only(open_wd, fakegpu, job_user):
    """No Prolog=/Epilog=: plugstack.conf alone does the prolog, the epilog and the report."""
    c = _cluster(open_wd, fakegpu, job_user, scripts=False, plugstack="run=prolog,epilog,report")
    with c.cluster:
        yield c


def _slurmd_log(c: GpuCluster, node: str) -> str:
    return (c.cluster.log_dir / f"slurmd-{node}.log").read_text(errors="replace")


def _history(c: GpuCluster, node: str, job: str) -> List[Dict]:
    path = c.state(node) / "history.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r for r in records if r.get("job_id") == job]


def _job_gpus(c: GpuCluster, job: str) -> List[int]:
    """The job's GPUs as it printed them ("gpus=0,1" from $SLURM_JOB_GPUS, minor numbers, which
    the fake numbers like NVML)."""
    m = re.search(r"gpus=([\d,]+)", c.cluster.job_output(job))
    assert m, c.cluster.job_output(job)
    return [int(i) for i in m.group(1).split(",")]


def _wait_log(c: GpuCluster, node: str, text: str, timeout: float = 60) -> str:
    from tests.lib.slurmcluster import _wait_until

    _wait_until(lambda: text in _slurmd_log(c, node), timeout, what=f"{text!r} in slurmd-{node}.log")
    return _slurmd_log(c, node)


def test_make_builds_the_plugin_with_every_warning_an_error():
    done = subprocess.run(["make", "-B", "-C", str(ROOT / "spank")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(flag in done.stdout for flag in ("-Wall", "-Wextra", "-Werror"))
    so = spank_plugin()
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                             text=True).stdout
    for fn in ("slurm_spank_init", "slurm_spank_job_prolog", "slurm_spank_job_epilog",
               "slurm_spank_task_init", "slurm_spank_task_exit", "plugin_name"):
        assert re.search(rf"\b{fn}\b", symbols), fn


def test_spank_deadline_is_prolog_timeout_and_epilog_timeout_where_set(open_wd, fakegpu, job_user):
    """Slurm 25.05 and later: PrologTimeout and EpilogTimeout override PrologEpilogTimeout for
    their own script (slurm.conf(5) of 26.05), so the plugin's deadline for each is that
    script's timeout less 5 s, not PrologEpilogTimeout's (120 s here)."""
    require_slurm()
    version = slurm_version() or "0.0"
    if tuple(int(p) for p in version.split(".")) < (25, 5):
        pytest.skip(f"Slurm {version} has no PrologTimeout/EpilogTimeout (25.05 and later)")
    c = _cluster(open_wd, fakegpu, job_user, scripts=False, plugstack="run=prolog,epilog,report")
    c.cluster.extra_conf += ["PrologTimeout=40", "EpilogTimeout=30"]
    with c.cluster:
        assert "PrologEpilogTimeout=120" in c.cluster.conf_path.read_text()
        assert re.search(r"gpu_healthcheck: exec=\S+ level=quick allow_full=yes "
                         r"run=prolog,epilog,report timeout=35 s \(epilog 25 s\)",
                         _slurmd_log(c, "gpu-a"))
        job = c.cluster.sbatch(["--gres=gpu:1"], "true\n")
        c.cluster.wait_job(job, timeout=60)
        [prolog] = [r for r in _history(c, "gpu-a", job) if r["mode"] == "prolog"]
        assert prolog["verdict"] == "pass"


def test_plugin_only_cluster_replays_the_seed_incident(plugin_only):
    """No Prolog=/Epilog=: the epilog drains the node whose GPU got a DBE, the failed job's own
    output names host, GPU, PCI and serial; the next job is requeued off an already bad node
    and learns why; a job that succeeds shows nothing extra."""
    c = plugin_only
    assert "Prolog=" not in c.cluster.conf_path.read_text()
    assert "--gpu-healthcheck=quick|full" in c.cluster.run(["sbatch", "--help"]).stdout
    # loaded by slurmd at start; its deadline: PrologEpilogTimeout (120 s here) less 5 s
    assert re.search(r"gpu_healthcheck: exec=\S+ level=quick allow_full=yes "
                     r"run=prolog,epilog,report timeout=115 s", _slurmd_log(c, "gpu-a"))
    c.scenario("gpu-b").write_text(HEALTHY + "gpu.5.ecc.volatile.uncorrected = 4\n")

    go = c.wd / "go"
    job1 = c.cluster.sbatch(["--gres=gpu:8", "-J", "train-13b"],
                            WAIT_FOR_GO.format(go=go) + "echo 'CUDA error: uncorrectable ECC error encountered' >&2\nexit 1\n")
    assert c.wait_running(job1)["NodeList"] == "gpu-a"
    with c.scenario("gpu-a").open("a") as scenario:  # the DBE happens during the job
        scenario.write("gpu.2.ecc.volatile.uncorrected = 1\ngpu.2.ecc.aggregate.uncorrected = 1\n")
    go.touch()
    c.cluster.wait_job(job1, states=("FAILED",), timeout=60)
    reason = c.wait_reason("gpu-a")
    assert reason.startswith(f"gpu-healthcheck: gpu2 pci={pci(2)} sn={serial(2)} "
                             f"ecc.volatile_uncorrected=1 epilog job={job1}")
    output = c.cluster.job_output(job1)
    # the report runs as her: root's 0700 state_dir, and the prolog's baseline in it, are not
    # hers to read, so no "(1 new during job)" (the epilog's, as root, has it; docs/trust.md)
    assert (f"gpu-healthcheck: gpu-a GPU 2 ({pci(2)}, SN {serial(2)}): 1 volatile uncorrected "
            f"ECC errors, limit 0; this node will be drained\n") in output
    assert output.count("gpu-healthcheck:") == 1, output  # one line per faulty GPU

    job2 = c.cluster.sbatch(["--gres=gpu:2"], "echo ran on $SLURMD_NODENAME\n")
    info = c.cluster.wait_job(job2, timeout=240)  # the requeue waits for cred_expire
    assert info["NodeList"] == "gpu-c" and int(info.get("Restarts", "0")) == 1
    prolog_reason = f"gpu-healthcheck: gpu5 pci={pci(5)} sn={serial(5)} ecc.volatile_uncorrected=4 prolog job={job2}"
    assert c.reason("gpu-b") == prolog_reason
    assert c.cluster.job_info(job2).get("AdminComment") == prolog_reason
    assert c.cluster.job_output(job2) == (
        "gpu-healthcheck: this job was requeued once; the node it was first given failed its "
        f"check: {prolog_reason[len('gpu-healthcheck: '):]}\nran on gpu-c\n")

    job3 = c.cluster.sbatch(["--gres=gpu:1"], "echo fine\n")
    c.cluster.wait_job(job3, timeout=60)
    assert c.cluster.job_output(job3) == "fine\n"  # success: not a word from us
    sinfo = c.cluster.sinfo_reasons()
    assert f"epilog job={job1}" in sinfo and f"prolog job={job2}" in sinfo


def test_full_level_runs_on_exactly_the_jobs_gpus_and_is_recorded(plugin_only):
    c = plugin_only
    c.scenario("gpu-c").write_text(SMALL)
    reports = c.wd / "reports"
    reports.mkdir()
    json_exec = c.cluster.write_wrapper(c.wd / "exec-json", "/bin/sh", args=(
        "-c", f'exec {c.exec_wrapper} "$@" --json > {reports}/$SLURM_JOB_ID$1.json', "sh"))
    c.write_plugstack(f"exec={json_exec} run=prolog,epilog,report")
    job = c.cluster.sbatch(["--gres=gpu:3", "-w", "gpu-c", "--gpu-healthcheck=full"],
                           "echo gpus=$SLURM_JOB_GPUS\n")
    c.cluster.wait_job(job, timeout=120)
    gpus = _job_gpus(c, job)
    report = json.loads((reports / f"{job}--prolog.json").read_text())
    assert report["level"] == "full" and report["verdict"] == "pass"
    assert sorted(p["gpu"] for p in report["probes"]) == sorted(gpus)
    assert all(p["bytes_tested"] > 256 * 2**20 for p in report["probes"])
    [prolog] = [r for r in _history(c, "gpu-c", job) if r["mode"] == "prolog"]
    assert prolog["level"] == "full" and sorted(p["gpu"] for p in prolog["probes"]) == sorted(gpus)
    table = c.check("gpu-c", "--history", "5").stdout
    assert re.search(rf"prolog \(full\)\s+{job}\s+pass", table), table

    quick = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-c"], "echo done\n")
    c.cluster.wait_job(quick, timeout=60)
    assert json.loads((reports / f"{quick}--prolog.json").read_text())["level"] == "quick"


def test_disabled_full_is_refused_and_a_malformed_argument_is_logged_by_name(open_wd, fakegpu, job_user):
    c = _cluster(open_wd, fakegpu, job_user, scripts=False,
                 plugstack="allow_full=no levle=full run=prolog,epilog,report")
    with c.cluster:
        log = _slurmd_log(c, "gpu-a")
        assert "gpu_healthcheck: plugstack.conf argument 'levle=full' ignored: unknown argument" in log
        r = c.cluster.run(["sbatch", "--gres=gpu:1", "--gpu-healthcheck=full", "--wrap", "true"],
                          as_job_user=True)
        assert r.returncode != 0
        assert "--gpu-healthcheck=full is disabled on this cluster (allow_full=no" in r.stderr
        r = c.cluster.run(["sbatch", "--gres=gpu:1", "--gpu-healthcheck=fast", "--wrap", "true"],
                          as_job_user=True)
        assert r.returncode != 0 and "--gpu-healthcheck takes quick or full, not 'fast'" in r.stderr
        job = c.cluster.sbatch(["--gres=gpu:1", "--gpu-healthcheck=quick"], "echo ok\n")
        c.cluster.wait_job(job, timeout=60)
        assert c.cluster.job_output(job) == "ok\n"


def test_the_plugins_own_failures_are_logged_and_the_job_goes_on(plugin_only):
    """exec= missing, crashing, refusing its arguments or past its deadline: slurmd's log says
    so, no job fails, no node is drained."""
    c = plugin_only
    crash = c.wd / "crash"
    crash.write_text("#!/bin/sh\nkill -SEGV $$\n")
    hang = c.wd / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 300\n")
    usage = c.wd / "usage"  # a gpu-healthcheck that does not know the plugin's arguments
    usage.write_text("#!/bin/sh\nexit 3\n")
    for path in (crash, hang, usage):
        path.chmod(0o755)
    cases = [(f"exec={usage}", f"prolog: {usage} refused its command line (exit 3); job goes on"),
             ("exec=/nonexistent/gpu-healthcheck", "cannot run /nonexistent/gpu-healthcheck: No such file"),
             (f"exec={crash}", f"{crash} killed by signal 11; job goes on"),
             (f"exec={hang} timeout=2", f"prolog: {hang} passed its deadline of 2 s")]
    for args, logged in cases:
        c.write_plugstack(f"{args} run=prolog,epilog,report")
        job = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-a"], "echo ran; exit 4\n")
        c.cluster.wait_job(job, states=("FAILED",), timeout=90)
        assert c.cluster.job_output(job) == "ran\n"
        assert c.cluster.job_info(job)["ExitCode"] == "4:0"  # the job's own status, not ours
        _wait_log(c, "gpu-a", logged)
        assert not c.drained("gpu-a"), c.reason("gpu-a")


def test_past_its_deadline_gpu_healthcheck_is_stopped_cleanly_and_the_job_runs(plugin_only):
    """The CUDA probe hangs past the plugin's deadline: gpu-healthcheck gets SIGTERM, kills its
    probe children, leaves a TERMINATED history line for the job, and the job starts; nothing
    is drained."""
    c = plugin_only
    c.scenario("gpu-a").write_text(HEALTHY + "gpu.*.cuda.hang_s = 60\n")
    # a gpu-healthcheck that does not shrink to the deadline it is passed (an older one)
    deaf = c.cluster.write_wrapper(c.wd / "exec-deaf", "/usr/bin/env", args=(
        "-u", "GPU_HEALTHCHECK_DEADLINE_S", str(c.exec_wrapper)))
    c.write_plugstack(f"exec={deaf} timeout=3 run=prolog,epilog,report")
    job = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-a"], "echo ran\n")
    c.cluster.wait_job(job, timeout=90)
    assert c.cluster.job_output(job) == "ran\n"
    log = _wait_log(c, "gpu-a", "epilog: ")
    assert f"gpu_healthcheck: prolog: {deaf} passed its deadline of 3 s; sending SIGTERM" in log
    assert "prolog: gpu-healthcheck: prolog: terminated by SIGTERM" in log
    [prolog] = [r for r in _history(c, "gpu-a", job) if r["mode"] == "prolog"]
    assert prolog["terminated"] is True and prolog["action"]["taken"] == "none"
    assert not c.drained("gpu-a")


def test_ownership_and_budget_hold_through_the_plugin_epilog(plugin_only):
    c = plugin_only
    for node in ("gpu-a", "gpu-b", "gpu-c"):
        c.write_config(node, max_fraction=0.34)  # three nodes: one may be drained
    c.scenario("gpu-c").write_text(HEALTHY + "gpu.0.ecc.volatile.uncorrected = 1\n")
    assert c.check("gpu-c", "--node", "--act").returncode == 2  # ours: the budget is spent
    go = c.wd / "go"
    jobs = {node: c.cluster.sbatch(["--gres=gpu:1", "-w", node], WAIT_FOR_GO.format(go=go))
            for node in ("gpu-a", "gpu-b")}
    for job in jobs.values():
        c.wait_running(job)
    c.cluster.drain("gpu-b", "admin: replacing a fan")
    for node in ("gpu-a", "gpu-b"):
        c.scenario(node).write_text(HEALTHY + "gpu.*.ecc.volatile.uncorrected = 2\n")
    go.touch()
    for node, job in jobs.items():
        c.cluster.wait_job(job, timeout=60)
        _wait_log(c, node, f"epilog on {node}: fail")
    assert c.reason("gpu-b") == "admin: replacing a fan"
    assert not c.drained("gpu-a")
    [epilog] = [r for r in _history(c, "gpu-a", jobs["gpu-a"]) if r["mode"] == "epilog"]
    assert epilog["action"]["refused"] is True
    [epilog] = [r for r in _history(c, "gpu-b", jobs["gpu-b"]) if r["mode"] == "epilog"]
    assert epilog["action"]["taken"] == "none" and "admin: replacing a fan" in json.dumps(epilog)


def test_scripts_keep_the_prolog_and_the_plugin_adds_the_option_and_the_report(open_wd, fakegpu, job_user):
    """run=report beside Prolog=/Epilog=: the option reaches our prolog script through the spank
    job control environment, and a failed task still names its GPU."""
    c = _cluster(open_wd, fakegpu, job_user, scripts=True, plugstack="run=report")
    with c.cluster:
        assert "Prolog=" in c.cluster.conf_path.read_text()
        c.scenario("gpu-c").write_text(SMALL)
        config = c.wd / "config" / "gpu-c.toml"  # the script honours what job_levels allows
        config.write_text('job_levels = ["quick", "full"]\n' + config.read_text())
        job = c.cluster.sbatch(["--gres=gpu:2", "-w", "gpu-c", "--gpu-healthcheck=full"],
                               "echo gpus=$SLURM_JOB_GPUS\n")
        c.cluster.wait_job(job, timeout=120)
        assert re.fullmatch(r"gpus=\d,\d\n", c.cluster.job_output(job))
        [prolog] = [r for r in _history(c, "gpu-c", job) if r["mode"] == "prolog"]  # the script's
        assert prolog["level"] == "full"
        assert sorted(p["gpu"] for p in prolog["probes"]) == sorted(_job_gpus(c, job))
        assert "gpu_healthcheck: prolog" not in _slurmd_log(c, "gpu-c")

        go = c.wd / "go"
        job = c.cluster.sbatch(["--gres=gpu:2", "-w", "gpu-a"], WAIT_FOR_GO.format(go=go) + "exit 1\n")
        c.wait_running(job)
        [first, _] = _job_gpus(c, job)
        with c.scenario("gpu-a").open("a") as scenario:
            scenario.write(f"gpu.{first}.ecc.volatile.uncorrected = 3\n")
        go.touch()
        c.cluster.wait_job(job, states=("FAILED",), timeout=60)
        assert (f"gpu-healthcheck: gpu-a GPU {first} ({pci(first)}, SN {serial(first)}): 3 volatile "
                f"uncorrected ECC errors, limit 0; this node will be drained\n"
                ) in c.cluster.job_output(job)
        assert c.wait_reason("gpu-a").startswith(f"gpu-healthcheck: gpu{first} ")


def _site_for_nobody(root: Path, fakegpu: Path) -> Dict[str, str]:
    """What an unprivileged user needs to run gpu-healthcheck: the system python3, pynvml and
    this checkout's package copied where every user can read them (the test's python may live
    under /root), and the fake GPU libraries."""
    import pynvml

    site = root / "site"
    site.mkdir()
    shutil.copy(pynvml.__file__, site / "pynvml.py")
    shutil.copytree(ROOT / "healthcheck", site / "healthcheck",
                    ignore=shutil.ignore_patterns("__pycache__"))
    libs = root / "libs"
    shutil.copytree(fakegpu, libs)
    return {"PYTHONPATH": str(site), "LD_LIBRARY_PATH": str(libs)}


def _can_become_nobody() -> None:
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, setpriv and /usr/bin/python3 to become another user")


@pytest.fixture
def open_tmp():
    """A temporary folder every user can reach (pytest's own is 0700 above the test's)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="hc-spank-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_job_report_runs_without_root_and_acts_on_nothing(open_tmp, fakegpu):
    """--job-report as an unprivileged user, with the job's environment only: it reads NVML, names
    the faulty GPU of the job and touches no state (a user cannot write the state dir anyway)."""
    _can_become_nobody()
    tmp_path = open_tmp
    site = _site_for_nobody(tmp_path, fakegpu)
    scenario = tmp_path / "scenario"
    scenario.write_text(HEALTHY + "gpu.6.ecc.volatile.uncorrected = 2\ngpu.1.remap.failure = 1\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{state}"\nnode_name = "gpu-x"\n')
    (tmp_path / "gres.conf").write_text("AutoDetect=off\nNodeName=gpu-x Name=gpu File=/dev/nvidia[0-7]\n")
    for p in (scenario, config, tmp_path / "gres.conf"):
        p.chmod(0o644)
    env = {"PATH": "/usr/bin:/bin", **site, "SLURM_CONF": str(tmp_path / "slurm.conf"),
           "FAKEGPU_SCENARIO": str(scenario), "GPU_HEALTHCHECK_CONFIG": str(config),
           "SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "6,7", "GPU_HEALTHCHECK_REPORT": "task-exit"}
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/usr/bin/python3", "-m", "healthcheck.cli", "--job-report"],
                          env=env, capture_output=True, text=True, cwd="/", timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == (f"gpu-healthcheck: gpu-x GPU 6 ({pci(6)}, SN {serial(6)}): 2 volatile "
                           f"uncorrected ECC errors, limit 0; this node will be drained\n")
    assert os.listdir(state) == []
    env["SLURM_JOB_GPUS"] = "2,3"
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "/usr/bin/python3", "-m", "healthcheck.cli",
                           "--job-report"], env=env, capture_output=True, text=True, cwd="/", timeout=60)
    assert (done.returncode, done.stdout) == (0, "gpu-healthcheck: gpu-x: the job's GPUs (2, 3) look "
                                                 "healthy (ECC, row remapping, retired pages, lost "
                                                 "GPUs read through NVML)\n"), done.stderr


def test_the_report_runs_as_the_jobs_user_in_a_real_job(open_tmp, fakegpu):
    """A job of user nobody (sbatch --uid, Slurm before 23.02) dies after a DBE on its GPU: the
    report runs as nobody, with the job's environment, into the job's own output."""
    _can_become_nobody()
    require_slurm()
    c = GpuCluster(open_tmp / "c", fakegpu, scripts=False)
    site = _site_for_nobody(open_tmp, fakegpu)
    uids = open_tmp / "uids"
    uids.mkdir(mode=0o1777)
    uids.chmod(0o1777)
    as_user = open_tmp / "exec-as-user"
    as_user.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --job-report ]; then\n'
        f'    id -u > {uids}/report-$SLURM_JOB_ID\n'
        f'    PYTHONPATH={site["PYTHONPATH"]} LD_LIBRARY_PATH={site["LD_LIBRARY_PATH"]} '
        f'FAKEGPU_SCENARIO={c.wd}/scenarios/$SLURMD_NODENAME.scenario '
        f'GPU_HEALTHCHECK_CONFIG={c.wd}/config/$SLURMD_NODENAME.toml '
        'exec /usr/bin/python3 -m healthcheck.cli "$@"\n'
        "fi\n"
        f'exec {c.exec_wrapper} "$@"\n')
    as_user.chmod(0o755)
    c.write_plugstack(f"exec={as_user} run=prolog,epilog,report")
    with c.cluster:
        if "--uid" not in c.cluster.run(["sbatch", "--help"]).stdout:
            pytest.skip("this sbatch has no --uid (removed in Slurm 23.02)")
        go = open_tmp / "go"
        job = c.cluster.sbatch(["--uid=65534", "--gid=65534", "--gres=gpu:1", "-w", "gpu-a"],
                               "echo started uid=$(id -u) gpus=$SLURM_JOB_GPUS\n"
                               f"while [ ! -e {go} ]; do sleep 0.1; done\nexit 1\n")
        c.cluster.wait_job(job, states=("RUNNING",), timeout=60)
        from tests.lib.slurmcluster import _wait_until

        _wait_until(lambda: "started" in c.cluster.job_output(job), 60, what="the job's script")
        [gpu] = _job_gpus(c, job)
        with c.scenario("gpu-a").open("a") as scenario:
            scenario.write(f"gpu.{gpu}.ecc.volatile.uncorrected = 2\n")
        go.touch()
        c.cluster.wait_job(job, states=("FAILED",), timeout=60)
        output = c.cluster.job_output(job)
        assert output.startswith("started uid=65534 "), output
        assert (f"gpu-healthcheck: gpu-a GPU {gpu} ({pci(gpu)}, SN {serial(gpu)}): 2 volatile "
                f"uncorrected ECC errors") in output
        assert (uids / f"report-{job}").read_text().strip() == "65534"
        c.wait_reason("gpu-a")


def test_srun_and_salloc_offer_the_option_and_a_failed_srun_step_names_its_gpu(plugin_only):
    """An srun step's task gets the report too: through the step's stderr pipe, slurmstepd and
    srun, into the batch job's output; the batch script, which succeeds, adds nothing."""
    c = plugin_only
    for command in ("srun", "salloc"):
        assert "--gpu-healthcheck=quick|full" in c.cluster.run([command, "--help"], as_job_user=True).stdout, command
    go = c.wd / "go"
    job = c.cluster.sbatch(["--gres=gpu:1", "-w", "gpu-a"], WAIT_FOR_GO.format(go=go)
                           + "srun --gres=gpu:1 sh -c 'exit 5'\necho srun exited $?\n")
    c.wait_running(job)
    [gpu] = _job_gpus(c, job)
    with c.scenario("gpu-a").open("a") as scenario:
        scenario.write(f"gpu.{gpu}.ecc.volatile.uncorrected = 2\n")
    go.touch()
    c.cluster.wait_job(job, timeout=60)
    output = c.cluster.job_output(job)
    assert (f"gpu-healthcheck: gpu-a GPU {gpu} ({pci(gpu)}, SN {serial(gpu)}): 2 volatile "
            f"uncorrected ECC errors") in output, output
    assert output.endswith("srun exited 5\n") and output.count("gpu-healthcheck:") == 1, output
