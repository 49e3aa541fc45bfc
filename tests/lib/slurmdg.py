"""Run the real `slurmd -G -N NODE` on a copy of a site's slurm.conf and gres.conf.

    files, output = slurmd_gres(site_dir, "hep-gpu01", tmp_path)   # None where slurmd cannot run

The copy's `/dev/nvidiaN` names point at character devices made with mknod in tmp_path
(slurmd refuses regular files: "gres/gpu count reported lower than configured"), so the real
slurmd parses the site's files (Include lines and all) and prints its device list: one
`Gres Name=gpu ... File=...` line per record it kept, in gres index order.  Slurm 24.11 and
later need a running munged for -G: slurmd_gres returns None there unless the copy's
slurm.conf names one (private_munged, `AuthInfo=socket=...`), and on a host without slurmd.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

CHR = 0o020000


def copy_site(site: Path, into: Path) -> Path:
    """The site's files in `into`, device names under it, device files made where possible."""
    into.mkdir(parents=True, exist_ok=True)
    from healthcheck.read.gres import expand_hostlist

    minors = set()
    for src in site.iterdir():
        if src.suffix != ".conf":
            continue
        text = src.read_text().replace("/dev/nvidia", f"{into}/nvidia")
        (into / src.name).write_text(text)
        for name in re.findall(r"File=(\S+)", text):
            minors.update(int(m.group(1)) for f in expand_hostlist(name)
                          if (m := re.search(r"nvidia(\d+)$", f)))
    if os.geteuid() == 0:
        for minor in minors:
            if not (into / f"nvidia{minor}").exists():
                os.mknod(into / f"nvidia{minor}", 0o666 | CHR, os.makedev(195, minor))
    return into


def slurmd_gres(conf_dir: Path, node: str) -> Optional[Tuple[List[str], str]]:
    """(device file basenames in gres index order, slurmd's output), or None where no slurmd
    -G can run here (not installed, not root, or it needs munged)."""
    if not shutil.which("slurmd", path="/usr/sbin:/usr/bin:/sbin:/bin") or os.geteuid() != 0:
        return None
    done = subprocess.run(["slurmd", "-G", "-N", node], capture_output=True, text=True, timeout=120,
                          env={"SLURM_CONF": str(conf_dir / "slurm.conf"), "PATH": "/usr/sbin:/usr/bin"})
    output = done.stdout + done.stderr
    if "cannot create auth context for auth/munge" in output:
        return None
    from healthcheck.read.gres import expand_hostlist

    files: List[str] = []
    for line in output.splitlines():
        if "gres name=gpu" not in line.lower():
            continue
        found = re.search(r"File=(\S+)", line)
        if found and found.group(1) != "(null)":
            files.extend(os.path.basename(f) for f in expand_hostlist(found.group(1)))
    return files, output


@contextlib.contextmanager
def private_munged(where: Path) -> Iterator[Path]:
    """A munged of our own (its own key and socket under `where`), for the slurmd -G of Slurm
    24.11 and later, which creates a munge credential before it prints the gres list.  Ended
    (SIGTERM, then SIGKILL) when the block ends."""
    munged = shutil.which("munged", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not munged:
        raise FileNotFoundError("munged is not installed")
    where.mkdir(parents=True, exist_ok=True)
    os.chmod(where, 0o755)  # munged wants its socket folder reachable by any uid
    key, socket = where / "munge.key", where / "munge.socket"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    proc = subprocess.Popen([munged, "--foreground", "--force", f"--key-file={key}", f"--socket={socket}",
                             f"--pid-file={where / 'munged.pid'}", f"--log-file={where / 'munged.log'}",
                             f"--seed-file={where / 'munged.seed'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (socket.exists() and subprocess.run(["munge", "-n", "-S", str(socket)],
                                                      capture_output=True, timeout=10).returncode == 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"munged did not answer on {socket} within 20 s")
            time.sleep(0.05)
        yield socket
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
