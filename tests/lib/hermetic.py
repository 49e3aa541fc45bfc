"""The test session's private view of the machine, so that no test can touch the real host.

Why: a refused or invalid config makes the product fall back to its built-in defaults
(state_dir=/var/lib/gpu-healthcheck, /etc/gpu-healthcheck/config.toml, scontrol from PATH or
/usr/bin/scontrol, the journald socket). Run as root on a Slurm login node, a test taking that
path wrote the host's state directory and could reach the production slurmctld (issue 10).
The product keeps no test-only override that a job could trigger; instead the whole test
session runs in its own namespaces, made here before pytest starts any thread:

- a private mount namespace (propagation private, so nothing leaks back), in which the parent
  of every path in HIDDEN becomes a tmpfs that shows the host's entries (see _privatise), the
  hidden path itself an empty directory of that tmpfs: the host may remove and make it again
  while the session runs, and the session still sees its own. A path that does not exist on
  the host (say /etc/gpu-healthcheck) stays absent, but its nearest existing parent becomes
  such a tmpfs, so creating it writes nowhere on the host;
- /etc is always such a tmpfs, so an account a test adds with useradd exists in the session
  only;
- a private network namespace with only loopback up: the test clusters on 127.0.0.1 work,
  while a host slurmctld (on this machine or found through DNS SRV records, Slurm's configless
  lookup) and the host's munged are out of reach.

Child processes (the CLI, slurmd, the prologs it runs) inherit both. Without root the session
uses a user namespace that maps only the caller's own uid. Where the namespaces cannot be made
(root without CAP_SYS_ADMIN, or no unprivileged user namespaces), the session stops with a
message rather than run unisolated. `make demo` uses the same isolation where it can.

HOST keeps handles on the host's root and namespaces, opened before the switch, so that
tests/cli/test_hermetic.py can look at the real host from outside and start a fresh pytest there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import os
import shutil
import socket
import stat
import struct
import tempfile
from typing import Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

# The defaults the product falls back to, and what would let the host's scontrol or munge
# reach the host's daemons.
HIDDEN = (
    "/var/lib/gpu-healthcheck",   # state_dir default: baselines, pending drain, history
    "/etc/gpu-healthcheck",       # the default config file
    "/run/systemd/journal",       # journald's socket
    "/etc/slurm",                 # slurm.conf of the host's cluster (Debian, EL)
    "/etc/slurm-llnl",            # the same on older Debian/Ubuntu
    "/run/slurm",                 # slurmd's configless cache, read by client commands
    "/etc/munge",                 # the host's munge key
    "/run/munge",                 # the host's munged socket
)

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCSIFADDR = 0x8916
IFF_UP = 0x1
SECOND_LOOPBACK = "127.0.0.2"
ENV_MARK = "GPU_HEALTHCHECK_TEST_ISOLATED"
# "pid:root_fd:mnt_fd:net_fd" of the session's host handles, for its pytest-xdist workers
HOST_HANDLES = "GPU_HEALTHCHECK_TEST_HOST_HANDLES"
XDIST_WORKER = "PYTEST_XDIST_WORKER"
HOST_COPY = ".hermetic-host"
COPY_MAX_BYTES = 4 << 20


class IsolationError(RuntimeError):
    pass


class Host(NamedTuple):
    """Handles on the host, opened before the session left its namespaces."""
    root_fd: int   # "/" as the host sees it: /proc/self/fd/<root_fd>/var/lib/... is the host's
    mnt_fd: int    # the host's mount namespace (nsenter --mount=/proc/self/fd/<mnt_fd>)
    net_fd: int    # the host's network namespace
    pid: int       # the process that opened them (fds are per process)

    def path(self, path: str) -> str:
        """Where the host's `path` can be read from inside the session."""
        return f"/proc/self/fd/{self.root_fd}{path}"


class Isolation(NamedTuple):
    host: Host
    how: str                                      # "root" or "user namespace"
    initial: Dict[str, bool]                      # HIDDEN path -> it existed on the host
    host_before: Dict[str, Dict[str, Tuple]]      # snapshot of the host's HIDDEN paths


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise IsolationError(f"{what}: {os.strerror(err)} (errno {err})")


def _mount(libc: ctypes.CDLL, source: Optional[str], target: str, fstype: Optional[str],
           flags: int, data: Optional[str] = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source or fstype} on {target}")


def _tmpfs_like(libc: ctypes.CDLL, path: str) -> None:
    """An empty tmpfs over the directory `path`, with its mode and owner."""
    st = os.stat(path)
    _mount(libc, "tmpfs", path, "tmpfs", 0, "mode=%o" % stat.S_IMODE(st.st_mode))
    try:
        os.chown(path, st.st_uid, st.st_gid)
    except OSError:
        pass  # a user namespace maps only our own uid; the mode is what matters there


