"""`make bench` has a deep-level row: `--node --level deep` on 8 small fake GPUs, measured by the
bench's own loop (one repetition).  Nothing here looks at a time: it checks that the row exists,
runs the deep level (exit 0) and so keeps it from rotting."""

import json

from tests.bench.bench import DEEP_ROW, build_runs, measure
from tests.bench.harness import SimNode


def test_bench_has_a_deep_row_on_8_fake_gpus_that_runs_the_deep_level(fakegpu, tmp_path):
    node = SimNode(tmp_path)
    runs = build_runs(node, None, "no peer")
    [deep] = [r for r in runs if r.name == DEEP_ROW]
    assert deep.gpus == 8 and deep.argv[-3:] == ["--node", "--level", "deep"]
    measure(node, [deep], 1, warmup=False, log=lambda line: None)
    assert deep.skipped == "" and deep.stats.rcs == [0]
    # the same row with --json: the level that ran is deep, on all 8 boards
    done = node.run(deep.argv + ["--json"], node.env(deep.env_extra))
    doc = json.loads(done.stdout)
    assert done.rc == 0 and doc["level"] == "deep"
    assert sorted(r["gpu"] for r in doc["deep"]["gpus"]) == list(range(8))
