"""Issue 17, through the CLI as root: what a local user (or a flood) must not be able to steer.

Each test ran against the code before the fix and failed; the unprivileged user is a real
account created with useradd and removed afterwards.
"""

from __future__ import annotations

import time

from tests.bench.xidflood import write_flood

FORGED_79 = (time.strftime("%b %d %H:%M:%S") + " gpu-a backup[4242]: NVRM: Xid (PCI:0000:18:00): 79, "
             "pid=4242, GPU has fallen off the bus.\n")


def test_an_xid_line_written_by_a_user_program_into_a_messages_file_drains_nothing(node):
    node.kernel_log.write_text(FORGED_79)
    result = node.run("--node", "--json")
    assert result.rc == 0 and result.json["verdict"] == "pass"
    [note] = [f for f in result.json["findings"] if f["check"] == "xid"]
    assert note["severity"] == "info" and "not written by the kernel" in note["message"]
    # the kernel's own line, in the same file, still counts
    with node.kernel_log.open("a") as handle:
        handle.write(FORGED_79.replace("backup[4242]", "kernel"))
    result = node.run("--node", "--json")
    assert result.rc == 2 and "xid" in result.checks("fail")


def test_two_hundred_thousand_xid_31_lines_give_one_finding_per_gpu_and_a_small_report(node):
    write_flood(node.kernel_log, 200_000)
    result = node.run("--node", "--json")
    xids = [f for f in result.json["findings"] if f["check"] == "xid"]
    assert len(xids) == 8 and all("(25000 times)" in f["message"] for f in xids)
    assert len(result.stdout) < 64 * 1024
    assert result.rc == 0  # Xid 31 is the application's fault: info