def _privatise(libc: ctypes.CDLL, parent: str, hide: Iterable[str] = ()) -> None:
    """Make `parent` a tmpfs that shows the host's entries: the host's directory itself is
    bound, live, at `parent`/.hermetic-host; each directory entry is bound back in place, each
    regular file is copied (a private copy, taken now), anything else becomes a symlink into
    .hermetic-host, and symlinks are copied as they are. A new or replaced entry lands in the
    tmpfs only. (Binding files back instead would go stale, and could not be bound again in a
    nested session, once the host replaced one by a rename.)  A directory named in `hide`
    becomes an empty directory of the tmpfs itself, with the host's mode and owner: nothing of
    the host's is mounted there, so the host removing and making it again changes nothing
    here (a tmpfs mounted over the host's directory went with it, and the session then saw the
    host's new one)."""
    stash = tempfile.mkdtemp(prefix="hermetic-stash-")
    keep = os.path.join(parent, HOST_COPY)
    try:
        _mount(libc, parent, stash, None, MS_BIND | MS_REC)
        _tmpfs_like(libc, parent)
        os.mkdir(keep)
        _mount(libc, stash, keep, None, MS_BIND | MS_REC)
    finally:
        libc.umount2(stash.encode(), MNT_DETACH)
        os.rmdir(stash)
    for name in os.listdir(keep):
        if name == HOST_COPY:
            continue  # a parent privatised already (a nested session): reached through `keep`
        src, dst = os.path.join(keep, name), os.path.join(parent, name)
        st = os.lstat(src)
        if name in hide and stat.S_ISDIR(st.st_mode):
            os.mkdir(dst)
            os.chmod(dst, stat.S_IMODE(st.st_mode))
            try:
                os.chown(dst, st.st_uid, st.st_gid)
            except OSError:
                pass  # a user namespace maps only our own uid; the mode is what matters there
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src), dst)
        elif stat.S_ISDIR(st.st_mode):
            os.mkdir(dst)
            _mount(libc, src, dst, None, MS_BIND | MS_REC)
        elif stat.S_ISREG(st.st_mode) and st.st_size <= COPY_MAX_BYTES:
            # a private copy: tools like useradd refuse a symlinked /etc/passwd and replace the
            # file by rename, which must not reach the host
            shutil.copy2(src, dst, follow_symlinks=False)
            try:
                os.chown(dst, st.st_uid, st.st_gid)
            except OSError:
                pass  # a user namespace maps only our own uid
        else:
            os.symlink(os.path.join(HOST_COPY, name), dst)


def _hidden_parents(initial: Dict[str, bool]) -> Dict[str, Set[str]]:
    """The directories to make private tmpfs (parents before their children, so that a parent's
    copy does not bind the host's directory back over a child made private already), each with
    the names of the hidden directories in it: a HIDDEN path on the host (its real path, which
    may lie behind a symlink) is hidden in its own parent; one not on the host in its nearest
    existing parent, so that making it writes nowhere on the host.  Always /etc."""
    parents: Dict[str, Set[str]] = {"/etc": set()}
    for path in HIDDEN:
        real = os.path.realpath(path)
        if initial[path] and os.path.isdir(real):
            parents.setdefault(os.path.dirname(real), set()).add(os.path.basename(real))
        elif not initial[path]:
            parents.setdefault(_nearest_existing(path), set())
    return dict(sorted(parents.items(), key=lambda item: item[0].count("/")))


def _nearest_existing(path: str) -> str:
    parent = os.path.dirname(path)
    while not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    return parent


