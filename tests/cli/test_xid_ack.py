"""Xids that are dealt with stay dealt with (issue 13): `--ack`, a new Xid after it counting
again, escalation after repeated acknowledgements, a GPU reset.  Through the real CLI on the
fake GPUs; tests/slurm/test_fault_matrix.py runs it on real Slurm."""

from __future__ import annotations

GPU0 = "0000:18:00"  # the fake's GPU 0 (00000000:18:00.0)


def xid_line(xid: int = 48, pci: str = GPU0, stamp: float = 1234.5) -> str:
    return f"[{stamp:12.6f}] NVRM: Xid (PCI:{pci}): {xid}, pid=4242, name=python, Ch 00000008\n"


def test_xid_ack_stops_an_old_xid_counting_and_a_new_one_counts_again(node):
    node.kernel_log.write_text(xid_line())
    assert node.run("--node", "--json").checks("fail") == ["xid"]
    done = node.run("--ack")
    assert done.rc == 0 and f"{GPU0} Xid 48 x1" in done.stdout, done.stderr
    assert (node.state_dir / "xid-acks.json").exists()
    result = node.run("--node", "--json")
    assert result.rc == 0 and "xid" not in result.checks(), result.stdout
    with node.kernel_log.open("a") as log:
        log.write(xid_line(stamp=2000.0))
    result = node.run("--node", "--json")
    [finding] = [f for f in result.json["findings"] if f["check"] == "xid"]
    assert (finding["gpu"], finding["value"], finding["severity"]) == (0, 48, "fail")
    assert "x1" in node.run("--ack", "--gpus", "0").stdout


def test_xid_ack_of_some_gpus_leaves_the_others_counting(node):
    node.kernel_log.write_text(xid_line() + xid_line(pci="0000:28:00"))
    assert node.run("--ack", "--gpus", "1").rc == 0
    result = node.run("--node", "--json")
    assert [(f["gpu"], f["value"]) for f in result.json["findings"] if f["check"] == "xid"] == [(0, 48)]


def test_xid_a_gpu_failing_again_after_repeated_acknowledgements_escalates_to_rma(node):
    node.write_config("xid_escalate_after = 2")
    node.kernel_log.write_text("")
    for n in range(2):
        with node.kernel_log.open("a") as log:
            log.write(xid_line(stamp=100.0 + n))
        assert node.run("--ack").rc == 0
    with node.kernel_log.open("a") as log:
        log.write(xid_line(stamp=300.0))
    result = node.run("--node", "--json")
    [finding] = [f for f in result.json["findings"] if f["check"] == "xid"]
    assert finding["action"] == "rma" and "fails again after 2 acknowledgements" in finding["message"]
    assert " rma node" in result.json["action"]["reason"]
    assert "will escalate" in node.run("--ack").stdout


def test_ack_usage(node):
    assert node.run("--ack", "--gpus", "9").rc == 3
    assert node.run("--ack", "--act").rc == 3


def test_xid_a_gpu_reset_after_the_xid_deals_with_it_the_init_lines_come_again(node):
    """The driver prints a GPU's init line when it loads and again when it resets the GPU
    (`nvidia-smi -r`): Xids of that GPU logged before it are dealt with; later ones count."""
    init = "[{:12.6f}] NVRM: GPU at PCI:0000:18:00: GPU-fa4e0000-0000-4000-8000-000000000000\n"
    node.kernel_log.write_text(init.format(5.0) + xid_line(stamp=100.0) + xid_line(pci="0000:28:00", stamp=101.0)
                               + init.format(200.0))
    result = node.run("--node", "--json")
    assert [(f["gpu"], f["value"]) for f in result.json["findings"] if f["check"] == "xid"] == [(1, 48)]
    with node.kernel_log.open("a") as log:
        log.write(xid_line(xid=79, stamp=300.0))
    result = node.run("--node", "--json")
    assert sorted((f["gpu"], f["value"]) for f in result.json["findings"] if f["check"] == "xid") == [(0, 79), (1, 48)]
