"""The test session's isolation as this session sees it (tests/lib/hermetic.py), and what
builds, demonstrates and tests this project never stopping or starting a host service.
tests/cli/test_hermetic.py proves the isolation with fresh pytest runs."""

from __future__ import annotations

import os
import re
import socket

from tests.lib import hermetic
from tests.lib.fakenode import ROOT


def test_the_session_sees_none_of_the_hosts_paths_and_no_network_but_loopback(isolation):
    for path in hermetic.HIDDEN:
        mine, hosts = path, isolation.host.path(path)
        if os.path.lexists(hosts):
            assert os.stat(mine).st_dev != os.stat(hosts).st_dev, path  # a private tmpfs
            assert os.listdir(mine) == [], path
        else:
            assert not os.path.lexists(mine), path
    assert [name for _, name in socket.if_nameindex()] == ["lo"]
    assert not any(k.startswith("SLURM") for k in os.environ)
    assert os.readlink("/proc/self/ns/mnt") != os.readlink(f"/proc/self/fd/{isolation.host.mnt_fd}")



def test_a_pytest_xdist_worker_sees_the_real_host_not_its_controllers_private_view(isolation):
    """A worker starts inside its controller's namespaces and isolates again: its host handles
    must still be the host's (those the controller opened), or the tests that look at the real
    host (the kmsg device, a fresh pytest on the host) would look at the controller's tmpfs."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # not under xdist: the parent is the shell or make, on the host
    controller = os.readlink(f"/proc/{os.getppid()}/ns/mnt")
    assert os.readlink(f"/proc/self/fd/{isolation.host.mnt_fd}") != controller
    assert os.readlink("/proc/self/ns/mnt") not in (controller, os.readlink(f"/proc/self/fd/{isolation.host.mnt_fd}"))
    assert os.stat(isolation.host.path("/etc")).st_dev != os.stat(f"/proc/{os.getppid()}/root/etc").st_dev


# What builds, demonstrates and tests this project must leave the host's daemons alone. (The
# packages' own maintainer scripts manage our own units only; they are tested in a throwaway
# root by test_deb.py and are not scanned here.)
SERVICE_CONTROL = re.compile(r"\bsystemctl\b[^\n]*\b(stop|start|restart|reload-or-restart|try-restart|"
                             r"kill|mask|disable|enable|isolate)\b"
                             r"|\bservice\s+\S+\s+(stop|start|restart)\b|\binvoke-rc\.d\b"
                             r"|\bpkill\b|\bkillall\b")


def test_ci_the_makefile_the_demo_and_the_tests_never_stop_or_start_a_host_service():
    files = [ROOT / "Makefile", *sorted((ROOT / ".ci").iterdir()), ROOT / "tests" / "fuzz" / "run",
             *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.sh"))]
    hits = []
    for path in files:
        if not path.is_file() or path.name == "test_hermetic.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = line.split("#", 1)[0] if path.suffix != ".py" else line
            if SERVICE_CONTROL.search(code) and "assert not re.search" not in line:
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == []
    # and the pattern does catch what issue 10 found in the old Makefile and .ci/run
    assert SERVICE_CONTROL.search('for unit in slurmctld slurmd munge; do $SUDO systemctl stop "$unit"')
