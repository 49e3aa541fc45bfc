"""The real local Slurm harness (tests/lib/slurmcluster.py): the wrapper it writes for slurmd,
run as slurmd runs it (without PATH)."""

from __future__ import annotations

import subprocess

from tests.lib.slurmcluster import write_wrapper


def test_write_wrapper_quoting(tmp_path):
    target = tmp_path / "show.sh"
    target.write_text('#!/bin/sh\n/usr/bin/env > "$OUT"\necho "$@" >> "$OUT.args"\n')
    target.chmod(0o755)
    weird = 'a b "c" \\d `e` $$HOME $ f\nline2'
    w = write_wrapper(tmp_path / "w.sh", str(target), {
        "OUT": str(tmp_path / "env.txt"),
        "PER_NODE": "/wd/scenarios/$SLURMD_NODENAME.scenario",
        "BRACED": "${SLURMD_NODENAME}x",
        "WEIRD": weird,
        "LITERAL": "$SLURMD_NODENAME",
    }, args=["fixed arg"])
    # the literal one must stay literal only with expand=False
    w2 = write_wrapper(tmp_path / "w2.sh", str(target), {"OUT": str(tmp_path / "env2.txt"),
                                                        "LIT": "$SLURMD_NODENAME $$"},
                       expand=False)
    clean = {"SLURMD_NODENAME": "gpu-b"}  # like slurmd: no PATH
    subprocess.run([str(w), "extra"], env=clean, check=True)
    subprocess.run([str(w2)], env=clean, check=True)
    got = dict(l.split("=", 1) for l in (tmp_path / "env.txt").read_text().split("\n")
               if "=" in l and not l.startswith("line2"))
    assert got["PER_NODE"] == "/wd/scenarios/gpu-b.scenario"
    assert got["BRACED"] == "gpu-bx"
    assert got["LITERAL"] == "gpu-b"
    assert (tmp_path / "env.txt").read_text().count('WEIRD=a b "c" \\d `e` $HOME $ f\nline2') == 1
    assert (tmp_path / "env.txt.args").read_text() == "fixed arg extra\n"
    got2 = (tmp_path / "env2.txt").read_text()
    assert "LIT=$SLURMD_NODENAME $$\n" in got2
