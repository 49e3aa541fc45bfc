"""A real, throw-away Slurm cluster on one machine, for tests and demos.

Everything lives in a private ``workdir``: a munge key and its own ``munged``
(own socket), ``slurm.conf`` / ``gres.conf``, one ``slurmctld -D`` and one
``slurmd -D -N NAME`` per node, all declared with ``NodeHostname`` = this host
and their own free TCP port.  GPUs are character devices made with ``mknod``
(major 195, like /dev/nvidiaN) so slurmd counts them; nothing real is touched.

Usage::

    from tests.lib.slurmcluster import SlurmCluster, slurm_available

    with SlurmCluster(tmp_path / "c", nodes=["gpu-a", "gpu-b"],
                      prolog=str(wrapper)) as c:
        job = c.sbatch(["--gres=gpu:2"], "echo hi\\n")
        info = c.wait_job(job, timeout=60)
        print(info["NodeList"], c.sinfo_reasons())

Prolog/Epilog/HealthCheckProgram are run by slurmd as root with a FRESH
environment that has no PATH (slurmd does set SLURM_CONF to its own config, seen
with 22.05, plus SLURM_JOB_*, SLURMD_NODENAME, SLURM_SCRIPT_CONTEXT and, with
--gres=gpu, SLURM_JOB_GPUS/CUDA_VISIBLE_DEVICES).  Point ``prolog=`` at a small
wrapper written by :func:`write_wrapper` (or :meth:`SlurmCluster.write_wrapper`,
which adds PATH and this cluster's SLURM_CONF) that exports what the real
script needs and ``exec``s it.  Values may reference variables that slurmd
sets, e.g. ``{"FAKEGPU_SCENARIO": "/wd/scenarios/$SLURMD_NODENAME.scenario"}``;
see :func:`write_wrapper` for the exact quoting rules.

Timing: a 3-node cluster is up (all nodes idle) in ~0.4 s.  A job requeued
after a prolog failure may start again only after AuthInfo=cred_expire seconds
(Slurm's default 120; this harness sets ``cred_expire=10``, so ~12 s).

Every daemon (and so every slurmstepd and, through sbatch's default
``--export=ALL``, every job process) carries the environment variable
``HC_SLURMCLUSTER_ID=<unique id>``; :meth:`SlurmCluster.stop` uses it, plus
the process tree (and, for Slurm 24.11's slurmstepd, which hides its environment,
the working directory), to kill whatever is left and verifies that nothing remains.
Other clusters (or a system Slurm) on the same machine are never touched.

Versions: the harness starts whatever Slurm is on PATH (:func:`slurm_version`):
22.05 on the Debian 12 host, 24.11 inside the Debian 13 root of tests/slurmroot/
(``tests/slurmroot/run``; ``make slurm-matrix`` runs the Slurm tests on both).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from tests.lib.localuser import LocalUser

__all__ = [
    "SlurmCluster",
    "SlurmClusterError",
    "JobError",
    "slurm_available",
    "slurm_missing_reason",
    "slurm_version",
    "requires_slurm",
    "write_wrapper",
    "parse_scontrol_oneliner",
    "free_ports",
]

SLURM_BINARIES = ("slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "sinfo", "munged")
TAG_VAR = "HC_SLURMCLUSTER_ID"
# Set by tests/conftest.py for each test: "1" when it is marked @pytest.mark.slurm, else "0".
SLURM_MARK_VAR = "HC_TEST_MARKED_SLURM"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Job states after which a job will not run again by itself.
TERMINAL_JOB_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT",
})


class SlurmClusterError(RuntimeError):
    """The cluster failed to start/stop; the message carries the daemon log tails."""


class JobError(RuntimeError):
    """A job reached a state that wait_job was not waiting for (or timed out)."""

    def __init__(self, msg: str, info: Optional[dict] = None):
        super().__init__(msg)
        self.info = info or {}


# --------------------------------------------------------------------------
# availability

def slurm_missing_reason() -> Optional[str]:
    """None when a local cluster can be started here, otherwise why not."""
    missing = [b for b in SLURM_BINARIES if not _which(b)]
    if missing:
        return ("Slurm/munge not installed (missing %s); "
                "apt-get install -y slurmctld slurmd slurm-client munge" % ", ".join(missing))
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (SlurmUser=root, mknod for GPU devices)"
    return None


def slurm_version() -> Optional[str]:
    """The major.minor ('22.05', '24.11') of the slurmctld on PATH, None when there is none.

    The same harness starts every version; tests/slurmroot/run puts Slurm 24.11 on PATH."""
    exe = _which("slurmctld")
    if not exe:
        return None
    out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"(\d+)\.(\d+)\.\d+", out)
    return "%s.%s" % (m.group(1), m.group(2)) if m else None


def slurm_available() -> bool:
    return slurm_missing_reason() is None


def requires_slurm():
    """A pytest skipif marker that names what is missing (pytest imported lazily).

    Use together with @pytest.mark.slurm; CI installs Slurm, so there the tests run.
    """
    import pytest
    reason = slurm_missing_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def _ranges(numbers: List[int]) -> str:
    """[0, 1, 2, 4, 5] -> "0-2,4-5", in the given order (a hostlist range expression)."""
    parts: List[str] = []
    start = prev = None
    for n in list(numbers) + [None]:
        if start is not None and n is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
        start = prev = n
    return ",".join(parts)


def _which(name: str) -> Optional[str]:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


# --------------------------------------------------------------------------
# helpers

def free_ports(n: int) -> List[int]:
    """n distinct TCP ports that were free a moment ago (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


_VAR_RE = re.compile(r"\$\$|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\$")


def _sh_double_quote(value: str, expand: bool) -> str:
    """Quote for POSIX sh inside double quotes.

    With expand=True, ``$NAME`` and ``${NAME}`` stay shell expansions, ``$$`` is a
    literal ``$`` and any other ``$`` is literal; backquotes, ``"`` and ``\\`` are
    always literal.  With expand=False everything is literal.
    """
    out = ['"']
    pos = 0
    for m in _VAR_RE.finditer(value):
        out.append(_escape_dq(value[pos:m.start()]))
        tok = m.group(0)
        if not expand:
            out.append(_escape_dq(tok))
        elif tok in ("$$", "$"):
            out.append("\\$")
        else:
            name = tok[2:-1] if tok.startswith("${") else tok[1:]
            out.append("${%s}" % name)
        pos = m.end()
    out.append(_escape_dq(value[pos:]))
    out.append('"')
    return "".join(out)


def _escape_dq(s: str) -> str:
    return re.sub(r'([\\"`$])', r"\\\1", s)


def write_wrapper(path, target: str, env: Dict[str, str], *, expand: bool = True,
                  args: Iterable[str] = ()) -> Path:
    """Write an executable POSIX sh wrapper that exports ``env`` and execs ``target``.

    Meant for Prolog=/Epilog=/HealthCheckProgram=, which slurmd runs with a fresh
    environment without PATH.  The variables are exported in dict order, so a
    value may use one defined earlier.  In values (when ``expand`` is true):

    * ``$NAME`` / ``${NAME}`` are expanded by the shell at run time, e.g.
      ``"/wd/scenarios/$SLURMD_NODENAME.scenario"`` gives a per-node value;
    * ``$$`` is a literal ``$`` (so is a ``$`` not followed by a name);
    * everything else (spaces, quotes, backslashes, backquotes) is literal.

    ``args`` are fixed arguments put before the wrapper's own ("$@").
    """
    path = Path(path)
    lines = ["#!/bin/sh", "# generated by tests/lib/slurmcluster.py:write_wrapper"]
    for key, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError("bad environment variable name %r" % key)
        lines.append("%s=%s" % (key, _sh_double_quote(str(value), expand)))
        lines.append("export %s" % key)
    argv = " ".join([shlex.quote(str(target))] + [shlex.quote(str(a)) for a in args])
    lines.append('exec %s "$@"' % argv)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


# Keys of `scontrol -o show job|node` whose values are free text and may contain
# spaces and even "Word=" sequences.  Inside one of them only a key from
# KNOWN_KEYS ends the value.
FREE_TEXT_KEYS = frozenset({
    "Reason", "Comment", "AdminComment", "SystemComment", "OS", "Command", "WorkDir",
    "StdErr", "StdIn", "StdOut", "Features", "ActiveFeatures", "AvailableFeatures",
    "Extra", "JobName", "Name", "Licenses", "Dependency",
})
KNOWN_KEYS = frozenset("""
JobId SLUID ArrayJobId ArrayTaskId HetJobId HetJobOffset JobName UserId GroupId MCS_label Priority
Nice Account QOS JobState Reason Dependency Requeue Restarts BatchFlag Reboot ExitCode
DerivedExitCode RunTime TimeLimit TimeMin SubmitTime EligibleTime AccrueTime StartTime EndTime
Deadline SuspendTime SecsPreSuspend LastSchedEval Scheduler Partition AllocNode:Sid ReqNodeList
ExcNodeList NodeList BatchHost NumNodes NumCPUs NumTasks CPUs/Task ReqB:S:C:T TRES
Socks/Node NtasksPerN:B:S:C CoreSpec MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode
Features DelayBoot OverSubscribe Contiguous Licenses Network Command WorkDir Comment AdminComment
SystemComment StdErr StdIn StdOut Power TresPerNode TresPerJob TresPerSocket TresPerTask
CpusPerTres MemPerTres TresBind TresFreq MailUser MailType NtasksPerTRES Nodes CPU_IDs Mem GRES
JOB_GRES CPU_IDs Shared PreemptEligibleTime PreemptTime ResvName Extra Container Cluster
NodeName Arch CoresPerSocket CPUAlloc CPUEfctv CPUTot CPULoad AvailableFeatures ActiveFeatures
Gres GresDrain GresUsed NodeAddr NodeHostName Port Version OS RealMemory AllocMem FreeMem Sockets
Boards State ThreadsPerCore TmpDisk Weight Owner Partitions BootTime SlurmdStartTime
LastBusyTime ResumeAfterTime CfgTRES AllocTRES CapWatts CurrentWatts AveWatts ExtSensorsJoules
ExtSensorsWatts ExtSensorsTemp Comment CoreSpecCount CPUSpecList MemSpecLimit InstanceId
InstanceType NextState
""".split())

_KEY_RE = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_:/.\-]*)=")


