"""RMA evidence: the GPU's repair ledger and, where the tool exists, NVIDIA's bug report, copied
into state_dir/evidence/ when a node is marked rma (README "Repair").

    files = collect(config, "gpu-a", ledger_of(gpu), events)   # the paths written

nvidia-bug-report.sh (config `repair.bug_report`) runs with a deadline
(`repair.bug_report_timeout_s`, its process group killed past it) and a size cap
(`repair.bug_report_max_bytes`: a larger report is deleted, and the log says so).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import List, Optional

from ..config import Config
from ..decide.repair import LedgerRef
from ..model import WARNING, LogEvent
from ..safefile import atomic_write, read_file
from . import ledger
from ..tools import DEFAULT_PATH

EVIDENCE_DIR = "evidence"


def find_bug_report(configured: Optional[str]) -> Optional[str]:
    if configured:
        return configured if os.path.exists(configured) else None
    return shutil.which("nvidia-bug-report.sh", path=os.environ.get("PATH") or DEFAULT_PATH)


def collect(config: Config, node: str, key: Optional[LedgerRef], events: List[LogEvent]) -> List[str]:
    """Write the evidence; best effort (a failure is logged, the rma mark stands)."""
    directory = os.path.join(config.state_dir, EVIDENCE_DIR)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    files: List[str] = []
    try:
        if key:
            # the GPU's ledger file, or the one an older version kept for it
            raw = next((r for r in (read_file(ledger.ledger_dir(config.state_dir), ledger.ledger_name(k))
                                    for k in (key.key, key.legacy)) if r is not None), None)
            if raw is not None:
                name = f"{node}-{key.key}-{stamp}-ledger.json"
                atomic_write(directory, name, raw)
                files.append(os.path.join(directory, name))
        tool = find_bug_report(config.repair.bug_report)
        if tool:
            files += _bug_report(tool, directory, f"{node}-{stamp}-nvidia-bug-report.log", config, events)
    except OSError as exc:
        events.append(LogEvent("error", WARNING, f"evidence for {node}: {exc}"))
    return files


def _bug_report(tool: str, directory: str, name: str, config: Config,
                events: List[LogEvent]) -> List[str]:
    import signal
    import subprocess

    out = os.path.join(directory, name)
    try:
        proc = subprocess.Popen([tool, "--output-file", out], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd=directory, start_new_session=True)
    except OSError as exc:
        events.append(LogEvent("error", WARNING, f"{tool}: {exc}"))
        return []
    try:
        proc.wait(timeout=config.repair.bug_report_timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        events.append(LogEvent("error", WARNING, f"{tool} ran past repair.bug_report_timeout_s = "
                                                 f"{config.repair.bug_report_timeout_s:g} s: killed"))
    found = []
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if not entry.startswith(name):
            continue
        if os.path.getsize(path) > config.repair.bug_report_max_bytes:
            os.unlink(path)
            events.append(LogEvent("error", WARNING, f"{path} is larger than repair.bug_report_max_bytes "
                                                     f"= {config.repair.bug_report_max_bytes}: deleted"))
        else:
            found.append(path)
    return found
