"""The repair budget on the real test Slurm when one node's `scontrol update` lands late: with
repair.max_concurrent = 1, two nodes claiming at once never both reset.  gpu-a's updates reach
slurmctld 2.5 s after scontrol returned (a slow RPC slurmctld applies after the caller moved on):
the Comment claim is then no mutex (each node re-reads and sees only the other's, or neither),
while the budget's slot, a reservation of a fixed name that slurmctld refuses a second time,
is.  The slot is gone once the repairs end, and no reservation is left behind."""

from __future__ import annotations

import pytest

from tests.lib.repair import comment, drain_with_dbe, enable_repair, repair_events, wait_for, was_reset

pytestmark = pytest.mark.slurm


def contending(c, node: str, other: str, late: bool) -> str:
    """A scontrol for `node`'s runs, with three hooks, each bounded (60 s):
    - its first repair claim waits until both nodes' runs have come to theirs: the two claims
      are made at once, whatever the host's speed;
    - late: its `update` calls land late, in order, once bin/land-NODE exists (the test makes
      it when the other node's run has ended): scontrol returns at once, and the real call
      runs in the background then.  Slurmctld applies them after the run has moved on;
    - a slot reservation is deleted (the repair is over) only after the other node has tried
      for one (its create returned), so the two repairs' claims always meet."""
    b = c.wd / "bin"
    path = b / f"scontrol-{node}"
    wait = 'n=0; while [ ! -e "{f}" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done'
    delayed = (f'  seq=$(flock "{b}/lock-{node}" sh -c \'n=$(cat "{b}/seq-{node}" 2>/dev/null || echo 0); '
               f'echo $((n+1)) > "{b}/seq-{node}"; echo $n\')\n'
               f'  ( {wait.format(f=b / f"land-{node}")}\n'
               f'    n=0; while [ $seq -gt 0 ] && [ ! -e "{b}/landed-{node}.$((seq-1))" ] && [ $n -lt 1200 ]; do\n'
               f'      sleep 0.05; n=$((n+1)); done\n'
               f'    "{c.scontrol}" "$@"; touch "{b}/landed-{node}.$seq" ) >/dev/null 2>&1 &\n  exit 0\n'
               if late else "  :\n")
    path.write_text(f'#!/bin/sh\ncase "$*" in\n'
                    f'  update*"gpu-healthcheck: repair"*)\n    touch "{b}/claiming-{node}"\n'
                    f'    {wait.format(f=b / f"claiming-{other}")} ;;\n'
                    f'  delete*ReservationName=gpu-healthcheck-repair-*)\n'
                    f'    {wait.format(f=b / f"tried-{other}")} ;;\n'
                    f'esac\n'
                    f'if [ "$1" = update ]; then\n{delayed}fi\n'
                    f'"{c.scontrol}" "$@"; rc=$?\n'
                    f'case "$*" in create*ReservationName=gpu-healthcheck-repair-*) touch "{b}/tried-{node}" ;; esac\n'
                    f'exit $rc\n')
    path.chmod(0o755)
    return str(path)


def reservations(c) -> str:
    return c.cluster.run(["scontrol", "-o", "show", "reservation"], timeout=15).stdout


def test_max_concurrent_one_holds_when_one_nodes_updates_land_late(repair_cluster):
    c = repair_cluster
    for node, other in (("gpu-a", "gpu-b"), ("gpu-b", "gpu-a")):
        enable_repair(c, node, scontrol=contending(c, node, other, late=node == "gpu-a"),
                      top="act_budget_s = 300\nscontrol_timeout_s = 45\n")
    for node in ("gpu-a", "gpu-b"):
        drain_with_dbe(c, node)
    a, b = (c.start_check(node, "--repair") for node in ("gpu-a", "gpu-b"))
    out = {"gpu-b": b.communicate(timeout=240)}
    (c.wd / "bin" / "land-gpu-a").touch()  # gpu-a's updates reach slurmctld once gpu-b is done
    out["gpu-a"] = a.communicate(timeout=240)
    reset = [n for n in ("gpu-a", "gpu-b") if was_reset(c, n)]
    steps = {n: [e["message"] for e in repair_events(c, n)] for n in ("gpu-a", "gpu-b")}
    assert len(reset) == 1, (reset, steps, out)
    other = "gpu-b" if reset == ["gpu-a"] else "gpu-a"
    steps = [e["message"] for e in repair_events(c, other)]
    assert any("stepped back" in m for m in steps), (steps, out)
    # the winner's repair is over: its slot is deleted, nothing is left reserved
    wait_for(lambda: "gpu-healthcheck-repair" not in reservations(c), "the slot to be given back", timeout=30)
    # gpu-a's late updates land too: no claim stays in either Comment
    wait_for(lambda: comment(c, "gpu-a") == "" and comment(c, "gpu-b") == "", "both claims to be cleared",
             timeout=90)
