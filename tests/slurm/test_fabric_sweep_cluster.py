"""`gpu-healthcheck --internode-sweep` against a real Slurm test cluster of 8 slurmd: the pair jobs
are real exclusive sbatch jobs whose srun steps run the fake nccl-tests and ib_write_bw
(tests/fakegpu/fabric.py) on the jobs' own nodes; the scenario (FAKEGPU_FABRIC) says which node
is slow, which pair fails once, which node hangs.  The sweep runs as a submit host would run it:
a child process with the cluster's Slurm clients on PATH."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

from tests.lib.fakenode import ROOT
from tests.lib.gpucluster import GpuCluster, require_slurm
from tests.lib.localuser import as_user, local_user, open_dir
from tests.lib.slurmcluster import _wait_until

pytestmark = pytest.mark.slurm

NODES = [f"gpu-{c}" for c in "abcdefgh"]


def fabric_cluster(tmp_path: Path, fakegpu: Path, scenario: str, extra: str = "",
                   gres_types: Optional[Dict[str, str]] = None) -> GpuCluster:
    c = GpuCluster(tmp_path, fakegpu, nodes=NODES, scripts=False, weights={}, gres_types=gres_types or {})
    # time_limit_s: a collective on the fakes takes about a second; 30 s leaves room for a loaded
    # machine running the three Slurm versions of the matrix at once (at 15 s a partner job of
    # a healthy node was cut short there, and made it unknown instead of transient).
    (tmp_path / "fabric.scenario").write_text(scenario)
    (tmp_path / "sweep.toml").write_text(
        f'state_dir = "{tmp_path / "sweep-state"}"\nscontrol = "{c.scontrol}"\njournal = false\n'
        f'metrics_file = "{tmp_path / "metrics" / "gpu_healthcheck.prom"}"\n'
        f'[drain]\nmax_fraction = 0.5\n'
        f'[internode]\nbusbw_floor_gbps = 100.0\ntasks_per_node = 2\ntime_limit_s = 30\n'
        f'collective_args = ["-b", "256M", "-e", "1G", "-f", "2", "-g", "1"]\n' + extra)
    (tmp_path / "metrics").mkdir()
    return c


def sweep_env(c: GpuCluster, tmp_path: Path, config: str = "sweep.toml") -> Dict[str, str]:
    """A submit host's environment: the cluster's Slurm clients, the fakes first on PATH (the
    jobs inherit it, as sbatch's --export=ALL passes it on), the fabric scenario."""
    return dict(c.cluster.env, FAKEGPU_FABRIC=str(tmp_path / "fabric.scenario"),
                PATH=f"{c.fake}:{c.cluster.env['PATH']}", GPU_HEALTHCHECK_CONFIG=str(tmp_path / config),
                PYTHONPATH=str(ROOT))  # the Debian 13 root's venv has no install of this checkout


def sweep(c: GpuCluster, tmp_path: Path, *args: str, timeout: float = 240,
          config: str = "sweep.toml", flag: str = "--internode-sweep") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "healthcheck.cli", flag, *args],
                          env=sweep_env(c, tmp_path, config), capture_output=True, text=True,
                          timeout=timeout, cwd=str(tmp_path))


def outcomes(done: subprocess.CompletedProcess) -> Dict[str, Dict]:
    return {n["node"]: n for n in json.loads(done.stdout)["nodes"]}


class HangingSweep:
    """One `--internode-sweep --act --json` in the background on a cluster where gpu-g's collective
    hangs: Slurm ends that node's jobs at their time limit (a minute, checked every 30 s), so the
    sweep lasts about 90 s.  The two tests that need a hanging sweep share it: the second sweep
    refused while it runs (the module's first test, so it runs while the sweep does, however
    slow the host), and its outcome (the module's last, which waits for it to end).  It starts
    with the module, and the other tests run on their own clusters meanwhile: its wait is spent
    beside them, not after them."""

    def __init__(self, c: GpuCluster, tmp_path: Path) -> None:
        self.c, self.tmp_path = c, tmp_path
        self.proc = subprocess.Popen([sys.executable, "-m", "healthcheck.cli", "--internode-sweep", "--act", "--json"],
                                     env=sweep_env(c, tmp_path), cwd=str(tmp_path),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._done: Optional[subprocess.CompletedProcess] = None

    def done(self) -> subprocess.CompletedProcess:
        if self._done is None:
            try:
                out, err = self.proc.communicate(timeout=240)
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.communicate()
            self._done = subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)
        return self._done