def _loopback_up() -> None:
    """Loopback up, plus a second loopback address: glibc's getaddrinfo with AI_ADDRCONFIG
    (Slurm uses it) answers nothing, not even for "127.0.0.1", when the only IPv4 address
    is 127.0.0.1 itself; any other address counts."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
        addr = struct.pack("16sH2s4s8x", b"lo:hermetic", socket.AF_INET, b"\0\0",
                           socket.inet_aton(SECOND_LOOPBACK))
        fcntl.ioctl(s.fileno(), SIOCSIFADDR, addr)


def _unshare(libc: ctypes.CDLL) -> str:
    if os.geteuid() == 0:
        # No user-namespace fallback for root: root mapped into one loses CAP_MKNOD and more,
        # which the Slurm tests need; better to say so than to fail them one by one.
        _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET),
               "unshare(CLONE_NEWNS | CLONE_NEWNET) as root (no CAP_SYS_ADMIN?)")
        return "root"
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0:
        err = os.strerror(ctypes.get_errno())
        raise IsolationError(f"cannot make private mount and network namespaces as uid {uid} "
                             f"(user namespace: {err})")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    return "user namespace"


def snapshot(top: str) -> Dict[str, Tuple]:
    """Every entry under `top`: type, mode, owner, size, mtime and a hash of its content."""
    found: Dict[str, Tuple] = {}
    if not os.path.lexists(top):
        return found
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [""] + sorted(dirnames) + sorted(filenames):
            path = os.path.join(dirpath, name) if name else dirpath
            if name == "" and dirpath != top:
                continue
            st = os.lstat(path)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            found[os.path.relpath(path, top)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode),
                                                 st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns,
                                                 digest)
    return found


def host_snapshot(host: Host) -> Dict[str, Dict[str, Tuple]]:
    return {p: snapshot(host.path(p)) for p in HIDDEN}


def differences(before: Dict[str, Dict[str, Tuple]], after: Dict[str, Dict[str, Tuple]]) -> List[str]:
    out = []
    for top in sorted(set(before) | set(after)):
        b, a = before.get(top, {}), after.get(top, {})
        for rel in sorted(set(b) | set(a)):
            if b.get(rel) != a.get(rel):
                what = "created" if rel not in b else "removed" if rel not in a else "changed"
                out.append(f"{os.path.normpath(os.path.join(top, rel))}: {what}")
    return out


KMSG = "/dev/kmsg"


def _hide_kmsg(libc: ctypes.CDLL) -> None:
    """The session's /dev/kmsg is an empty regular file: a run with the default kernel_log
    writes its marker record (healthcheck/read/kmsg.py) nowhere on the host, and reads nothing
    of the host's kernel log.  The opt-in test of the real device reaches it as Host.path(KMSG)."""
    if not os.path.exists(KMSG):
        return
    fd, empty = tempfile.mkstemp(prefix="hermetic-kmsg-")
    os.close(fd)
    _mount(libc, empty, KMSG, None, MS_BIND)


def _host_handles() -> Host:
    """Handles on the host: "/" and our namespaces as they are now, or, in a pytest-xdist
    worker, the handles its controller opened before it left the host.  A worker starts inside
    the controller's private namespaces, so its own "/" is the controller's private view; it
    isolates again (its own mounts and loopback, so workers share no default path or port) but
    must still see the real host.  Only the controller's direct children take them over: a fresh
    pytest that a test starts isolates from whatever it was started in."""
    pid, *fds = (int(n) for n in os.environ.get(HOST_HANDLES, "0").split(":"))
    if os.environ.get(XDIST_WORKER) and pid == os.getppid() and len(fds) == 3:
        root, mnt, net = (os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY) for fd in fds)
        return Host(root, mnt, net, os.getpid())
    return Host(os.open("/", os.O_RDONLY | os.O_DIRECTORY),
                os.open("/proc/self/ns/mnt", os.O_RDONLY), os.open("/proc/self/ns/net", os.O_RDONLY),
                os.getpid())


def isolate() -> Isolation:
    """Leave the host's mount and network namespaces for private ones (see the module doc).
    Must run before any thread starts (a user namespace requires it)."""
    libc = _libc()
    host = _host_handles()
    initial = {p: os.path.lexists(p) for p in HIDDEN}
    how = _unshare(libc)
    if libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        # EINVAL: a chroot whose root is not a mount point. Its propagation cannot be made
        # private, so a mount made here could show up on the host: refuse.
        err = ctypes.get_errno()
        raise IsolationError(f"cannot make / private ({os.strerror(err)}): in a chroot, bind-mount "
                             "the new root onto itself first")
    # /etc always: a test may add an account (useradd renames /etc/passwd+ over /etc/passwd),
    # and that must land in the session's /etc, not the host's.
    for parent, names in _hidden_parents(initial).items():
        _privatise(libc, parent, names)
    _hide_kmsg(libc)
    _loopback_up()
    # Neither the host's Slurm (SLURM_CONF, a job's SLURM_*) nor a config of the product's
    # may come in through the environment.
    for key in list(os.environ):
        if key.startswith("SLURM") or key == "GPU_HEALTHCHECK_CONFIG":
            del os.environ[key]
    os.environ[ENV_MARK] = how
    if not os.environ.get(XDIST_WORKER):
        os.environ[HOST_HANDLES] = ":".join(map(str, (host.pid, host.root_fd, host.mnt_fd, host.net_fd)))
    return Isolation(host, how, initial, host_snapshot(host))


def reset(isolation: Isolation) -> None:
    """Put the session's private HIDDEN paths back as they were when the session started
    (empty, or absent), so that one test's fallback state cannot reach the next test."""
    for path, existed in isolation.initial.items():
        real = os.path.realpath(path)
        if existed:
            if os.path.isdir(real):
                for name in os.listdir(real):
                    full = os.path.join(real, name)
                    if os.path.isdir(full) and not os.path.islink(full):
                        shutil.rmtree(full)
                    else:
                        os.unlink(full)
        elif os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
