"""A real unprivileged account for the tests that must act as an ordinary user (her jobs, her
files), made with useradd and removed after.  The session's /etc is private
(tests/lib/hermetic.py): useradd replaces the session's /etc/passwd, never the host's; -l keeps
the account out of the host's lastlog and faillog.

    with local_user("hc36") as user:
        as_user(user, "sbatch --hold -J name --wrap true", env=cluster.env)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, NamedTuple, Optional


class LocalUser(NamedTuple):
    name: str
    pw_uid: int
    pw_gid: int


@contextmanager
def local_user(prefix: str, shell: str = "/usr/sbin/nologin") -> Iterator[LocalUser]:
    """shell: her login shell; a cluster's users have one (/bin/sh), which slurmd needs where it
    loads her login environment (`su - USER -c env`) for a job."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-l", "--no-create-home", "--shell", shell, name], check=True)
    try:
        with open("/etc/passwd") as handle:
            [entry] = [line.split(":") for line in handle if line.startswith(name + ":")]
        yield LocalUser(name, int(entry[2]), int(entry[3]))
    finally:
        subprocess.run(["userdel", name], check=False)


def as_user(user: LocalUser, script: str, env: Optional[Dict[str, str]] = None,
            cwd: str = "/") -> subprocess.CompletedProcess:
    """`sh -c script` as the user (no supplementary groups), failing the test when it fails."""
    return subprocess.run(["sh", "-c", script], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                          check=True, env=env or {"PATH": "/usr/bin:/bin"}, timeout=30, cwd=cwd,
                          capture_output=True, text=True)


@contextmanager
def open_dir(prefix: str, mode: int) -> Iterator[Path]:
    """A folder in /tmp with `mode` (pytest's tmp is 0700 above each test's folder, which no
    other user can pass), removed after: 0o1777 for one she may write into, as /tmp is; 0o711
    for a cluster's work folder whose slurm.conf and munge socket her sbatch must reach."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(mode)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