@pytest.fixture(scope="module")
def hanging_sweep(tmp_path_factory: pytest.TempPathFactory, fakegpu: Path) -> Iterator[HangingSweep]:
    require_slurm()
    tmp_path = tmp_path_factory.mktemp("hanging")
    c = fabric_cluster(tmp_path, fakegpu, "node.gpu-g.nccl.hang = 1\n")
    with c.cluster:
        run = HangingSweep(c, tmp_path)
        try:
            yield run
        finally:
            run.done()


@pytest.fixture(scope="module", autouse=True)
def _hanging_sweep_starts_with_the_module(request: pytest.FixtureRequest) -> None:
    """Where a test of the hanging sweep is selected, the sweep starts before the module's first
    test; otherwise not at all."""
    if any("hanging_sweep" in getattr(item, "fixturenames", ()) and item.module is request.module
           for item in request.session.items):
        request.getfixturevalue("hanging_sweep")


def test_fabric_sweep_second_sweep_refuses_with_the_first_ones_id(hanging_sweep: HangingSweep) -> None:
    c, tmp_path, first = hanging_sweep.c, hanging_sweep.tmp_path, hanging_sweep.proc
    assert first.poll() is None, "the hanging sweep ended before this test, which needs it running"
    lock = tmp_path / "sweep-state" / "fabric-sweep.lock"
    _wait_until(lambda: lock.exists() and lock.read_text().strip(), 60, what="the first sweep's lock")
    first_id = lock.read_text().strip()
    _wait_until(lambda: c.cluster.run(["squeue", "-h", "-n", "gpu-healthcheck-fabric"]).stdout.strip(),
                60, what="the first sweep's jobs")
    second = sweep(c, tmp_path, "--act")
    assert second.returncode == 3
    assert f"another internode sweep is running: {first_id}" in second.stderr, second.stderr
    # from another submit host (its own state_dir, no lock of ours): the jobs name it
    toml = tmp_path / "sweep.toml"
    (tmp_path / "other.toml").write_text(toml.read_text().replace("sweep-state", "other-state"))
    third = sweep(c, tmp_path, timeout=60, config="other.toml")
    assert third.returncode == 3 and f"another internode sweep is running: {first_id} (its job " in third.stderr
    # the first sweep's own outcome (exit 2, gpu-g drained): the module's last test