def parse_scontrol_oneliner(line: str) -> Dict[str, str]:
    """Parse one line of ``scontrol -o show job|node`` into a dict.

    Values may contain spaces (``Reason=Prolog error [root@2024-...]``,
    ``OS=Linux 6.1 #1 SMP ...``, comments).  A ``Word=`` token starts a new key
    unless we are inside a free-text value (FREE_TEXT_KEYS) and Word is not a
    key scontrol prints (KNOWN_KEYS).  Values are stripped of surrounding space.
    """
    line = line.rstrip("\n")
    result: Dict[str, str] = {}
    matches = list(_KEY_RE.finditer(line))
    accepted = []
    current = None
    for m in matches:
        key = m.group(1)
        if current is not None and current in FREE_TEXT_KEYS and key not in KNOWN_KEYS:
            continue  # "Word=" inside a free-text value
        accepted.append(m)
        current = key
    for i, m in enumerate(accepted):
        end = accepted[i + 1].start() if i + 1 < len(accepted) else len(line)
        result[m.group(1)] = line[m.end():end].strip()
    return result


def _read_tail(path: Path, nbytes: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return "<%s>" % e


def _proc_env(pid: int) -> bytes:
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _proc_stat(pid: int):
    """(state, ppid) or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return rest[0], int(rest[1])


def _proc_cmdline(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _proc_cwd(pid: int) -> str:
    try:
        return os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        return ""


def _cwd_within(pid: int, workdir: Path) -> bool:
    """Whether the process works in `workdir` or below it, on the same filesystem.  The path
    alone is not enough: the Slurm matrix runs each version in a mount namespace of its own
    with a fresh /tmp (tests/slurmroot/run), so two versions running the same test at once have
    the same tmp_path, and /proc/PID/cwd shows the other root's slurmstepd under our path;
    the device of the directory itself tells them apart."""
    cwd = _proc_cwd(pid)
    if not (cwd + "/").startswith(str(workdir) + "/"):
        return False
    try:
        return os.stat("/proc/%d/cwd" % pid).st_dev == os.stat(workdir).st_dev
    except OSError:
        return False


def _all_pids() -> List[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _wait_until(pred: Callable[[], object], timeout: float, interval: float = 0.1,
                what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


# --------------------------------------------------------------------------
# the cluster

class SlurmCluster:
    """A local Slurm cluster: munged + slurmctld + one slurmd per node.

    Construct, then ``start()`` (or use as a context manager).  Paths are known
    right after construction (``conf_path``, ``munge_socket``), so wrappers that
    need SLURM_CONF can be written before starting.
    """

    def __init__(
        self,
        workdir,
        nodes: List[str] = ("gpu-a", "gpu-b", "gpu-c"),
        gpus_per_node: int = 8,
        prolog: Optional[str] = None,
        epilog: Optional[str] = None,
        node_weights: Optional[Dict[str, int]] = None,
        extra_conf: Optional[List[str]] = None,
        prolog_epilog_timeout: int = 60,
        health_check_program: Optional[str] = None,
        health_check_interval: int = 0,
        cpus_per_node: int = 16,
        real_memory: int = 64000,
        start_timeout: float = 60.0,
        debug_level: str = "info",
        cred_expire: int = 10,
        gres_minors: Optional[Dict[str, List[int]]] = None,
        shared_gres: Optional[Dict[str, str]] = None,
        gres_types: Optional[Dict[str, str]] = None,
        gres_extra: Optional[Dict[str, List[Tuple[str, List[int]]]]] = None,
        nodes_include: bool = False,
        accounting: bool = False,
        job_user: Optional[LocalUser] = None,
    ):
        self.workdir = Path(workdir).resolve()
        self.nodes = list(nodes)
        if not self.nodes:
            raise ValueError("need at least one node")
        self.gpus_per_node = gpus_per_node
        # per node, the /dev/nvidiaN gres.conf lists, in order; a gap (a GPU taken out of
        # service) shifts every later gres index: File=.../nvidia[0-2,4-7] gives nvidia4 index 3
        self.gres_minors = {n: list((gres_minors or {}).get(n, range(gpus_per_node))) for n in nodes}
        self.prolog = prolog
        self.epilog = epilog
        self.node_weights = dict(node_weights or {})
        self.extra_conf = list(extra_conf or [])
        self.prolog_epilog_timeout = prolog_epilog_timeout
        self.health_check_program = health_check_program
        self.health_check_interval = health_check_interval
        self.cpus_per_node = cpus_per_node
        self.real_memory = real_memory
        self.start_timeout = start_timeout
        self.debug_level = debug_level
        # AuthInfo=cred_expire (Slurm default 120, minimum 5) is also how long a
        # requeued job waits before it may start again (BeginTime = requeue + it).
        self.cred_expire = cred_expire
        # node -> "mps:COUNT" or "shard:COUNT": GPUs several jobs share (GresTypes=gpu,mps,shard)
        self.shared_gres = dict(shared_gres or {})
        # a site's layout (SLAC's hep-gpu01): node -> the Type= of its gres/gpu (slurm.conf
        # Gres=gpu:TYPE:N), node -> gres.conf records slurm.conf does not count, as
        # (type, minors) (slurmd ignores them: "Ignoring extra GRES"), and the NodeName lines in
        # etc/nodes.conf, which slurm.conf Includes
        self.gres_types = dict(gres_types or {})
        self.gres_extra = {n: list(v) for n, v in (gres_extra or {}).items()}
        self.nodes_include = nodes_include
        self.accounting = accounting  # slurmdbd on a MariaDB of its own (tests/lib/slurmdbd.py)
        # who submits the jobs (sbatch(), run(..., as_job_user=True)): an ordinary user the test
        # made (tests/lib/localuser.py), as on a real cluster, where slurmctld lets only a job's
        # owner start steps in it; None: root.  Her sbatch must reach slurm.conf and the munge
        # socket, so every folder above workdir must let her pass (localuser.open_dir).
        self.job_user = job_user
        self.accounting_seconds: Dict[str, float] = {}  # start_accounting's parts, for the bench
        # MariaDB's datadir on a tmpfs where the session is isolated; the bench compares the disk
        self.accounting_tmpfs = True

        self.hostname = socket.gethostname().split(".")[0]
        self.cluster_id = "hc-%s" % uuid.uuid4().hex[:12]
        wd = self.workdir
        self.etc_dir = wd / "etc"
        self.log_dir = wd / "log"
        self.run_dir = wd / "run"
        self.spool_dir = wd / "spool"
        self.state_dir = wd / "state"
        self.dev_dir = wd / "dev"
        self.jobs_dir = wd / "jobs"
        self.munge_dir = wd / "munge"
        self.conf_path = self.etc_dir / "slurm.conf"
        self.gres_conf_path = self.etc_dir / "gres.conf"
        self.munge_key = self.munge_dir / "munge.key"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.ctld_port: Optional[int] = None
        self.node_ports: Dict[str, int] = {}
        self.procs: Dict[str, subprocess.Popen] = {}
        self.start_seconds: Optional[float] = None
        self._started = False
        self._stopped = False
        self._known_pids: Set[int] = set()

        self.env = dict(os.environ)
        self.env["PATH"] = self.env.get("PATH", DEFAULT_PATH) + ":/usr/sbin:/sbin"
        self.env["SLURM_CONF"] = str(self.conf_path)
        self.env[TAG_VAR] = self.cluster_id
        for k in list(self.env):
            # a caller's Slurm settings must not leak into our clients / jobs
            if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_", "SCONTROL_", "SALLOC_",
                             "SRUN_")) and k != "SLURM_CONF":
                del self.env[k]

    # ------------------------------------------------------------------ setup
    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop(raise_on_leftovers=exc_type is None)
        return False

    def write_wrapper(self, path, target: str, env: Optional[Dict[str, str]] = None,
                      **kw) -> Path:
        """write_wrapper() with PATH and this cluster's SLURM_CONF added (overridable)."""
        full = {"PATH": DEFAULT_PATH, "SLURM_CONF": str(self.conf_path)}
        full.update(env or {})
        return write_wrapper(path, target, full, **kw)

    def start(self) -> "SlurmCluster":
        if self._started:
            raise SlurmClusterError("already started")
        reason = slurm_missing_reason()
        if reason:
            raise SlurmClusterError(reason)
        if os.environ.get(SLURM_MARK_VAR) == "0":
            raise SlurmClusterError(
                "this test starts a Slurm cluster but is not marked @pytest.mark.slurm: "
                "make slurm-matrix selects the Slurm tests by that marker, so it would not run "
                "on every Slurm version")
        self._started = True
        t0 = time.monotonic()
        try:
            self._make_dirs()
            self._start_munge()
            ports = free_ports(1 + len(self.nodes))
            self.ctld_port = ports[0]
            self.node_ports = dict(zip(self.nodes, ports[1:]))
            self._write_confs()
            if self.accounting:
                from tests.lib.slurmdbd import start_accounting

                start_accounting(self)
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
            _wait_until_or_die(self, lambda: self._ctld_up(), 30, "slurmctld to answer ping")
            for node in self.nodes:
                self._spawn("slurmd-%s" % node,
                            ["slurmd", "-D", "-N", node, "-f", str(self.conf_path)])
            _wait_until_or_die(self, self._all_idle, self.start_timeout,
                               "all nodes idle in sinfo", lambda: "last node states: %s"
                               % getattr(self, "_last_states", None))
        except BaseException:
            self.stop(raise_on_leftovers=False)
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _make_dirs(self):
        for d in (self.etc_dir, self.log_dir, self.run_dir, self.spool_dir, self.state_dir,
                  self.dev_dir, self.jobs_dir, self.munge_dir):
            d.mkdir(parents=True, exist_ok=True)
        # munged wants its socket folder world-executable (clients of any uid must
        # reach the socket).  We only add o+x to workdir and the munge folder; a
        # folder above workdir without o+x (pytest's tmp is 0700) is fine while
        # everything, jobs included, runs as root, as it does here.
        self.munge_dir.chmod(0o755)
        self.workdir.chmod(self.workdir.stat().st_mode | 0o011)
        self.jobs_dir.chmod(0o1777)
        for node in self.nodes:
            (self.spool_dir / node).mkdir(parents=True, exist_ok=True)
            ddir = self.dev_dir / node
            ddir.mkdir(parents=True, exist_ok=True)
            extra = {m for _, minors in self.gres_extra.get(node, []) for m in minors}
            for i in sorted(set(range(self.gpus_per_node)) | set(self.gres_minors[node]) | extra):
                p = ddir / ("nvidia%d" % i)
                if not p.exists():
                    try:
                        os.mknod(p, 0o666 | 0o020000, os.makedev(195, i))  # S_IFCHR
                    except OSError as e:
                        raise SlurmClusterError(
                            "mknod %s c 195 %d failed (%s): slurmd only counts character "
                            "devices as GPUs; run as root with CAP_MKNOD" % (p, i, e))

    def _start_munge(self):
        key = self.munge_key
        if not key.exists():
            mk = _which("mungekey")
            if mk:
                subprocess.run([mk, "--create", "--force", "--keyfile", str(key)], check=True,
                               capture_output=True)
            else:
                key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        cmd = [
            _which("munged") or "munged", "--foreground", "--force",
            "--key-file=%s" % key, "--socket=%s" % self.munge_socket,
            "--pid-file=%s" % (self.munge_dir / "munged.pid"),
            "--log-file=%s" % (self.log_dir / "munged.log"),
            "--seed-file=%s" % (self.munge_dir / "munged.seed"),
            "--num-threads=4",
        ]
        self._spawn("munged", cmd)

        def ok():
            if not self.munge_socket.exists():
                return False
            r = subprocess.run(["munge", "-n", "-S", str(self.munge_socket)],
                               capture_output=True, timeout=10)
            return r.returncode == 0
        _wait_until_or_die(self, ok, 20, "munged to answer on %s" % self.munge_socket)

    def stop_slurmd(self, node: str, timeout: float = 15) -> None:
        """Stop one node's slurmd (a node that stops answering: slurmctld marks it DOWN,
        "Not responding", after SlurmdTimeout)."""
        proc = self.procs.pop("slurmd-%s" % node)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def start_slurmd(self, node: str) -> None:
        self._spawn("slurmd-%s" % node, ["slurmd", "-D", "-N", node, "-f", str(self.conf_path)])

    def _spawn(self, name: str, cmd: List[str]):
        out = open(self.log_dir / ("%s.out" % name), "ab")
        try:
            self.procs[name] = subprocess.Popen(
                cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, cwd=str(self.workdir))
        finally:
            out.close()
        self._known_pids.add(self.procs[name].pid)

    def _conf_lines(self) -> List[str]:
        wd = self.workdir
        sched = ("nohold_on_prolog_fail,batch_sched_delay=0,sched_min_interval=0,"
                 "sched_interval=2,default_queue_depth=100,bf_interval=1")
        glob = [
            ("ClusterName", "hc-test"),
            ("SlurmctldHost", "%s(127.0.0.1)" % self.hostname),
            ("SlurmctldPort", str(self.ctld_port)),
            ("SlurmdPort", str(self.node_ports[self.nodes[0]])),
            ("AuthType", "auth/munge"),
            ("CredType", "cred/munge"),
            ("AuthInfo", "socket=%s,cred_expire=%d" % (self.munge_socket, self.cred_expire)),
            ("SlurmUser", "root"),
            ("SlurmdUser", "root"),
            ("StateSaveLocation", str(self.state_dir)),
            ("SlurmdSpoolDir", "%s/%%n" % self.spool_dir),
            ("SlurmdPidFile", "%s/%%n.pid" % self.run_dir),
            ("SlurmctldPidFile", str(self.run_dir / "slurmctld.pid")),
            ("SlurmctldLogFile", str(self.log_dir / "slurmctld.log")),
            ("SlurmdLogFile", str(self.log_dir / "slurmd-%n.log")),
            ("SlurmctldDebug", self.debug_level),
            ("SlurmdDebug", self.debug_level),
            ("PlugStackConfig", str(self.etc_dir / "plugstack.conf")),
            ("ProctrackType", "proctrack/linuxproc"),
            ("TaskPlugin", "task/none"),
            ("SwitchType", "switch/none"),
            ("MpiDefault", "none"),
            ("SelectType", "select/cons_tres"),
            ("SelectTypeParameters", "CR_Core"),
            ("GresTypes", "gpu,mps,shard" if self.shared_gres else "gpu"),
            ("ReturnToService", "2"),
            ("SlurmdParameters", "config_overrides"),
            ("JobAcctGatherType", "jobacct_gather/none"),
            ("AccountingStorageType", "accounting_storage/none"),
            ("JobCompType", "jobcomp/none"),
            ("SchedulerType", "sched/backfill"),
            ("SchedulerParameters", sched),
            ("SchedulerTimeSlice", "5"),
            ("PrologFlags", "Alloc"),
            ("PrologEpilogTimeout", str(self.prolog_epilog_timeout)),
            ("SlurmctldTimeout", "10"),
            ("SlurmdTimeout", "30"),
            ("MessageTimeout", "10"),
            ("InactiveLimit", "0"),
            ("MinJobAge", "3600"),
            ("KillWait", "5"),
            ("UnkillableStepTimeout", "30"),
            ("JobRequeue", "1"),
            ("TreeWidth", "65533"),
            ("MailProg", "/bin/true"),
        ]
        if self.prolog:
            glob.append(("Prolog", str(self.prolog)))
        if self.epilog:
            glob.append(("Epilog", str(self.epilog)))
        if self.health_check_program:
            glob.append(("HealthCheckProgram", str(self.health_check_program)))
            glob.append(("HealthCheckInterval", str(self.health_check_interval)))
            glob.append(("HealthCheckNodeState", "ANY"))
        # extra_conf lines with a global key replace ours; others are appended.
        extra_tail = []
        index = {k.lower(): i for i, (k, _) in enumerate(glob)}
        for line in self.extra_conf:
            key = line.split("=", 1)[0].strip()
            if "=" in line and key.lower() in index and " " not in line.split("=", 1)[1].strip():
                glob[index[key.lower()]] = (key, line.split("=", 1)[1].strip())
            else:
                extra_tail.append(line)
        lines = ["# generated by tests/lib/slurmcluster.py (%s)" % self.cluster_id]
        lines += ["%s=%s" % kv for kv in glob]
        lines += extra_tail
        node_lines = []
        for node in self.nodes:
            node_lines.append(
                "NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d Boards=1 "
                "SocketsPerBoard=1 CoresPerSocket=%d ThreadsPerCore=1 RealMemory=%d "
                "Gres=gpu:%s%d%s Weight=%d State=UNKNOWN" % (
                    node, self.hostname, self.node_ports[node], self.cpus_per_node,
                    self.cpus_per_node, self.real_memory,
                    (self.gres_types[node] + ":") if node in self.gres_types else "",
                    len(self.gres_minors[node]),
                    ("," + self.shared_gres[node]) if node in self.shared_gres else "",
                    self.node_weights.get(node, 1)))
        if self.nodes_include:
            (self.etc_dir / "nodes.conf").write_text("\n".join(node_lines) + "\n")
            lines.append("Include nodes.conf")
        else:
            lines += node_lines
        lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
                     "OverSubscribe=NO")
        return lines

    def _write_confs(self):
        self.conf_path.write_text("\n".join(self._conf_lines()) + "\n")
        gres = ["AutoDetect=off"]
        for node in self.nodes:
            if self.gres_minors[node]:
                files = "%s/nvidia[%s]" % (self.dev_dir / node, _ranges(self.gres_minors[node]))
                kind = (" Type=%s" % self.gres_types[node]) if node in self.gres_types else ""
                gres.append("NodeName=%s Name=gpu%s File=%s" % (node, kind, files))
                for other, minors in self.gres_extra.get(node, []):
                    gres.append("NodeName=%s Name=gpu Type=%s File=%s/nvidia[%s]" % (
                        node, other, self.dev_dir / node, _ranges(minors)))
                if node in self.shared_gres:
                    name, count = self.shared_gres[node].split(":")
                    gres.append("NodeName=%s Name=%s Count=%s File=%s" % (node, name, count, files))
        self.gres_conf_path.write_text("\n".join(gres) + "\n")
        plug = self.etc_dir / "plugstack.conf"
        if not plug.exists():
            plug.write_text("# empty: keep the system's SPANK plugins out of this cluster\n")

    # ---------------------------------------------------------- readiness
    def _check_alive(self):
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise SlurmClusterError("daemon(s) exited: %s\n%s" % (dead, self.log_tails()))

    def _ctld_up(self) -> bool:
        self._check_alive()
        r = self.run(["scontrol", "ping"], timeout=15)
        return r.returncode == 0 and "UP" in r.stdout

    def node_states(self) -> Dict[str, str]:
        """{node: sinfo long state} e.g. 'idle', 'mixed', 'drained', 'down*', 'inval'."""
        r = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15)
        states = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def _all_idle(self) -> bool:
        self._check_alive()
        states = self.node_states()
        self._last_states = states
        bad = {n: s for n, s in states.items() if s.startswith("inval")}
        if bad:  # slurmd registered but does not match slurm.conf: won't heal
            raise SlurmClusterError("node(s) INVAL at start: %s\n%s\n%s" % (
                bad, self.sinfo_reasons(), self.log_tails()))
        return all(states.get(n) == "idle" for n in self.nodes)

    # --------------------------------------------------------- client API
    def run(self, cmd: List[str], timeout: float = 30, check: bool = False,
            input: Optional[str] = None, as_job_user: bool = False) -> subprocess.CompletedProcess:
        """Run a Slurm client command (scontrol, sbatch, ...) against this cluster; as_job_user:
        as `job_user` (no supplementary groups), where there is one."""
        user = self.job_user if as_job_user else None
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout,
                           input=input, cwd=str(self.jobs_dir),
                           user=user.pw_uid if user else None, group=user.pw_gid if user else None,
                           extra_groups=[] if user else None)
        if check and r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
        return r

    def sbatch(self, args: List[str], script: str) -> str:
        """Submit ``script`` (a body for #!/bin/sh, or a full script) and return the job id: as
        `job_user` where there is one (and the job is checked to be hers), else as root.

        Output goes to <workdir>/jobs/slurm-%j.out unless args set --output; the job's
        working directory is <workdir>/jobs unless args set --chdir/-D.
        """
        if not script.startswith("#!"):
            script = "#!/bin/sh\n" + script
        fixed = ["--parsable"]
        if not any(a.startswith(("--output", "-o")) for a in args):
            fixed.append("--output=%s/slurm-%%j.out" % self.jobs_dir)
        if not any(a.startswith(("--chdir", "-D")) for a in args):
            fixed.append("--chdir=%s" % self.jobs_dir)
        r = self.run(["sbatch"] + fixed + list(args), input=script, timeout=30, as_job_user=True)
        if r.returncode != 0:
            raise JobError("sbatch %s failed (%d): %s%s" % (args, r.returncode, r.stdout,
                                                            r.stderr))
        job = r.stdout.strip().split(";")[0]
        if self.job_user is not None:
            owner = self.job_info(job).get("UserId", "")
            if owner != "%s(%d)" % (self.job_user.name, self.job_user.pw_uid):
                raise JobError("job %s is %s's, not %s's" % (job, owner, self.job_user.name))
        return job

    def job_output(self, job_id: str) -> str:
        p = self.jobs_dir / ("slurm-%s.out" % job_id)
        return p.read_text() if p.exists() else ""

    def job_info(self, job_id: str) -> Dict[str, str]:
        """`scontrol -o show job ID` as a dict ({} if unknown). JobState is the bare state."""
        r = self.run(["scontrol", "-o", "-d", "show", "job", str(job_id)], timeout=15)
        if r.returncode != 0 or not r.stdout.strip():
            return {}
        info = parse_scontrol_oneliner(r.stdout.strip().splitlines()[0])
        return info

    def node_info(self, name: str) -> Dict[str, str]:
        """`scontrol -o show node NAME` as a dict; Reason keeps its ' [user@time]' suffix."""
        r = self.run(["scontrol", "-o", "show", "node", name], timeout=15)
        if r.returncode != 0 or not r.stdout.strip():
            return {}
        return parse_scontrol_oneliner(r.stdout.strip().splitlines()[0])

    def node_reason(self, name: str) -> str:
        """The node's Reason text without the trailing '[user@time]'."""
        reason = self.node_info(name).get("Reason", "")
        return re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", reason)

    def wait_job(self, job_id: str, states: Iterable[str] = ("COMPLETED",),
                 timeout: float = 60, fail_fast: bool = True,
                 interval: float = 0.2) -> Dict[str, str]:
        """Poll until the job's JobState is in ``states``; return job_info.

        With fail_fast, raise JobError as soon as the job is in a terminal state not
        in ``states`` or is held (JobHeldAdmin/JobHeldUser/'launch failed requeued held').
        """
        want = {s.upper() for s in states}
        deadline = time.monotonic() + timeout
        info: Dict[str, str] = {}
        while True:
            info = self.job_info(job_id)
            state = info.get("JobState", "")
            if state in want:
                return info
            if fail_fast and info:
                if state in TERMINAL_JOB_STATES:
                    raise JobError("job %s ended %s (wanted %s): %s" % (
                        job_id, state, sorted(want), _brief(info)), info)
                reason = info.get("Reason", "")
                if state == "PENDING" and ("held" in reason.lower() or
                                           info.get("Priority") == "0"):
                    raise JobError("job %s is held (%s): %s" % (job_id, reason, _brief(info)),
                                   info)
            if time.monotonic() >= deadline:
                raise JobError("timed out after %.0fs waiting for job %s to reach %s: %s" % (
                    timeout, job_id, sorted(want), _brief(info)), info)
            time.sleep(interval)

    def wait_node(self, name: str, predicate: Callable[[Dict[str, str]], bool],
                  timeout: float = 60, interval: float = 0.2) -> Dict[str, str]:
        """Poll node_info(name) until predicate(info) is true; return that info."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.node_info(name)
            if info and predicate(info):
                return info
            if time.monotonic() >= deadline:
                raise TimeoutError("node %s: condition not met within %.0fs; last: State=%s "
                                   "Reason=%s" % (name, timeout, info.get("State"),
                                                  info.get("Reason")))
            time.sleep(interval)

    def sinfo_reasons(self) -> str:
        r = self.run(["sinfo", "-R", "-o", "%100E %12U %19H %N"], timeout=15)
        return r.stdout

    def resume(self, node: str) -> None:
        self.run(["scontrol", "update", "NodeName=%s" % node, "State=RESUME"], check=True)

    def drain(self, node: str, reason: str) -> None:
        self.run(["scontrol", "update", "NodeName=%s" % node, "State=DRAIN",
                  "Reason=%s" % reason], check=True)

    # ----------------------------------------------------------- logs
    def log_files(self) -> Dict[str, Path]:
        files = {"munged": self.log_dir / "munged.log",
                 "slurmctld": self.log_dir / "slurmctld.log"}
        for node in self.nodes:
            files["slurmd-%s" % node] = self.log_dir / ("slurmd-%s.log" % node)
        for name in list(self.procs):
            files["%s.out" % name] = self.log_dir / ("%s.out" % name)
        return files

    def logs(self) -> Dict[str, str]:
        out = {}
        for name, path in self.log_files().items():
            try:
                out[name] = path.read_text(errors="replace")
            except OSError:
                out[name] = ""
        return out

    def log_tails(self, nbytes: int = 3000) -> str:
        parts = []
        for name, path in self.log_files().items():
            if path.exists() and path.stat().st_size:
                parts.append("----- %s (%s) -----\n%s" % (name, path, _read_tail(path, nbytes)))
        return "\n".join(parts)

    # ----------------------------------------------------------- teardown
    def _descendants(self, roots: Set[int]) -> Set[int]:
        children: Dict[int, List[int]] = {}
        for pid in _all_pids():
            st = _proc_stat(pid)
            if st:
                children.setdefault(st[1], []).append(pid)
        seen, todo = set(), list(roots)
        while todo:
            p = todo.pop()
            for c in children.get(p, ()):
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        return seen

    def our_processes(self) -> Dict[int, str]:
        """Live (non-zombie) processes of this cluster: tagged ones, daemons, descendants."""
        tag = ("%s=%s" % (TAG_VAR, self.cluster_id)).encode()
        me = os.getpid()
        roots = {p.pid for p in self.procs.values()} | set(self._known_pids)
        for pid in _all_pids():
            if pid == me:
                continue
            if tag in _proc_env(pid).split(b"\0"):
                roots.add(pid)
            elif _proc_cmdline(pid).startswith("slurmstepd") and _cwd_within(pid, self.workdir):
                # Slurm 24.11's slurmstepd shows an empty environment (its process title
                # overwrites it) and is reparented to init; it keeps slurmd's cwd, our workdir.
                roots.add(pid)
        found = {}
        for pid in roots | self._descendants(roots):
            st = _proc_stat(pid)
            if st and st[0] not in ("Z", "X") and pid != me:
                found[pid] = _proc_cmdline(pid)
        return found

    def stop(self, timeout: float = 15, raise_on_leftovers: bool = True) -> None:
        """Stop everything of this cluster and verify that nothing is left.

        Order: SIGKILL the non-daemons (slurmstepd, job processes, running
        prolog/epilog, found by the HC_SLURMCLUSTER_ID tag and the process tree);
        SIGTERM the slurmd process groups (SIGKILL after min(timeout, 3) s), then
        slurmctld, then munged (SIGKILL after ``timeout``); then SIGKILL whatever
        of ours is still alive until nothing is.  Raises SlurmClusterError if a
        process survives (unless raise_on_leftovers is false).  Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        # Remember everything now: prologs and slurmstepds are reparented once slurmd
        # dies.  Kill the non-daemons (slurmstepd, job processes, a running
        # prolog/epilog) first: slurmd waits for a running prolog when told to stop.
        self._known_pids |= set(self.our_processes())
        daemons = {p.pid for p in self.procs.values()}
        self._kill_pids([pid for pid in self.our_processes() if pid not in daemons])

        # slurmds first, while slurmctld still answers (a slurmd whose prolog was
        # just killed retries its "prolog complete" RPC and won't exit until it
        # gets through), and only a short grace: their state is throw-away.
        self._terminate([p for n, p in self.procs.items() if n.startswith("slurmd-")],
                        min(timeout, 3.0))
        if "slurmctld" in self.procs:
            self._terminate([self.procs["slurmctld"]], timeout)
        for name in ("slurmdbd", "mariadbd"):  # after slurmctld, which reports to slurmdbd
            if name in self.procs:
                self._terminate([self.procs[name]], timeout)
        self._known_pids |= set(self.our_processes())
        if "munged" in self.procs:
            self._terminate([self.procs["munged"]], timeout)

        deadline = time.monotonic() + timeout
        left: Dict[int, str] = {}
        while True:
            left = self.our_processes()
            if not left:
                break
            self._kill_pids(list(left))
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if self.accounting:  # mariadbd has ended: its datadir's tmpfs can go
            from tests.lib.slurmdbd import release_accounting

            release_accounting(self)
        if left and raise_on_leftovers:
            raise SlurmClusterError("processes of cluster %s survived SIGKILL: %s" % (
                self.cluster_id, left))

    @staticmethod
    def _kill_pids(pids: List[int]) -> None:
        """SIGKILL each pid and its process group (never our own group)."""
        mypgid = os.getpgid(0)
        for pid in pids:
            try:
                pgid = os.getpgid(pid)
                if pgid != mypgid and pgid > 1:
                    os.killpg(pgid, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _terminate(self, procs: List[subprocess.Popen], timeout: float):
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            # whatever else is left in the group (slurmd's own children)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def leftover_processes(self) -> Dict[int, str]:
        """After stop(): anything of this cluster still alive (should be empty)."""
        return self.our_processes()


def _brief(info: Dict[str, str]) -> str:
    keys = ("JobState", "Reason", "Restarts", "NodeList", "BatchHost", "ExitCode", "Priority",
            "BeginTime", "EligibleTime")
    return " ".join("%s=%s" % (k, info[k]) for k in keys if k in info)


def _wait_until_or_die(cluster: SlurmCluster, pred, timeout: float, what: str,
                       detail: Optional[Callable[[], str]] = None):
    try:
        return _wait_until(pred, timeout, 0.1, what)
    except TimeoutError as e:
        extra = detail() if detail else ""
        raise SlurmClusterError("%s %s\n%s" % (e, extra, cluster.log_tails())) from None


def main(argv: Optional[List[str]] = None) -> int:
    """Demo / manual use: start a cluster and keep it up until Ctrl-C.

        python3 tests/lib/slurmcluster.py /tmp/hc-demo [--prolog /abs/wrapper] [--nodes a,b,c]
    """
    import argparse
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("workdir")
    ap.add_argument("--nodes", default="gpu-a,gpu-b,gpu-c")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--prolog")
    ap.add_argument("--epilog")
    args = ap.parse_args(argv)
    with SlurmCluster(args.workdir, nodes=args.nodes.split(","), gpus_per_node=args.gpus,
                      prolog=args.prolog, epilog=args.epilog) as c:
        print("cluster up in %.2fs; in another shell:\n  export SLURM_CONF=%s\n"
              "  sinfo; sbatch --gres=gpu:1 --wrap hostname\nCtrl-C stops it."
              % (c.start_seconds, c.conf_path), flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
