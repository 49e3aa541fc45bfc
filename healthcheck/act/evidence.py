"""RMA evidence: the GPU's repair ledger and, where the tool exists, NVIDIA's bug report, copied
into state_dir/evidence/ when a node is marked rma (docs/repair.md); for a node the fabric
sweep's re-test marks rma, the sweep's measurements (docs/network.md).

    files = collect(config, "gpu-a", ledger_of(gpu), events)   # the ledger's copy, at once
    files = collect_fabric(config, "gpu-c", bundle, events)    # gpu-c-fabric-<UTC>.json
    how = start_bug_report(config, "gpu-a", events)             # "systemd unit ...", or None

nvidia-bug-report.sh takes minutes (repair.bug_report_timeout_s, 300 s by default), and the run
that marks rma is HealthCheckProgram, which slurmd kills at 60 s: run there, the kill orphaned
it and lost the run's own journal entries.  So the decision is recorded first (act.repair), and
the report is gathered outside the run: a transient systemd unit (`systemd-run`, config
`repair.systemd_run`; RuntimeMaxSec bounds it as well), else a detached process in a session of
its own.  Either runs this module (`python -m healthcheck.act.evidence`), which runs the tool
with its deadline (its process group ended past it: outside.run_bounded) and size cap
(`repair.bug_report_max_bytes`: a larger report is deleted, and the log says so), and records
the result in the journal and the history when it ends.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from ..config import Config
from ..decide.repair import LedgerRef
from ..model import NOTICE, WARNING, LogEvent
from ..safefile import atomic_write, open_dir, read_file
from ..tools import DEFAULT_PATH, find_tool
from . import ledger

EVIDENCE_DIR = "evidence"
SYSTEMD_RUN_TIMEOUT_S = 15.0  # systemd-run returns once the unit is started
# what the unit may run beyond the report's own deadline: our start and the result's record
UNIT_MARGIN_S = 60


def find_bug_report(configured: Optional[str]) -> Optional[str]:
    if configured:
        return configured if os.path.exists(configured) else None
    return shutil.which("nvidia-bug-report.sh", path=os.environ.get("PATH") or DEFAULT_PATH)


def evidence_dir(config: Config) -> str:
    return os.path.join(config.state_dir, EVIDENCE_DIR)


def collect(config: Config, node: str, key: Optional[LedgerRef], events: List[LogEvent]) -> List[str]:
    """The ledger's copy (a small file: at once); best effort (a failure is logged, the rma
    mark stands)."""
    directory = evidence_dir(config)
    try:
        if key:
            # the GPU's ledger file, or the one an older version kept for it
            raw = next((r for r in (read_file(ledger.ledger_dir(config.state_dir), ledger.ledger_name(k))
                                    for k in (key.key, key.legacy)) if r is not None), None)
            named = os.path.join(directory, naming_name(node, key.key))
            extra = [named] if os.path.exists(named) else []  # how its GPU was named
            if raw is not None:
                name = f"{node}-{key.key}-{_stamp()}-ledger.json"
                atomic_write(directory, name, raw)
                return [os.path.join(directory, name)] + extra
            return extra
    except OSError as exc:
        events.append(LogEvent("error", WARNING, f"evidence for {node}: {exc}"))
    return []


def naming_name(node: str, key: str) -> str:
    return f"{node}-{key}-named.json"


def write_naming(config: Config, node: str, key: str, naming: Dict[str, Any],
                 events: List[LogEvent]) -> bool:
    """How a GPU lost before any run listed it was named, or why nothing names it (decide.
    ledgers.Naming), kept beside the RMA evidence of the ledger `key`: written once, when it is
    first named (the boots that follow may no longer tell it).  Whether it was written now."""
    import json

    directory = evidence_dir(config)
    name = naming_name(node, key)
    try:
        if read_file(directory, name) is not None:
            return False
        atomic_write(directory, name, (json.dumps({"node": node, "ledger": key, **naming}, indent=2,
                                                  sort_keys=True) + "\n").encode())
    except OSError as exc:
        events.append(LogEvent("error", WARNING, f"evidence for {node}: {exc}"))
        return False
    return True


def collect_fabric(config: Config, node: str, bundle: Dict[str, Any], events: List[LogEvent]) -> List[str]:
    """A node marked rma by the fabric sweep's re-test: the sweep's own evidence (decide.
    fabricretest.evidence_bundle: node, partners, figures, sweep id, job ids, the jobs' output
    folder) as one JSON file beside the repair loop's; best effort, as collect."""
    import json

    directory = evidence_dir(config)
    name = f"{node}-fabric-{_stamp()}.json"
    try:
        atomic_write(directory, name, (json.dumps(bundle, indent=2, sort_keys=True) + "\n").encode())
    except OSError as exc:
        events.append(LogEvent("error", WARNING, f"evidence for {node}: {exc}"))
        return []
    return [os.path.join(directory, name)]


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def start_bug_report(config: Config, node: str, events: List[LogEvent]) -> Optional[str]:
    """Start gathering nvidia-bug-report.sh's report outside this run; how it runs, in words
    (None: no tool, or it could not be started, which is logged)."""
    tool = find_bug_report(config.repair.bug_report)
    if not tool:
        return None
    out = os.path.join(evidence_dir(config), f"{node}-{_stamp()}-nvidia-bug-report.log")
    child = [sys.executable, "-m", "healthcheck.act.evidence", "--node", node, "--tool", tool,
             "--output", out] + (["--config", config.source] if config.source else [])
    systemd_run = find_tool("systemd-run", config.repair.systemd_run, os.environ)
    problem = f"no systemd-run at {systemd_run}"
    if os.path.exists(systemd_run):
        from ..outside import run_bounded

        unit = re.sub(r"[^A-Za-z0-9_.-]", "_", f"gpu-healthcheck-evidence-{node}-{_stamp()}")
        keep = [f"--setenv={k}={os.environ[k]}" for k in ("PYTHONPATH", "GPU_HEALTHCHECK_CONFIG")
                if os.environ.get(k)]
        ran = run_bounded([systemd_run, f"--unit={unit}", "--collect", "--quiet",
                           f"--property=RuntimeMaxSec={int(config.repair.bug_report_timeout_s) + UNIT_MARGIN_S}",
                           *keep, "--", *child], SYSTEMD_RUN_TIMEOUT_S, merge_stderr=True)
        if ran.ok:
            return f"systemd unit {unit}.service"
        problem = f"{ran.why()}: {' '.join(ran.text().split())[:200]} (config key repair.systemd_run)"
    from ..outside import start_detached

    pid, error = start_detached(child)
    if pid is None:
        events.append(LogEvent("error", WARNING, f"evidence for {node}: nvidia-bug-report.sh not "
                                                 f"started ({problem}; {error})"))
        return None
    return f"detached process {pid} ({problem})"


