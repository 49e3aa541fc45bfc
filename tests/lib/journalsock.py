"""A journald-shaped socket of our own, and the entries that arrive on it through the real
native protocol (what journald's server reads): the CLI's libsystemd sends to
/run/systemd/journal/socket, which a test binds to this socket's folder in a private mount
namespace (`unshare -m`), so nothing reaches the host's journald.

    fake = FakeJournal(tmp_path / "journal")
    proc = subprocess.Popen(private_run_argv(fake.directory, argv), env=..., ...)
    fake.drain_while(proc)        # fake.entries: one dict per entry, KEY -> value
"""

from __future__ import annotations

import os
import shlex
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

Entry = Dict[str, str]


# --- the native protocol, as journald's server reads it ----------------------------------

def parse_native(data: bytes) -> Entry:
    """KEY=value\\n items, or KEY\\n<uint64 LE size><bytes>\\n for values holding newlines."""
    entry: Entry = {}
    pos = 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        eq = data.find(b"=", pos, nl)
        if eq >= 0:
            entry[data[pos:eq].decode()] = data[eq + 1:nl].decode("utf-8", "replace")
            pos = nl + 1
        else:
            key = data[pos:nl].decode()
            (size,) = struct.unpack("<Q", data[nl + 1:nl + 9])
            start = nl + 9
            entry[key] = data[start:start + size].decode("utf-8", "replace")
            assert data[start + size:start + size + 1] == b"\n", "binary value not closed by \\n"
            pos = start + size + 1
    return entry


def receive(sock: socket.socket) -> Optional[Entry]:
    """One datagram, or the memfd libsystemd passes with SCM_RIGHTS for a large entry."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 22, 4)
    except socket.timeout:
        return None
    for fd in fds:
        try:
            size = os.fstat(fd).st_size
            data += os.pread(fd, size, 0)
        finally:
            os.close(fd)
    return parse_native(data)


class FakeJournal:
    """A journald-shaped socket in tmp, and the entries that arrive on it."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.directory = directory
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(directory / "socket"))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.settimeout(0.1)
        self.entries: List[Entry] = []

    def drain_while(self, proc: "subprocess.Popen[str]", timeout: float = 120) -> None:
        # read while the child runs: a full receive queue would block its sendmsg
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            entry = receive(self.sock)
            if entry is not None:
                self.entries.append(entry)
        while True:
            entry = receive(self.sock)
            if entry is None:
                break
            self.entries.append(entry)

    def close(self) -> None:
        self.sock.close()



def private_run_argv(journal_dir: Optional[Path], argv: Sequence[str]) -> List[str]:
    """`argv` under `unshare -m` with a fresh /run: our socket's folder on /run/systemd/journal,
    or no journal at all (journal_dir None)."""
    script = "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal"
    if journal_dir is not None:
        script += f" && mount --bind {shlex.quote(str(journal_dir))} /run/systemd/journal"
    script += " && exec " + " ".join(shlex.quote(a) for a in argv)
    return ["unshare", "-m", "sh", "-c", script]
