"""The bench (python3 -m tests.bench) still runs: exit 0, a header and one row per run.

Nothing here looks at a time: the bench is not a test, this only keeps it from rotting.
"""

import subprocess
import sys

from tests.lib.fakenode import ROOT

ROWS = [
    ("floor: python3 -c pass", None),
    ("floor: python3 -c 'import pynvml'", None),
    *[(name, n) for n in (1, 8, 64) for name in (
        "ours --prolog", "ours --epilog", "ours --node --level quick", "ours --node --level full")],
    ("console script gpu-healthcheck --prolog", 8),
    *[("gcm health_checks check-nvidia-smi prolog", n) for n in (1, 8, 64)],
]


def test_bench_runs_and_prints_a_row_per_run(fakegpu, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "tests.bench", "--quick", "--reps", "1",
                           "--no-peer", "--json", str(out)],
                          cwd=str(ROOT), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(l.startswith("run ") and "median ms" in l and "x pynvml" in l for l in lines)
    for name, gpus in ROWS:
        col = "-" if gpus is None else str(gpus)
        assert any(l.startswith(name) and l[len(name):].split()[:1] == [col] for l in lines), \
            (name, gpus, done.stdout)
    assert "targets" in lines
    assert out.exists()