def gather(config: Config, node: str, tool: str, out: str) -> LogEvent:
    """Run the report with its deadline and cap (in the unit or the detached process): the
    event that records its result."""
    from ..outside import run_bounded

    directory = os.path.dirname(out)
    timeout = config.repair.bug_report_timeout_s
    fields = {"SLURMD_NODENAME": node, "GPU_HEALTHCHECK_REPAIR_STEP": "evidence",
              "GPU_HEALTHCHECK_REPAIR_ACTION": "rma"}
    try:
        os.close(open_dir(directory, True))  # ours and private, before the tool writes into it
        ran = run_bounded([tool, "--output-file", out], timeout, cap_bytes=64 << 10,
                          merge_stderr=True, cwd=directory)
        found, notes = [], []
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            if not entry.startswith(os.path.basename(out)):
                continue
            if os.path.getsize(path) > config.repair.bug_report_max_bytes:
                os.unlink(path)
                notes.append(f"{path} is larger than repair.bug_report_max_bytes = "
                             f"{config.repair.bug_report_max_bytes}: deleted")
            else:
                found.append(path)
    except OSError as exc:
        return LogEvent("repair", WARNING, f"repair {node}: RMA evidence: {tool}: {exc}", fields)
    if ran.timed_out:
        notes.append(f"{tool} ran past repair.bug_report_timeout_s = {timeout:g} s: ended")
    elif not ran.ok:
        notes.append(ran.why())
    fields["GPU_HEALTHCHECK_EVIDENCE"] = " ".join(found)
    words = f"wrote {', '.join(found)}" if found else "wrote nothing"
    return LogEvent("repair", WARNING if notes or not found else NOTICE,
                    f"repair {node}: RMA evidence: nvidia-bug-report.sh {words}"
                    + (f"; {'; '.join(notes)}" if notes else ""), fields)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m healthcheck.act.evidence --node N --tool PATH --output FILE [--config F]`."""
    from ..config import load_config
    from .sinks import record_now

    parser = argparse.ArgumentParser(prog="python -m healthcheck.act.evidence")
    for name in ("--node", "--tool", "--output"):
        parser.add_argument(name, required=True)
    parser.add_argument("--config")
    args = parser.parse_args(argv)
    config = load_config(args.config, os.environ)
    event = gather(config, args.node, args.tool, args.output)
    record_now(config, event, "repair", args.node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
