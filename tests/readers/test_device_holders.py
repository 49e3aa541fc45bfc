"""read.procinfo.device_holders on the real /proc: a process that holds a device file open is
found and named by its command line, as `fuser` finds it (nv-hostengine holds /dev/nvidiaN so,
and NVML lists no process of it)."""

from __future__ import annotations

import os
import subprocess
import time

from healthcheck.read.procinfo import device_holders


def test_device_holders_names_a_process_holding_the_file_and_no_other(tmp_path):
    device = tmp_path / "nvidia2"
    device.write_text("")
    other = tmp_path / "nvidia3"
    other.write_text("")
    # argv[0] as DCGM's host engine shows it; the shell keeps fd 3 open on the "device"
    proc = subprocess.Popen(["bash", "-c", f'exec 3<"{device}"; exec -a nv-hostengine sleep 60'],
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        found = ()
        while time.monotonic() < deadline:
            found = device_holders([str(device)], skip=(os.getpid(),))
            if found and "nv-hostengine" in found[0][1]:
                break
            time.sleep(0.05)
        assert found == ((proc.pid, "nv-hostengine 60"),), found
        assert device_holders([str(other)]) == ()
    finally:
        proc.kill()
        proc.wait()
    assert device_holders([str(device)]) == ()