def test_fabric_sweep_finds_and_drains_the_slow_node_and_no_healthy_one(tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    c = fabric_cluster(tmp_path, fakegpu, "node.gpu-c.busbw_gbps = 41.2\n")
    with c.cluster:
        done = sweep(c, tmp_path, "--act", "--json")
        assert done.returncode == 2, done.stdout + done.stderr
        nodes = outcomes(done)
        assert [n for n, v in nodes.items() if v["outcome"] == "bad"] == ["gpu-c"]
        assert nodes["gpu-c"]["action"] == "applied" and nodes["gpu-d"]["outcome"] == "transient", done.stdout
        reason = c.reason("gpu-c")
        assert reason.startswith("gpu-healthcheck: fabric busbw=41.2<100 partners=gpu-"), reason
        assert reason.endswith(" all_reduce_perf sweep")
        assert [n for n in NODES if c.drained(n)] == ["gpu-c"]
        doc = json.loads(done.stdout)
        assert doc["rounds"] == 3 and doc["median_gbps"] == 380.0
        prom = (tmp_path / "metrics" / "gpu_healthcheck_fabric.prom").read_text()
        assert 'gpu_healthcheck_fabric_busbw_gbps{node="gpu-c",partner="gpu-d"} 41.2' in prom
        assert 'gpu_healthcheck_fabric_sweep_nodes{outcome="bad"} 1' in prom
        # per node, for the mixin's node-health join: each judged node once, with its outcome
        per_node = re.findall(r'^gpu_healthcheck_fabric_sweep_node_outcome\{node="([^"]+)",outcome="([^"]+)"\} 1$', prom, re.M)
        assert dict(per_node) == {n: v["outcome"] for n, v in nodes.items()} and len(per_node) == len(nodes)
        assert ("gpu-c", "bad") in per_node and ("gpu-d", "transient") in per_node
        history = (tmp_path / "sweep-state" / "history.jsonl").read_text().splitlines()
        assert json.loads(history[-1])["mode"] == "fabric-sweep"
        assert json.loads((tmp_path / "sweep-state" / "fabric-unknown.json").read_text())["nodes"] == []
        cluster = c.check("gpu-a", "--cluster", "--json")
        [row] = [r for r in json.loads(cluster.stdout) if r["node"] == "gpu-c"]
        assert row["check"] == "fabric" and row["fabric"].startswith("busbw=41.2<100 partners=gpu-")


def test_fabric_sweep_over_two_gpu_models_judges_each_by_its_own_median(tmp_path: Path, fakegpu: Path) -> None:
    """6 H100 nodes at 380 GB/s and 2 A100 nodes at 200 (slurm.conf Gres=gpu:TYPE:8), floors per
    model as docs/network.md advises: every run meets its model's floor, so no node is drained
    (the round's single median of 380 once drained both A100 nodes, busbw=200.0<0.7*median=380.0)."""
    require_slurm()
    a100s = ("gpu-c", "gpu-h")  # apart by name: the sweep pairs them by model
    c = fabric_cluster(tmp_path, fakegpu, "".join(f"node.{n}.busbw_gbps = 200\n" for n in a100s),
                       extra='floors = ["h100:busbw_gbps=360", "a100:busbw_gbps=150"]\n',
                       gres_types={n: "a100" if n in a100s else "h100" for n in NODES})
    with c.cluster:
        done = sweep(c, tmp_path, "--act", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        nodes = outcomes(done)
        assert {n for n, v in nodes.items() if v["outcome"] == "pass"} == set(NODES), done.stdout
        pairs = sorted(sorted(j["nodes"]) for j in json.loads(done.stdout)["jobs_run"])
        assert ["gpu-c", "gpu-h"] in pairs, pairs  # the A100 nodes' own pair
        assert not [n for n in NODES if c.drained(n)], [c.reason(n) for n in NODES]


def test_fabric_sweep_pair_that_fails_once_drains_nothing(tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    c = fabric_cluster(tmp_path, fakegpu, "pair.gpu-e,gpu-f.fail_once = 1\n",
                       extra='rails = ["mlx5_0", "mlx5_1"]\nrail_floor_gbps = 360.0\n')
    with c.cluster:
        done = sweep(c, tmp_path, "--act", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        # every job also ran ib_write_bw --use_cuda on each rail, client on its first node
        jobs = json.loads(done.stdout)["jobs_run"]
        assert all([(r["node"], r["hca"]) for r in j["rails"]] ==
                   [(j["nodes"][0], "mlx5_0"), (j["nodes"][0], "mlx5_1")] for j in jobs), json.dumps(jobs)
        # a rail run a loaded machine cut short says why; every other one measured 392 Gb/s
        assert all(r["gbps"] == 392.0 for j in jobs for r in j["rails"] if not r.get("problem")), json.dumps(jobs)
        nodes = outcomes(done)
        assert {n for n, v in nodes.items() if v["outcome"] == "transient"} == {"gpu-e", "gpu-f"}, done.stdout
        assert nodes["gpu-e"]["why"].startswith("wrong=1; passed with ")
        assert not [n for n in NODES if c.drained(n)]
        assert (tmp_path / "fabric.scenario.state").read_text() == "gpu-e,gpu-f\n"  # it did fail once


def test_fabric_sweep_without_act_or_with_report_only_drains_nothing(tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    c = fabric_cluster(tmp_path, fakegpu, "node.gpu-b.busbw_gbps = 20\n")
    with c.cluster:
        done = sweep(c, tmp_path, "--nodes", "gpu-a,gpu-b,gpu-c,gpu-d,gpu-e,gpu-f")
        assert done.returncode == 2, done.stdout + done.stderr
        table = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:] if line.startswith("gpu-")}
        assert table["gpu-b"][1:3] == ["bad", "20.0"] and table["gpu-b"][4] == "report_only", done.stdout
        assert table["gpu-a"][1] == "transient" and done.stdout.splitlines()[0].split()[:2] == ["NODE", "OUTCOME"]
        assert not [n for n in NODES if c.drained(n)]
        toml = tmp_path / "sweep.toml"
        # and by the old names, --fabric-sweep and [fabric]: the same sweep, its JSON on stdout
        # whole, a note for each old name on stderr
        toml.write_text(toml.read_text().replace("[drain]\n", "[drain]\nreport_only = true\n")
                        .replace("[internode]\n", "[fabric]\n"))
        again = sweep(c, tmp_path, "--act", "--json", "--nodes", "gpu-a,gpu-b,gpu-c,gpu-d,gpu-e,gpu-f",
                      flag="--fabric-sweep")
        assert again.returncode == 2 and outcomes(again)["gpu-b"]["action"] == "report_only"
        assert not [n for n in NODES if c.drained(n)]
        notes = [line for line in again.stderr.splitlines() if "deprecated" in line]
        assert notes[0] == "gpu-healthcheck: --fabric-sweep is deprecated, use --internode-sweep (the same command)"
        assert f"config warning: {toml}: fabric.busbw_floor_gbps is deprecated, read as internode.busbw_floor_gbps" \
            in notes[1] and len(notes) == 5, again.stderr


def test_fabric_sweep_admins_drain_is_kept_and_busy_nodes_are_named(tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    c = fabric_cluster(tmp_path, fakegpu, "node.gpu-h.nccl.error = NET/IB : Got completion with error 12\n")
    with c.cluster:
        c.cluster.drain("gpu-a", "bad fan, ticket 4711")
        done = sweep(c, tmp_path, "--act", "--json", "--nodes", ",".join(NODES + ["gpu-z"]))
        assert done.returncode == 2, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert doc["not_swept"] == {"gpu-a": "not idle (IDLE+DRAIN)", "gpu-z": "not a node scontrol knows"}
        nodes = outcomes(done)
        assert nodes["gpu-h"]["outcome"] == "bad" and "Got completion with error 12" in nodes["gpu-h"]["why"]
        assert c.reason("gpu-a") == "bad fan, ticket 4711"
        assert c.reason("gpu-h").startswith("gpu-healthcheck: fabric nccl_warn=NET/IB_:_Got_completion")


def test_fabric_sweep_bad_partition_and_missing_program_drain_nothing(tmp_path: Path, fakegpu: Path) -> None:
    require_slurm()
    c = fabric_cluster(tmp_path, fakegpu, "node.gpu-b.busbw_gbps = 20\n")
    with c.cluster:
        done = sweep(c, tmp_path, "--act", "--partition", "nosuch")
        assert done.returncode == 3, done.stdout + done.stderr
        assert "0 idle candidate node(s)" in done.stderr
        toml = tmp_path / "sweep.toml"
        toml.write_text(toml.read_text() + 'reservation = "nosuch"\n')
        done = sweep(c, tmp_path, "--act")
        assert done.returncode == 3 and "nosuch" in done.stderr, done.stderr
        toml.write_text(toml.read_text().replace('reservation = "nosuch"\n', f'nccl_tests = "{tmp_path}/nowhere"\n'))
        done = sweep(c, tmp_path, "--act", "--json")
        assert done.returncode == 3, done.stdout + done.stderr
        assert f"{tmp_path}/nowhere/all_reduce_perf is not installed on gpu-" in done.stderr
        assert json.loads(done.stdout)["error"].startswith(f"{tmp_path}/nowhere/all_reduce_perf is not installed")
        assert not [n for n in NODES if c.drained(n)]


def test_fabric_sweep_pair_that_never_crossed_the_network_is_a_setup_problem_never_a_pass(
        tmp_path: Path, fakegpu: Path) -> None:
    """nccl-tests without MPI (the fake's default.nccl.no_mpi): each srun task runs alone on its
    own node, -g 1 reads 0.00 GB/s and a floor-less sweep passed every pair (issue 36, case 6)."""
    require_slurm()
    c = fabric_cluster(tmp_path, fakegpu, "default.nccl.no_mpi = 1\n")
    toml = tmp_path / "sweep.toml"
    toml.write_text(toml.read_text().replace("busbw_floor_gbps = 100.0\n", "busbw_floor_gbps = 0.0\n"))
    with c.cluster:
        done = sweep(c, tmp_path, "--act", "--json")
        assert done.returncode == 3, done.stdout + done.stderr
        error = json.loads(done.stdout)["error"]
        assert error.startswith("the collective did not span gpu-"), error
        assert "each task ran as its own single-node job" in error and "srun --mpi=pmix" in error
        assert not [n for n in NODES if c.drained(n)]


@pytest.fixture
def open_path() -> Iterator[Path]:
    """A work folder an ordinary user can reach (pytest's tmp is 0700 above the test's folder):
    her sbatch reads the cluster's slurm.conf and talks to its munge socket in there."""
    with open_dir("hc36-", 0o711) as path:
        yield path


def test_fabric_sweep_a_users_job_of_the_sweeps_name_does_not_stop_it(open_path: Path, fakegpu: Path,
                                                                       isolation) -> None:
    """Any user may name a job gpu-healthcheck-fabric and write `gpu-healthcheck sweep=...` in its
    comment; her held job stopped every sweep (exit 3, "another internode sweep is running").  A job
    is a sweep's only when slurmctld says root submitted it (test_fabric_sweep_second_sweep_...:
    root's own sweep still stops a second one)."""
    require_slurm()
    c = fabric_cluster(open_path, fakegpu, "node.gpu-c.busbw_gbps = 41.2\n")
    with c.cluster, local_user("hc36") as user:
        held = as_user(user, "sbatch --parsable --hold -J gpu-healthcheck-fabric -N1 --output=/dev/null "
                             "--comment='gpu-healthcheck sweep=20261204T000000-x-1' --wrap true",
                       env=c.cluster.env, cwd="/tmp").stdout.strip().split(";")[0]
        assert c.cluster.run(["squeue", "-h", "-j", held, "-o", "%U|%T|%j"]).stdout.strip() == \
            f"{user.pw_uid}|PENDING|gpu-healthcheck-fabric"
        done = sweep(c, open_path, "--act", "--json")
        assert done.returncode == 2, done.stdout + done.stderr
        assert [n for n, v in outcomes(done).items() if v["outcome"] == "bad"] == ["gpu-c"]
        assert [n for n in NODES if c.drained(n)] == ["gpu-c"]


def test_fabric_sweep_hanging_node_is_ended_by_its_time_limit_and_named(hanging_sweep: HangingSweep) -> None:
    c, done = hanging_sweep.c, hanging_sweep.done()
    assert done.returncode == 2, done.stdout + done.stderr
    nodes = outcomes(done)
    assert [n for n, v in nodes.items() if v["outcome"] == "bad"] == ["gpu-g"]
    assert nodes["gpu-g"]["why"].startswith("hang")
    assert c.reason("gpu-g").startswith("gpu-healthcheck: fabric nccl=hang partners=gpu-")
    assert [n for n in NODES if c.drained(n)] == ["gpu-g"]
    jobs = json.loads(done.stdout)["jobs_run"]
    assert all(j["problem"].startswith("hang") for j in jobs if "gpu-g" in j["nodes"])
