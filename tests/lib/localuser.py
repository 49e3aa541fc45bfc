"""A real unprivileged account for the tests that must act as an ordinary user (her jobs, her
files), made with useradd and removed after.  The session's /etc is private
(tests/lib/hermetic.py): useradd replaces the session's /etc/passwd, never the host's; -l keeps
the account out of the host's lastlog and faillog.

    with local_user("hc36") as user:
        as_user(user, "sbatch --hold -J name --wrap true", env=cluster.env)
"""

from __future__ import annotations

import subprocess
import uuid
from contextlib import contextmanager
from typing import Dict, Iterator, NamedTuple, Optional


class LocalUser(NamedTuple):
    name: str
    pw_uid: int
    pw_gid: int


@contextmanager
def local_user(prefix: str) -> Iterator[LocalUser]:
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-l", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True)
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
