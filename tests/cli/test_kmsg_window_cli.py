"""The JSON says what bounded the Xid window and how the prolog's position was taken (issue 22
item 9), through the real CLI on the fake GPUs.  The node's kernel_log is a regular file (a
recording), whose position is its size; a kmsg character device's is by sequence number
(tests/unit/test_kmsg_seq.py).  With the default kernel_log, the session's /dev/kmsg is an empty
file (tests/lib/hermetic.py): nothing reaches the host's kernel log."""

XID_119 = "NVRM: Xid (PCI:0000:41:00): 119, pid=2139, name=python, Timeout after 6s of waiting for RPC response from GPU2 GSP!"


def test_prolog_and_epilog_report_the_kernel_log_position_and_window(node):
    env = {"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n1", "SLURM_JOB_GPUS": "0"}
    node.kernel_log.write_text(f"6,10,9000000000,-;{XID_119}\n")  # before the job
    prolog = node.run("--prolog", "--json", env=env, scenario="gpus = 1\n")
    assert prolog.rc == 0, prolog.stderr
    assert prolog.json["kernel_log"]["position"]["method"] == "offset"
    assert prolog.json["kernel_log"]["position"]["offset"] == node.kernel_log.stat().st_size
    epilog = node.run("--epilog", "--json", env=env)
    assert epilog.json["kernel_log"]["window"] == "offset"
    assert not [f for f in epilog.json["findings"] if f["check"] == "xid"]  # the old Xid is not the job's


def test_prolog_on_the_sessions_kmsg_writes_nothing_to_the_host(node):
    """kernel_log = /dev/kmsg, the default: the session's is an empty regular file, so the
    position is its size and no marker reaches the host."""
    node.write_config('kernel_log = "/dev/kmsg"')
    result = node.run("--prolog", "--json", env={"SLURM_JOB_ID": "78", "SLURMD_NODENAME": "n1",
                                                  "SLURM_JOB_GPUS": "0"}, scenario="gpus = 1\n")
    assert result.rc == 0, result.stderr
    assert result.json["kernel_log"]["position"]["method"] == "offset"
