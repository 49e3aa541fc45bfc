"""Xids dealt with by a GPU reset, on real lines (tests/fixtures/kernel-log): the GPU's identity
line before its Xid leaves it counting, after it deals with it."""

from __future__ import annotations

from tests.lib.fakenode import FIXTURES


def test_xid_real_identity_line_before_an_xid_leaves_it_counting_and_after_it_deals_with_it(tmp_path):
    """Real lines (tests/fixtures/kernel-log, akash-network/support#244): the driver prints the
    GPU's identity line when it initialises the GPU, before that GPU's first Xid."""
    from healthcheck.read.kernlog import read_kernel_log
    from healthcheck.logmodel import KernelLogWindow
    fixtures = FIXTURES / "kernel-log"
    identity = next(l for l in (fixtures / "nvrm-context-lines.txt").read_text().splitlines()
                    if "GPU at PCI:0000:00:05: GPU-" in l)
    xid = next(l.split("\t", 2)[2] for l in (fixtures / "nvrm-xid-lines.tsv").read_text().splitlines()
               if l.startswith("43\t0000:00:05\t"))
    log = tmp_path / "kern.log"
    log.write_text(identity + "\n" + xid + "\n")
    assert [(e.pci, e.xid) for e in read_kernel_log(str(log), KernelLogWindow()).events] == [("0000:00:05", 43)]
    log.write_text(identity + "\n" + xid + "\n" + identity + "\n")  # the GPU was reset after it
    assert read_kernel_log(str(log), KernelLogWindow()).events == ()
