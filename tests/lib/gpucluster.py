"""A Slurm cluster of simulated 8-GPU nodes running the real prolog/ and epilog/ scripts.

Shared by tests/slurm/test_slurm.py and the demo (tests/lib/demo.py).  Each node has its own fake-GPU
scenario, config, state directory and kernel log under the work directory; slurmd runs a
wrapper that points the real script at them (slurmd gives a Prolog a fresh environment).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from tests.lib.fakenode import ROOT, make_sysfs
from tests.lib.localuser import LocalUser
from tests.lib.slurmcluster import SlurmCluster, slurm_missing_reason

NODES = ["gpu-a", "gpu-b", "gpu-c"]
HEALTHY = "gpus = 8\n"
# The fake-reboot hook (tests/lib/fake-reboot runs it with the node's name while the node is
# "off"): the GPUs' state after the power cycle replaces the scenario when the test gave one,
# and the driver's load prints its init line for each GPU it finds (not a lost one), which
# ends the Xids logged before it (read.kernlog REINIT), as a fresh kernel log would.  While
# scenarios/NODE.hold-boot exists the node stays "off" (a slow boot, or one that never comes
# back: slurmctld's ResumeTimeout), up to 10 minutes.
AFTER_BOOT = """#!/bin/sh
set -eu
node=$1 wd={wd}
scenario=$wd/scenarios/$node.scenario
deadline=$(( $(date +%s) + 600 ))
while [ -e "$wd/scenarios/$node.hold-boot" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
if [ -e "$wd/scenarios/$node.after-boot" ]; then
    cp "$wd/scenarios/$node.after-boot" "$scenario.new" && mv "$scenario.new" "$scenario"
fi
gpus=$(sed -n 's/^gpus *= *//p' "$scenario" | tail -n 1)
i=0
while [ "$i" -lt "${{gpus:-8}}" ]; do
    if ! grep -q "^gpu\\.$i\\.lost *= *1" "$scenario"; then
        printf 'NVRM: GPU at PCI:0000:%02x:00: GPU-%08x-0000-0000-0000-000000000000\\n' \\
            $(( 0x18 + i * 16 )) "$i" >> "$wd/kern/$node.log"
    fi
    i=$(( i + 1 ))
done
"""


def pci(index: int) -> str:
    """The fake's default PCI bus id of GPU `index` (tests/fakegpu/README.md)."""
    return f"00000000:{0x18 + index * 0x10:02X}:00.0"


def serial(index: int) -> str:
    return f"16505220038{index:02d}"


def spank_plugin() -> Path:
    """spank/build/gpu_healthcheck.so, built by `make -C spank` against this host's spank.h."""
    done = subprocess.run(["make", "-C", str(ROOT / "spank")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"make -C spank failed:\n{done.stdout}{done.stderr}")
    return ROOT / "spank" / "build" / "gpu_healthcheck.so"


def gpu_healthcheck_bin(bin_dir: Path) -> Path:
    """The installed console script, else a shim running this checkout."""
    installed = shutil.which("gpu-healthcheck", path=os.path.dirname(sys.executable))
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "gpu-healthcheck"
    if installed:
        shim.symlink_to(installed)
    else:
        # this checkout, whatever the caller's environment (a job's tasks have no PYTHONPATH
        # of ours, and a Slurm root's venv has no install of the checkout)
        shim.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" '
                        f'exec "{sys.executable}" -m healthcheck.cli "$@"\n')
        shim.chmod(0o755)
    return shim


class GpuCluster:
    """A Slurm cluster whose nodes are simulated 8-GPU nodes, each with its own scenario,
    config, state directory and kernel log."""

    def __init__(self, wd: Path, fake: Path, max_fraction: float = 1.0,
                 weights: Optional[Dict[str, int]] = None, nodes: Optional[List[str]] = None,
                 gres_minors: Optional[Dict[str, List[int]]] = None, scripts: bool = True,
                 plugstack: Optional[str] = None,
                 shared_gres: Optional[Dict[str, str]] = None,
                 reboot_timeout_s: Optional[int] = None, health_check_interval: Optional[int] = None,
                 job_user: Optional[LocalUser] = None, **site: Any) -> None:
        """gres_minors: per node, the /dev/nvidiaN that gres.conf lists (default 0-7), e.g.
        {"gpu-a": [0, 1, 2, 4, 5, 6, 7]} for a node whose broken GPU 3 was taken out.
        scripts: Prolog=/Epilog= run our scripts.  plugstack: arguments of our SPANK plugin
        (spank/build/gpu_healthcheck.so, built by `make -C spank`) in this cluster's
        plugstack.conf, e.g. "run=prolog,epilog,report"; its exec= defaults to
        `exec_wrapper`, which runs gpu-healthcheck with the node's scenario and config.
        shared_gres: per node, "mps:COUNT" or "shard:COUNT" (GresTypes=gpu,mps,shard).
        reboot_timeout_s: `scontrol reboot` works: RebootProgram is tests/lib/fake-reboot (the
        node's slurmd comes back as if booted, see `after_boot`), ResumeTimeout this long.
        job_user: who submits `cluster.sbatch` jobs (SlurmCluster.job_user): an ordinary user
        the test made; `wd` must then be a folder she can pass (localuser.open_dir).
        health_check_interval: slurmd runs `gpu-healthcheck --node --act` as its HealthCheckProgram
        (HealthCheckNodeState=ANY) this often, in seconds, with the node's scenario and config.
        site: SlurmCluster's gres_types, gres_extra and nodes_include (a site's gres layout)."""
        self.wd = wd
        self.nodes = list(nodes or NODES)
        self.fake = fake
        self.scontrol = shutil.which("scontrol", path=os.environ.get("PATH", "") + ":/usr/bin")
        for sub in ("scenarios", "config", "state", "kern", "bin"):
            (wd / sub).mkdir(parents=True, exist_ok=True)
        self.sysfs = make_sysfs(wd / "sys")
        bin_dir = wd / "bin"
        gpu_healthcheck_bin(bin_dir)
        self.cluster = SlurmCluster(wd / "slurm", nodes=self.nodes, node_weights=weights or {"gpu-a": 1, "gpu-b": 10, "gpu-c": 20},
                                    prolog=str(wd / "prolog-wrapper") if scripts else None,
                                    epilog=str(wd / "epilog-wrapper") if scripts else None,
                                    prolog_epilog_timeout=120, gres_minors=gres_minors,
                                    shared_gres=shared_gres,
                                    extra_conf=self._reboot_conf(reboot_timeout_s),
                                    health_check_program=(str(wd / "health-check-wrapper")
                                                          if health_check_interval else None),
                                    health_check_interval=health_check_interval or 0,
                                    job_user=job_user, **site)
        for node in self.nodes:
            self.scenario(node).write_text(HEALTHY)
            (wd / "kern" / f"{node}.log").write_text("")
            self.write_config(node, max_fraction=max_fraction)
        env = self.node_env("$SLURMD_NODENAME")
        env["PATH"] = f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        self.cluster.write_wrapper(wd / "prolog-wrapper", str(ROOT / "prolog" / "gpu-healthcheck-prolog"), env)
        self.cluster.write_wrapper(wd / "epilog-wrapper", str(ROOT / "epilog" / "gpu-healthcheck-epilog"), env)
        # what the SPANK plugin execs: slurmd's prolog environment, or the job's for --job-report
        self.exec_wrapper = self.cluster.write_wrapper(wd / "exec-wrapper", str(bin_dir / "gpu-healthcheck"), env)
        self.cluster.write_wrapper(wd / "health-check-wrapper", str(bin_dir / "gpu-healthcheck"), env,
                                   args=("--node", "--act"))
        if plugstack is not None:
            self.write_plugstack(plugstack)

    def _reboot_conf(self, timeout_s: Optional[int]) -> List[str]:
        if timeout_s is None:
            return []
        hook = self.wd / "bin" / "after-boot"
        hook.write_text(AFTER_BOOT.format(wd=self.wd))
        hook.chmod(0o755)
        return [f'RebootProgram="{ROOT / "tests" / "lib" / "fake-reboot"} {hook}"',
                f"ResumeTimeout={timeout_s}"]

    def after_boot(self, node: str) -> Path:
        """Where a test puts the node's scenario after a power cycle (the GPUs as the reboot
        leaves them); without it the scenario stays as it was (the fault survives the boot)."""
        return self.wd / "scenarios" / f"{node}.after-boot"

    def hold_boot(self, node: str) -> Path:
        """While this file exists a rebooting node stays off (tests/lib/fake-reboot's hook)."""
        return self.wd / "scenarios" / f"{node}.hold-boot"

    def write_plugstack(self, args: str) -> Path:
        """This cluster's plugstack.conf: our plugin with these arguments (read by slurmd and by
        sbatch/srun/salloc at each start, so a test may rewrite it between jobs)."""
        if "exec=" not in args:
            args = f"exec={self.exec_wrapper} {args}"
        path = self.cluster.etc_dir / "plugstack.conf"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"required {spank_plugin()} {args}\n")
        return path

    def node_env(self, node: str) -> Dict[str, str]:
        return {"LD_LIBRARY_PATH": str(self.fake),
                "FAKEGPU_SCENARIO": str(self.wd / "scenarios" / f"{node}.scenario"),
                "GPU_HEALTHCHECK_CONFIG": str(self.wd / "config" / f"{node}.toml"),
                "PYTHONPATH": str(ROOT)}

    def scenario(self, node: str) -> Path:
        return self.wd / "scenarios" / f"{node}.scenario"

    def state(self, node: str) -> Path:
        return self.wd / "state" / node

    def write_config(self, node: str, max_fraction: float = 1.0, scontrol: Optional[str] = None,
                     state_dir: Optional[Path] = None) -> None:
        path = self.wd / "config" / f"{node}.toml"
        path.write_text(
            f'state_dir = "{state_dir or self.state(node)}"\nkernel_log = "{self.wd / "kern" / f"{node}.log"}"\n'
            f'sysfs_root = "{self.sysfs}"\nscontrol = "{scontrol or self.scontrol}"\n'
            f'scontrol_timeout_s = 10\nnode_name = "{node}"\n'
            f'gres_conf = "{self.cluster.gres_conf_path}"\n'
            f'[drain]\nmax_fraction = {max_fraction}\n[probe]\ntimeout_s = 20\n')
        path.chmod(0o644)

    def check_env(self, node: str, env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "GPU_HEALTHCHECK"))}
        full.update(self.node_env(node), SLURM_CONF=str(self.cluster.conf_path))
        full.update(env or {})
        return full

    def check(self, node: str, *args: str, env: Optional[Dict[str, str]] = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
        """`gpu-healthcheck ARGS` as that node's HealthCheckProgram (or slurmd) would run it."""
        return subprocess.run([sys.executable, "-m", "healthcheck.cli", *args],
                              env=self.check_env(node, env), capture_output=True, text=True,
                              timeout=timeout)

    def start_check(self, node: str, *args: str, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        """`check`, started without waiting: for runs on several nodes at once."""
        return subprocess.Popen([sys.executable, "-m", "healthcheck.cli", *args],
                                env=self.check_env(node, env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def slow_scontrol(self, delay_s: float) -> str:
        """A wrapper around the real scontrol that answers `delay_s` late: a loaded controller."""
        path = self.wd / "bin" / f"scontrol-slow-{delay_s:g}"
        path.write_text(f'#!/bin/sh\nsleep {delay_s:g}\nexec "{self.scontrol}" "$@"\n')
        path.chmod(0o755)
        return str(path)

    def reason(self, node: str) -> str:
        return self.cluster.node_reason(node) or ""

    def drained(self, node: str) -> bool:
        return "DRAIN" in self.cluster.node_info(node).get("State", "")

    def wait_reason(self, node: str, prefix: str = "gpu-healthcheck:", timeout: float = 60) -> str:
        self.cluster.wait_node(node, lambda info: self._reason_of(info).startswith(prefix), timeout)
        return self.reason(node)

    @staticmethod
    def _reason_of(info: Dict[str, str]) -> str:
        reason = info.get("Reason") or ""
        return reason.rsplit(" [", 1)[0]

    def wait_running(self, job: str, timeout: float = 60) -> Dict[str, str]:
        """RUNNING and past its prolog: the batch script has printed "started"."""
        info = self.cluster.wait_job(job, states=("RUNNING",), timeout=timeout)
        deadline = time.monotonic() + timeout
        while "started" not in self._output(job):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job} never started its script: {self.cluster.job_info(job)}")
            time.sleep(0.05)
        return info

    def _output(self, job: str) -> str:
        try:
            return self.cluster.job_output(job)
        except OSError:
            return ""


def require_slurm() -> None:
    """Skip without Slurm installed, except in CI, where the Slurm tests must run."""
    import pytest

    reason = slurm_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Slurm tests: {reason}")
        pytest.skip(reason)
