"""The marker protocol against the machine's real /dev/kmsg (issue 22 item 9): OPT-IN ONLY.

It writes one marker record per run into the host's kernel log
("gpu-healthcheck[PID]: gpu-healthcheck test: kernel log position NONCE"), so it is skipped
unless GPU_HEALTHCHECK_TEST_REAL_KMSG=1, and never runs in CI.  The session's own /dev/kmsg is
an empty file (tests/lib/hermetic.py); the host's device is reached through the handle the
isolation kept on the host's root.  Needs root (the write) and a kernel with
printk.devkmsg not `off`.
"""

from __future__ import annotations

import os
import stat

import pytest

from tests.conftest import ISOLATION

OPT_IN = "GPU_HEALTHCHECK_TEST_REAL_KMSG"
DEVICE = ISOLATION.host.path("/dev/kmsg")

pytestmark = pytest.mark.skipif(os.environ.get(OPT_IN) != "1",
                                reason=f"writes a marker into the host's kernel log: set {OPT_IN}=1")


def test_marker_on_the_real_device_gives_the_seq_a_full_read_ends_at():
    from healthcheck.logmodel import window_since
    from healthcheck.read.kernlog import read_kernel_log
    from healthcheck.read.kmsg import current_boot, position_and_why, scan_seq

    if not os.path.exists(DEVICE) or not stat.S_ISCHR(os.stat(DEVICE).st_mode):
        pytest.skip("no /dev/kmsg on this host")
    position, why = position_and_why(DEVICE, marker=True, label="gpu-healthcheck test")
    assert why is None and position.method == "marker", why
    assert position.boot_id == current_boot().boot_id
    last, problem = scan_seq(DEVICE)  # our marker is in the buffer, at or before its end
    assert problem is None and last is not None and last >= position.seq
    read = read_kernel_log(DEVICE, window_since(position, position.boot_id))
    assert read.error is None and read.window == "seq"
    assert read.end.seq is not None and read.end.seq >= position.seq
    assert all(e.seq is None or e.seq > position.seq for e in read.events)
