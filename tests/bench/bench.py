"""Performance benchmark of gpu-healthcheck against its floors and its peer (gcm health_checks).

    python3 -m tests.bench [--reps N] [--quick] [--no-peer] [--no-detect] [--json PATH]
                           [--baseline CHECKOUT]

--baseline adds the 8-GPU prolog rows of another checkout (e.g. a clone of the commit before a
change), interleaved with this one's in the same repetitions, so before and after share the
machine's state.

Every figure is a WHOLE-PROCESS run (spawn to reap) on the fake GPUs of tests/fakegpu, in a temp
node (scenario, config with state_dir / kernel_log / scontrol=/bin/false, state dir): nothing
real is touched.  Median wall time over the repetitions (runs are interleaved, one of each per
repetition, after one untimed warm-up of each), and peak RSS of the main process (VmHWM, see
harness.py).  Ratios are to the two floors measured in the same invocation.  Not a pytest test:
nothing here asserts on a time; tests/cli/test_bench_smoke.py only checks that it still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .harness import ROOT, SimNode, Stats, gpu_list, our_argv
from .peer import PEER_CHECKS, ensure_peer, peer_argv, peer_version

GPU_COUNTS = (1, 8, 64)
JOB_ID = "4242"
RSS_LIMIT_MIB = 30.0


# Simulated board memory (MiB).  Small, so that --level full (which writes and reads back 90 %
# of free memory) stays bounded: the fake's read-back costs CPU (about 2 s per GiB here, most of
# it in the checker's own Python-side comparison, see the report), and 64 GPUs x 1 GiB on 2
# cores would run past the 30 s probe deadline.  1024 for every other run (quick probes 256 MiB).
MEMORY_MIB = 1024
FULL_MEMORY_MIB = 64


HGX_ROW = "ours --prolog (8xH100 HGX: 18 NVLink links each, fabric, counters)"
HGX_SCENARIO = ("gpu.*.name = NVIDIA H100 80GB HBM3\ngpu.*.nvlink.links = 18\n"
                "gpu.*.fabric.state = completed\ngpu.*.nvlink.*.crc_errors = 3\n"
                "gpu.*.nvlink.*.replay_errors = 1\ngpu.*.pcie.replay = 67\n"
                "gpu.*.memory_temperature_c = 39\n")
PCIE_SCENARIO = "gpu.*.nvlink.links = 0\ngpu.*.fabric.state = not_supported\n"
IB_ROW = "ours --prolog (HGX + 8 HCAs x 2 ports in /sys/class/infiniband)"
# --level deep on the fake: its libcuda.so.1 runs the host build of the kernels over host copies
# of each board (tests/fakegpu/cuda_launch.c), so the boards and the bandwidth buffers are small
# (as in tests/cli/test_deep_level.py), the load short (its kernels take their simulated time),
# and the figure is the host side on the fake, never what deep costs on a real GPU.
DEEP_ROW = "ours --node --level deep (fake: 24 MiB boards, 4 MiB bandwidth buffers, 0.5 s load)"
DEEP_MEMORY_MIB = 24
DEEP_CONFIG = "[deep]\nbandwidth_mib = 4\nduration_s = 0.5\n[dcgm]\nenabled = false\n"


def ib_config(node: SimNode) -> Path:
    """The node's config with sysfs_root at a made tree of 8 HCAs x 2 ports (tests/lib/netfixtures.py),
    so the row below pays the network read; the other rows read no /sys/class/infiniband."""
    from tests.lib.netfixtures import make_ib_tree

    root = node.dir / "ib-sys"
    if not root.exists():
        make_ib_tree(root, hcas=8, ports=2)
    path = node.dir / "config-ib.toml"
    path.write_text(node.config.read_text() + f'sysfs_root = "{root}"\n[network]\nexpected_ports = 16\n')
    os.chmod(path, 0o644)
    return path


def deep_config(node: SimNode) -> Path:
    """The node's config with the deep level's bandwidth buffers small and no dcgmi."""
    path = node.dir / "config-deep.toml"
    path.write_text(node.config.read_text() + DEEP_CONFIG)
    os.chmod(path, 0o644)
    return path


def scenario(gpus: int, extra: str = "", memory_mib: int = MEMORY_MIB) -> str:
    return f"gpus = {gpus}\ngpu.*.memory.total_mib = {memory_mib}\n{extra}"


@dataclass
class Run:
    name: str  # unique row label
    kind: str  # floor | ours | console | peer
    gpus: Optional[int]
    argv: List[str]
    env_extra: Dict[str, str] = field(default_factory=dict)
    fake: bool = True
    repo_on_path: bool = True
    repo: Optional[Path] = None  # another checkout's healthcheck/ (--baseline)
    before: Optional[Callable[[], None]] = None  # untimed, before every timed rep
    stats: Stats = field(default_factory=Stats)
    skipped: str = ""  # why not measured
    expect_rc: Tuple[int, ...] = (0,)
    memory_mib: int = MEMORY_MIB
    extra: str = ""  # scenario lines on top of the default (an 8xH100 HGX board each)

    @property
    def key(self) -> str:
        return self.name


def build_runs(node: SimNode, peer_exe, peer_skip: str, baseline: Optional[Path] = None) -> List[Run]:
    py = sys.executable
    runs = [
        Run("floor: python3 -c pass", "floor", None, [py, "-c", "pass"], fake=False,
            repo_on_path=False),
        Run("floor: python3 -c 'import pynvml'", "floor", None, [py, "-c", "import pynvml"],
            fake=False, repo_on_path=False),
    ]
    for n in GPU_COUNTS:
        job = {"SLURM_JOB_ID": JOB_ID, "SLURM_JOB_GPUS": gpu_list(n), "SLURMD_NODENAME": "benchnode"}
        prolog_env = dict(job)

        def prolog_first(env=prolog_env) -> None:
            done = node.run(our_argv("--prolog"), node.env(env))
            if done.rc != 0:
                raise SystemExit(f"bench: untimed prolog before the epilog failed ({done.rc}): "
                                 f"{done.stderr[-500:]}")

        runs += [
            Run("ours --prolog", "ours", n, our_argv("--prolog"), dict(job)),
            Run("ours --epilog", "ours", n, our_argv("--epilog"), dict(job), before=prolog_first),
            Run("ours --node --level quick", "ours", n, our_argv("--node")),
            Run("ours --node --level full", "ours", n, our_argv("--node", "--level", "full"),
                memory_mib=FULL_MEMORY_MIB),
        ]
    # The fake's default GPU is an H100 SXM on NVSwitch (18 NVLink links, fabric registered), so
    # every row above reads NVLink; these two make that explicit: an 8xH100 HGX node with link
    # counters, and the same node as PCIe boards (no NVLink, no fabric) for the difference.
    job8 = {"SLURM_JOB_ID": JOB_ID, "SLURM_JOB_GPUS": gpu_list(8), "SLURMD_NODENAME": "benchnode"}
    runs += [
        Run(HGX_ROW, "ours", 8, our_argv("--prolog"), dict(job8), extra=HGX_SCENARIO),
        Run("ours --prolog (PCIe boards: no NVLink, no fabric)", "ours", 8, our_argv("--prolog"),
            dict(job8), extra=PCIE_SCENARIO),
        Run(IB_ROW, "ours", 8, our_argv("--prolog"),
            {**job8, "GPU_HEALTHCHECK_CONFIG": str(ib_config(node))}, extra=HGX_SCENARIO),
        Run(DEEP_ROW, "ours", 8, our_argv("--node", "--level", "deep"),
            {"GPU_HEALTHCHECK_CONFIG": str(deep_config(node))}, memory_mib=DEEP_MEMORY_MIB),
    ]
    if baseline is not None:
        runs += [
            Run(f"baseline {baseline.name}: ours --prolog", "baseline", 8, our_argv("--prolog"),
                dict(job8), repo=baseline),
            Run(f"baseline {baseline.name}: {HGX_ROW}", "baseline", 8, our_argv("--prolog"),
                dict(job8), extra=HGX_SCENARIO, repo=baseline),
        ]
    # the venv's own console script when the venv is not on PATH (`make bench`)
    beside = os.path.join(os.path.dirname(sys.executable), "gpu-healthcheck")
    console = shutil.which("gpu-healthcheck") or (beside if os.access(beside, os.X_OK) else None)
    runs.append(Run("console script gpu-healthcheck --prolog", "console", 8,
                    [console or "gpu-healthcheck", "--prolog"],
                    {"SLURM_JOB_ID": JOB_ID, "SLURM_JOB_GPUS": gpu_list(8)},
                    skipped="" if console else "not installed (no gpu-healthcheck on PATH)"))
    for n in GPU_COUNTS:
        argv = peer_argv(peer_exe, node.dir / "gcm-logs", n) if peer_exe else []
        runs.append(Run("gcm health_checks check-nvidia-smi prolog", "peer", n, argv,
                        {"SLURM_JOB_ID": JOB_ID, "SLURM_JOB_GPUS": gpu_list(n)},
                        repo_on_path=False, skipped=peer_skip))
    return runs


def measure(node: SimNode, runs: List[Run], reps: int, warmup: bool, log) -> None:
    live = [r for r in runs if not r.skipped]
    passes = ([False] if warmup else []) + [True] * reps
    for i, timed in enumerate(passes):
        log(f"bench: {'warm-up' if not timed else f'rep {i + (0 if warmup else 1)}/{reps}'}")
        for run in live:
            if run.gpus is not None:
                node.write_scenario(scenario(run.gpus, run.extra, memory_mib=run.memory_mib))
            if run.before:
                run.before()
            sample = node.run(run.argv, node.env(run.env_extra, fake=run.fake,
                                                 repo_on_path=run.repo_on_path, repo=run.repo))
            if sample.rc not in run.expect_rc:
                run.skipped = (f"exit {sample.rc} (expected {run.expect_rc}): "
                               f"{(sample.stderr or sample.stdout).strip()[-300:]}")
                log(f"bench: {run.name} [{run.gpus}] {run.skipped}")
                live = [r for r in live if r is not run]
                continue
            if timed:
                sample.stdout = sample.stderr = ""
                run.stats.samples.append(sample)


def _find(runs: List[Run], name: str, gpus: Optional[int]) -> Optional[Run]:
    for run in runs:
        if run.name == name and run.gpus == gpus and run.stats.samples:
            return run
    return None


def evaluate(runs: List[Run]) -> List[Dict[str, Any]]:
    """Each target: what it compares, the measured value, MET / NOT MET / n/a."""
    floor = _find(runs, "floor: python3 -c 'import pynvml'", None)
    targets: List[Dict[str, Any]] = []

    def add(target: str, row: Optional[Run], value: Optional[float], limit: float,
            unit: str, higher_is_better: bool = False, note: str = "",
            shown_on: Optional[Run] = None) -> None:
        if row is None or value is None:
            status = "n/a"
        elif higher_is_better:
            status = "MET" if value >= limit else "NOT MET"
        else:
            status = "MET" if value <= limit else "NOT MET"
        shown = shown_on or row
        targets.append({"target": target, "row": f"{row.name} [{row.gpus}]" if row else None,
                        "shown_on": f"{shown.name} [{shown.gpus}]" if shown else None,
                        "value": None if value is None else round(value, 3), "limit": limit,
                        "unit": unit, "status": status, "note": note})

    def ratio(row: Optional[Run], base: Optional[Run]) -> Optional[float]:
        return row.stats.median_s / base.stats.median_s if row and base else None

    for name, limit in (("ours --prolog", 2.0), ("ours --epilog", 1.5),
                        ("ours --node --level quick", 1.5)):
        row = _find(runs, name, 8)
        add(f"{name} (8 GPUs) <= {limit}x import-pynvml floor", row, ratio(row, floor), limit, "x")
    row = _find(runs, HGX_ROW, 8)
    add(f"{HGX_ROW} <= 2.0x import-pynvml floor", row, ratio(row, floor), 2.0, "x")
    row = _find(runs, IB_ROW, 8)
    add(f"{IB_ROW} <= 2.0x import-pynvml floor", row, ratio(row, floor), 2.0, "x")
    for name in ("ours --prolog", "ours --epilog", "ours --node --level quick",
                 "ours --node --level full"):
        row64, row8 = _find(runs, name, 64), _find(runs, name, 8)
        add(f"{name}: 64 GPUs <= 1.5x 8 GPUs", row64, ratio(row64, row8), 1.5, "x")
    ours = [r for r in runs if r.kind == "ours" and r.stats.samples]
    worst = max(ours, key=lambda r: r.stats.rss_main_mib or r.stats.rss_tree_mib, default=None)
    add(f"peak RSS of the main process <= {RSS_LIMIT_MIB:g} MiB (worst of ours)", worst,
        (worst.stats.rss_main_mib or worst.stats.rss_tree_mib) if worst else None,
        RSS_LIMIT_MIB, "MiB")
    for n in GPU_COUNTS:
        peer, mine = _find(runs, "gcm health_checks check-nvidia-smi prolog", n), _find(runs, "ours --prolog", n)
        speedup = peer.stats.median_s / mine.stats.median_s if peer and mine else None
        add(f">= 8x faster than gcm on the same checks ({n} GPUs, prolog vs prolog)",
            mine if peer else None, speedup, 8.0, "x", higher_is_better=True,
            note="ours also runs a CUDA allocation probe on every job GPU; gcm does not",
            shown_on=peer)
    return targets


def row_targets(run: Run, targets: List[Dict[str, Any]]) -> str:
    label = f"{run.name} [{run.gpus}]"
    parts = [f"{_short(t)} {t['status']}" for t in targets
             if t["shown_on"] == label and t["status"] != "n/a" and "RSS" not in t["target"]]
    if run.kind == "ours" and run.stats.samples:
        rss = run.stats.rss_main_mib or run.stats.rss_tree_mib
        parts.append(f"RSS<={RSS_LIMIT_MIB:g}MiB {'MET' if rss <= RSS_LIMIT_MIB else 'NOT MET'}")
    return "; ".join(parts)


def _short(t: Dict[str, Any]) -> str:
    text = t["target"]
    if "gcm" in text:
        return f"gcm/ours={t['value']:.2f}x (>=8x)"
    if "64 GPUs" in text:
        return f"<=1.5x 8-GPU ({t['value']:.2f}x)"
    return f"<={t['limit']:g}x pynvml ({t['value']:.2f}x)"


def print_table(runs: List[Run], targets: List[Dict[str, Any]], out=sys.stdout) -> None:
    f_pass = _find(runs, "floor: python3 -c pass", None)
    f_nvml = _find(runs, "floor: python3 -c 'import pynvml'", None)
    head = (f"{'run':44} {'gpus':>4} {'median ms':>9} {'min ms':>8} {'x pass':>6} {'x pynvml':>8} "
            f"{'RSS main MiB':>12} {'RSS tree MiB':>12}  targets")
    print(head, file=out)
    print("-" * len(head), file=out)
    for run in runs:
        gpus = "-" if run.gpus is None else str(run.gpus)
        if not run.stats.samples:
            print(f"{run.name:44} {gpus:>4} {'unavailable: ' + (run.skipped or 'no samples')}",
                  file=out)
            continue
        s = run.stats
        xp = s.median_s / f_pass.stats.median_s if f_pass else float("nan")
        xn = s.median_s / f_nvml.stats.median_s if f_nvml else float("nan")
        main = f"{s.rss_main_mib:.1f}" if s.rss_main_mib else "-"
        print(f"{run.name:44} {gpus:>4} {s.median_s * 1e3:9.1f} {s.min_s * 1e3:8.1f} {xp:6.2f} "
              f"{xn:8.2f} {main:>12} {s.rss_tree_mib:12.1f}  {row_targets(run, targets)}",
              file=out)
    print(file=out)
    print("targets", file=out)
    for t in targets:
        value = "-" if t["value"] is None else f"{t['value']:g}{t['unit'] if t['unit'] != 'x' else 'x'}"
        print(f"  {t['status']:8} {t['target']:72} measured {value}"
              + (f"  ({t['note']})" if t["note"] and t["status"] != "n/a" else ""), file=out)


# --- detection matrix ------------------------------------------------------------------------

FAULTS = [
    # name, scenario lines (with {pid}), our matching check
    ("DBE (gpu.2.ecc.volatile.uncorrected = 1)", "gpu.2.ecc.volatile.uncorrected = 1\n",
     "ecc.volatile_uncorrected"),
    ("row-remap failure (gpu.3.remap.failure = 1)", "gpu.3.remap.failure = 1\n", "remap.failure"),
    ("leftover process (gpu.1.processes = PID:1000)", "gpu.1.processes = {pid}:1000\n",
     "processes.leftover"),
    ("lost GPU (gpu.5.lost = 1)", "gpu.5.lost = 1\n", "gpu.lost"),
]


def _our_detect(node: SimNode, mode: str, check: str) -> Dict[str, Any]:
    if mode == "prolog":
        argv, env = our_argv("--prolog", "--json"), {"SLURM_JOB_ID": "5151",
                                                      "SLURM_JOB_GPUS": gpu_list(8)}
    else:
        argv, env = our_argv("--node", "--json"), {}
    sample = node.run(argv, node.env(env))
    try:
        found = [f for f in json.loads(sample.stdout)["findings"] if f["check"] == check]
    except (ValueError, KeyError):
        found = []
    severity = found[0]["severity"] if found else None
    ok = (sample.rc != 0 if mode == "prolog" else sample.rc == 2) and bool(found)
    return {"detected": ok, "rc": sample.rc, "finding": f"{check}:{severity}" if found else None}


def _peer_detect(node: SimNode, exe, mode: str) -> Dict[str, Any]:
    argv = peer_argv(exe, node.dir / "gcm-logs", 8, mode=mode, verbose=True)
    env = node.env({"SLURM_JOB_ID": "5151", "SLURM_JOB_GPUS": gpu_list(8)}, repo_on_path=False)
    sample = node.run(argv, env)
    # --verbose-out: "<STATUS> - nvidia smi. " then one message per check (several lines)
    text = sample.stdout.split(" - nvidia smi. ", 1)[-1]
    lines = [l.strip() for l in text.splitlines()
             if "GPU" in l and "ExitCode.OK" not in l and "No other process" not in l]
    return {"detected": sample.rc in (1, 2), "rc": sample.rc,
            "finding": ("; ".join(lines)[:160] if lines else None)}


def detection(node: SimNode, peer_exe, log) -> List[Dict[str, Any]]:
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    rows = []
    try:
        for name, lines, check in FAULTS:
            log(f"bench: detection: {name}")
            node.write_scenario(scenario(8, lines.format(pid=sleeper.pid)))
            row: Dict[str, Any] = {"fault": name, "our_check": check,
                                   "ours --node": _our_detect(node, "node", check),
                                   "ours --prolog": _our_detect(node, "prolog", check)}
            for mode in ("prolog", "nagios"):
                row[f"gcm {mode}"] = (_peer_detect(node, peer_exe, mode) if peer_exe
                                      else {"detected": None, "rc": None, "finding": "unavailable"})
            rows.append(row)
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    return rows


DETECT_COLUMNS = ("ours --node", "ours --prolog", "gcm prolog", "gcm nagios")


def print_detection(rows: List[Dict[str, Any]], out=sys.stdout) -> None:
    print("detection matrix (8 GPUs; ours: --node exit 2 / --prolog non-zero, with the matching "
          "finding; gcm: exit 1 or 2)", file=out)
    print(f"  {'fault':48} " + " ".join(f"{c:>16}" for c in DETECT_COLUMNS), file=out)
    for row in rows:
        cells = []
        for col in DETECT_COLUMNS:
            cell = row[col]
            mark = "n/a" if cell["detected"] is None else "YES" if cell["detected"] else "no"
            cells.append(f"{mark + ' (rc ' + str(cell['rc']) + ')':>16}")
        print(f"  {row['fault']:48} " + " ".join(cells), file=out)
    for row in rows:
        for col in DETECT_COLUMNS:
            if row[col]["finding"]:
                print(f"    {row['fault'][:28]:28} {col:14} {row[col]['finding']}", file=out)


# --- main ------------------------------------------------------------------------------------

def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, help="timed repetitions of each run (default 15, "
                        "3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="CI smoke: 3 repetitions, no warm-up")
    parser.add_argument("--no-peer", action="store_true", help="skip gcm (no venv, no pip)")
    parser.add_argument("--no-detect", action="store_true", help="skip the detection matrix")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    parser.add_argument("--baseline", metavar="CHECKOUT", type=Path,
                        help="also time the 8-GPU prologs of this checkout, interleaved")
    args = parser.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "healthcheck" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no healthcheck/ package there")
    reps = args.reps if args.reps is not None else (3 if args.quick else 15)
    if reps < 1:
        parser.error("--reps must be >= 1")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    peer_exe, peer_skip = None, "skipped (--no-peer)"
    if not args.no_peer:
        peer_exe, why = ensure_peer(log)
        peer_skip = "" if peer_exe else f"unavailable: {why}"
        if why:
            print(f"peer (gcm) {peer_skip}")
    node = SimNode()
    started = time.time()
    try:
        runs = build_runs(node, peer_exe, peer_skip,
                          args.baseline.resolve() if args.baseline is not None else None)
        measure(node, runs, reps, warmup=not args.quick and reps > 1, log=log)
        targets = evaluate(runs)
        matrix = [] if args.no_detect else detection(node, peer_exe, log)
    finally:
        node.cleanup()

    print(f"gpu-healthcheck bench: {reps} rep(s), median of whole-process runs on fake GPUs "
          f"({MEMORY_MIB} MiB each, {FULL_MEMORY_MIB} MiB for --level full); "
          f"python {platform.python_version()}, {os.cpu_count()} CPU(s)"
          + (f"; peer gcm {peer_version(peer_exe)} checks {','.join(PEER_CHECKS)}" if peer_exe else ""))
    print_table(runs, targets)
    if matrix:
        print()
        print_detection(matrix)
    if args.json:
        doc = {"schema": 1, "started_at": started, "reps": reps,
               "python": platform.python_version(), "cpus": os.cpu_count(),
               "peer": {"available": bool(peer_exe), "why_not": peer_skip or None,
                        "version": peer_version(peer_exe) if peer_exe else None,
                        "checks": list(PEER_CHECKS)},
               "runs": [{"name": r.name, "kind": r.kind, "gpus": r.gpus, "argv": r.argv,
                         "skipped": r.skipped or None,
                         "median_s": r.stats.median_s if r.stats.samples else None,
                         "min_s": r.stats.min_s if r.stats.samples else None,
                         "wall_s": [round(s.wall_s, 5) for s in r.stats.samples],
                         "rss_main_mib": r.stats.rss_main_mib if r.stats.samples else None,
                         "rss_tree_mib": r.stats.rss_tree_mib if r.stats.samples else None}
                        for r in runs],
               "targets": targets, "detection": matrix}
        with open(args.json, "w") as handle:
            json.dump(doc, handle, indent=2)
    return 0
