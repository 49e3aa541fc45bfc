"""Xids that are dealt with stay dealt with (issue 13): `--ack`, the admin's resume of our
drain, a new Xid after that counting again, and escalation after repeated acknowledgements.
Through the real CLI on the fake GPUs; tests/test_fault_matrix.py runs it on real Slurm."""

from __future__ import annotations

from healthcheck.model import KernelLogPosition, XidEvent
from healthcheck.model import XidAck
from healthcheck.decide.xidack import acknowledge, position_key, unacknowledged
from healthcheck.pci import kernel_pci

GPU0 = "0000:18:00"  # the fake's GPU 0 (00000000:18:00.0)


def xid_line(xid: int = 48, pci: str = GPU0, stamp: float = 1234.5) -> str:
    return f"[{stamp:12.6f}] NVRM: Xid (PCI:{pci}): {xid}, pid=4242, name=python, Ch 00000008\n"


def test_unacknowledged_keeps_what_came_after_each_gpus_acknowledgement():
    pos = KernelLogPosition(source="/k", offset=100, inode=1)
    old = XidEvent(GPU0, 48, "old", occurrences=3)
    other = XidEvent("0000:28:00", 48, "never acknowledged")
    ack = XidAck(pci=GPU0, position=pos, acked_at=1.0)
    assert unacknowledged([old, other], {GPU0: ack}, {position_key(pos): ()}) == (other,)
    new = XidEvent(GPU0, 48, "new", occurrences=1)
    assert unacknowledged([old, other], {GPU0: ack}, {position_key(pos): (new,)}) == (new, other)


def test_an_acknowledgement_counts_only_where_a_failing_xid_was_dealt_with():
    pos = KernelLogPosition(source="/k")
    acks = acknowledge({}, [GPU0, "0000:28:00"], [XidEvent(GPU0, 48, "DBE"), XidEvent("0000:28:00", 13, "app")],
                       pos, None, 5.0, "ack")
    assert (acks[GPU0].count, acks["0000:28:00"].count) == (1, 0)
    assert acknowledge(acks, [GPU0], [XidEvent(GPU0, 79, "off")], pos, None, 6.0, "resume")[GPU0].count == 2
    assert kernel_pci("00000000:18:00.0") == GPU0 and kernel_pci("junk") is None


def test_ack_stops_an_old_xid_counting_and_a_new_one_counts_again(node):
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


def test_ack_of_some_gpus_leaves_the_others_counting(node):
    node.kernel_log.write_text(xid_line() + xid_line(pci="0000:28:00"))
    assert node.run("--ack", "--gpus", "1").rc == 0
    result = node.run("--node", "--json")
    assert [(f["gpu"], f["value"]) for f in result.json["findings"] if f["check"] == "xid"] == [(0, 48)]


def test_a_gpu_failing_again_after_repeated_acknowledgements_escalates_to_rma(node):
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


def test_a_gpu_reset_after_the_xid_deals_with_it_the_init_lines_come_again(node):
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


def test_reinit_lines_are_not_events_of_their_own():
    from healthcheck.read.kernlog import aggregate, iter_events, parse_lines
    lines = [xid_line(), "[  2.0] NVRM: GPU at PCI:0000:18:00: GPU-fa4e0000-0000-4000-8000-000000000000\n"]
    assert [e.xid for e in parse_lines(lines)] == [48]
    assert aggregate(e for e in iter_events(lines) if e is not None).events == ()


def test_real_identity_line_before_an_xid_leaves_it_counting_and_after_it_deals_with_it(tmp_path):
    """Real lines (tests/fixtures/kernel-log, akash-network/support#244): the driver prints the
    GPU's identity line when it initialises the GPU, before that GPU's first Xid."""
    from pathlib import Path
    from healthcheck.read.kernlog import read_kernel_log
    from healthcheck.model import KernelLogWindow
    fixtures = Path(__file__).parent / "fixtures" / "kernel-log"
    identity = next(l for l in (fixtures / "nvrm-context-lines.txt").read_text().splitlines()
                    if "GPU at PCI:0000:00:05: GPU-" in l)
    xid = next(l.split("\t", 2)[2] for l in (fixtures / "nvrm-xid-lines.tsv").read_text().splitlines()
               if l.startswith("43\t0000:00:05\t"))
    log = tmp_path / "kern.log"
    log.write_text(identity + "\n" + xid + "\n")
    assert [(e.pci, e.xid) for e in read_kernel_log(str(log), KernelLogWindow()).events] == [("0000:00:05", 43)]
    log.write_text(identity + "\n" + xid + "\n" + identity + "\n")  # the GPU was reset after it
    assert read_kernel_log(str(log), KernelLogWindow()).events == ()


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_a_corrupt_acks_file_is_an_error_not_a_crash(raw):
    from healthcheck.act.state import acks_from_json
    try:
        acks = acks_from_json(raw)
    except (ValueError, TypeError):
        return
    assert all(isinstance(a, XidAck) for a in acks.values())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_refused_comments_parse_or_are_not_ours(text):
    from healthcheck.decide.verdict import REFUSED_MARK, refused_comment, refused_reason, refused_time
    assert refused_reason(text) is None or text.startswith(REFUSED_MARK)
    refused_time(text)
    comment = refused_comment("gpu-healthcheck: gpu1 gpu.lost=GPU_IS_LOST node " + text[:50], "T")
    assert refused_reason(comment).startswith("gpu-healthcheck: gpu1 gpu.lost=GPU_IS_LOST node")


def test_volatile_counters_below_the_noted_ones_mean_the_gpu_was_reset():
    from healthcheck.model import GpuSnapshot
    from healthcheck.decide.xidack import counters_started_over, volatile_ecc
    dbe = GpuSnapshot(index=0, pci_bus_id="00000000:18:00.0", ecc_volatile_uncorrected=1,
                      ecc_volatile_corrected=5)
    assert volatile_ecc([dbe]) == ((GPU0, 6),)
    assert counters_started_over(((GPU0, 6),), [dbe]) == ()
    assert counters_started_over(((GPU0, 6),), [dbe._replace(ecc_volatile_uncorrected=0, ecc_volatile_corrected=0)]) == (GPU0,)
    assert counters_started_over(((GPU0, 6),), [dbe._replace(ecc_volatile_uncorrected=None)]) == ()
    assert counters_started_over(((GPU0, 6),), [dbe._replace(lost="GPU_IS_LOST", ecc_volatile_uncorrected=0)]) == ()
