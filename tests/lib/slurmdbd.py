"""Slurm accounting for a test cluster: a MariaDB server and a slurmdbd of its own.

    c = SlurmCluster(workdir, nodes=[...], accounting=True)   # slurmcluster.py calls start_accounting
    c.start()          # mariadbd, slurmdbd, then slurmctld with AccountingStorageType=slurmdbd
    stop_slurmdbd(c)   # accounting down: sacct fails as it does on a site whose slurmdbd died

MariaDB (Debian's mariadb-server, 10.11 on Debian 12) runs from `mariadb-install-db` on its own
--datadir, --socket and --port under the cluster's workdir, as root with --user=root, never as
the host's service (the host's mariadb.service is never started or touched; in CI the package
is installed under a policy-rc.d that refuses starts).  slurmdbd reads slurmdbd.conf from
SLURM_CONF's directory (mode 0600, as slurmdbd demands) and listens on a free port of its own.
Both are spawned through the cluster, so they carry its tag and its stop() ends them (after
slurmctld, which reports to slurmdbd).

Three things make the same harness work on Slurm 22.05 to 26.05 and MariaDB 10.11 to 11.8:
- the accounting database exists, and the slurm user is granted it, before slurmdbd starts, so
  slurmdbd's first connection succeeds.  slurmdbd's first connect otherwise fails (unknown
  database), it creates the database and reconnects on the same handle, and libmariadb 3.4
  (Debian 13's MariaDB 11.8) has cleared that handle's options after the failed connect: every
  query then fails with error 5027 ("Number of columns in result set exceeds maximum allowed
  number of columns (=0)") and slurmdbd 24.11/26.05 dies at `_check_mysql_concat_is_sane`;
- innodb_snapshot_isolation is off, the InnoDB behaviour Slurm's queries were written against:
  MariaDB 11.6.2 and later turn it on, and a write conflict between concurrent transactions
  (slurmctld's job records, slurmdbd's rollup) then fails with error 1020 "Record has changed
  since last read".  slurmdbd starts either way; `loose-` makes 10.11, which lacks it, ignore it;
- where the session has a private mount namespace (tests/lib/hermetic.py), the datadir is a
  tmpfs of its own, unmounted by release_accounting after mariadbd ends, so InnoDB's fsyncs do
  not wait on the shared disk (tests/bench/slurmdbd.py prints the start time either way).
The start's two parts are kept in cluster.accounting_seconds ({"mariadb": s, "slurmdbd": s}).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:
    from tests.lib.slurmcluster import SlurmCluster

DB_USER = "slurm"
DB_PASS = "hc-test-only"  # a throw-away server on 127.0.0.1, gone with the test's workdir
DB_NAME = "hc_acct_db"
TMPFS_SIZE = "512m"  # the datadir's: about 150 MiB after mariadb-install-db and Slurm's tables
PROGRAMS = ("mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "sacctmgr", "sacct")


def accounting_missing_reason() -> Optional[str]:
    missing = [p for p in PROGRAMS if not shutil.which(p, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    if missing:
        return ("Slurm accounting in tests needs %s: apt-get install slurmdbd mariadb-server "
                "(under a policy-rc.d that refuses starts)" % ", ".join(missing))
    return None


def start_accounting(cluster: "SlurmCluster") -> None:
    """Before slurmctld: the database, slurmdbd and the cluster's record in it; slurm.conf is
    rewritten to report to this slurmdbd."""
    from tests.lib.hermetic import ENV_MARK
    from tests.lib.slurmcluster import SlurmClusterError, _wait_until_or_die, free_ports

    reason = accounting_missing_reason()
    if reason:
        raise SlurmClusterError(reason)
    t0 = time.monotonic()
    db_port, dbd_port = free_ports(2)
    base = cluster.workdir / "mariadb"
    data, sock = base / "data", base / "mysql.sock"
    data.mkdir(parents=True, exist_ok=True)
    if cluster.accounting_tmpfs and os.environ.get(ENV_MARK) and not os.path.ismount(data):
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(data)],
                                 capture_output=True, text=True, timeout=30)
        if mounted.returncode != 0:
            raise SlurmClusterError("mounting a tmpfs on %s failed: %s" % (data, mounted.stderr.strip()))
    # the same InnoDB settings for the install and the server (a smaller redo log: less tmpfs)
    innodb = ["--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
              "--loose-innodb-snapshot-isolation=OFF"]
    if not (data / "mysql").exists():
        done = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                               "--auth-root-authentication-method=socket", "--skip-test-db", *innodb],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SlurmClusterError("mariadb-install-db failed: %s" % (done.stderr or done.stdout)[-2000:])
    cluster._spawn("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}",
                                f"--port={db_port}", "--bind-address=127.0.0.1", "--user=root",
                                f"--pid-file={base / 'mariadbd.pid'}",
                                f"--log-error={cluster.log_dir / 'mariadbd.log'}", "--skip-log-bin",
                                "--skip-name-resolve", *innodb])

    def sql(statement: str) -> subprocess.CompletedProcess:
        return subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "-u", "root", "-e", statement],
                              capture_output=True, text=True, timeout=30)

    _wait_until_or_die(cluster, lambda: sock.exists() and sql("SELECT 1").returncode == 0, 120,
                       "mariadbd to answer on %s" % sock)
    # the database before slurmdbd's first connection (see the module doc: libmariadb 3.4)
    made = sql(f"CREATE DATABASE IF NOT EXISTS {DB_NAME}; "
               f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}'; "
               f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1'")
    if made.returncode != 0:
        raise SlurmClusterError("creating the accounting database and its user failed: %s" % made.stderr)
    t1 = time.monotonic()
    dbd_conf = cluster.etc_dir / "slurmdbd.conf"
    dbd_conf.write_text("\n".join([
        "# generated by tests/lib/slurmdbd.py",
        "AuthType=auth/munge", f"AuthInfo=socket={cluster.munge_socket}",
        "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}", "SlurmUser=root",
        f"LogFile={cluster.log_dir / 'slurmdbd.log'}", f"PidFile={cluster.run_dir / 'slurmdbd.pid'}",
        "DebugLevel=info", "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
        f"StoragePort={db_port}", f"StorageUser={DB_USER}", f"StoragePass={DB_PASS}",
        f"StorageLoc={DB_NAME}"]) + "\n")
    dbd_conf.chmod(0o600)
    cluster.extra_conf += ["AccountingStorageType=accounting_storage/slurmdbd",
                           "AccountingStorageHost=localhost", f"AccountingStoragePort={dbd_port}",
                           # the munge socket of connections to slurmdbd (AuthInfo is not read for them)
                           f"AccountingStoragePass={cluster.munge_socket}"]
    cluster._write_confs()
    cluster._spawn("slurmdbd", ["slurmdbd", "-D"])
    # the cluster's record: slurmctld registers itself only where it already exists
    last: List[str] = []

    def registered() -> bool:
        added = _sacctmgr(cluster, "-i", "add", "cluster", "hc-test")
        listed = _sacctmgr(cluster, "-n", "-P", "list", "cluster", "format=cluster")
        last[:] = [added.stderr.strip(), listed.stderr.strip()]
        return "hc-test" in listed.stdout.split()

    try:
        _wait_until_or_die(cluster, registered, 120,
                           "slurmdbd to answer sacctmgr")
    except SlurmClusterError as exc:
        raise SlurmClusterError("sacctmgr said: %s\n%s\n%s" % (" / ".join(last), dbd_log(cluster), exc)) from None
    cluster.accounting_seconds = {"mariadb": t1 - t0, "slurmdbd": time.monotonic() - t1}


def release_accounting(cluster: "SlurmCluster") -> None:
    """After mariadbd has ended (the cluster's stop): the datadir's tmpfs goes."""
    data = cluster.workdir / "mariadb" / "data"
    if os.path.ismount(data):
        subprocess.run(["umount", str(data)], capture_output=True, text=True, timeout=30, check=False)


def _sacctmgr(cluster: "SlurmCluster", *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sacctmgr", *args], capture_output=True, text=True, timeout=30, env=cluster.env)


def stop_slurmdbd(cluster: "SlurmCluster", timeout: float = 15) -> None:
    """Accounting down: slurmdbd ends, the database stays."""
    proc = cluster.procs.pop("slurmdbd")
    cluster._terminate([proc], timeout)


def dbd_log(cluster: "SlurmCluster") -> str:
    path = Path(cluster.log_dir / "slurmdbd.log")
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def wait_registered(cluster: "SlurmCluster", timeout: float = 120) -> None:
    """After start: slurmctld has registered with slurmdbd (sacctmgr shows its control port).
    Jobs that end before that reach the database as bare "allocation" records of uid 0, with no
    eligible time, which a window query (`sacct -S`) never returns."""
    from tests.lib.slurmcluster import _wait_until_or_die

    def registered() -> bool:
        out = _sacctmgr(cluster, "-n", "-P", "list", "cluster", "hc-test", "format=ControlPort").stdout.split()
        return bool(out) and out[0] not in ("", "0")

    _wait_until_or_die(cluster, registered, timeout, "slurmctld to register with slurmdbd")
