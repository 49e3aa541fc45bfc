"""One door to outside programs (docs/architecture.md): only healthcheck/outside.py starts a
program (run_bounded: its output read as it comes, up to its cap, the rest read and dropped; a
deadline that ends its process group; start_detached for the one that must outlive the run).
Read from the source's syntax tree, never run: a new call site anywhere else fails here."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

PACKAGE = Path(__file__).resolve().parents[2] / "healthcheck"
DOOR = PACKAGE / "outside.py"
# what starts a program, or reads one's output whole: the modules and the os functions
STARTERS = {"subprocess", "pty", "multiprocessing", "asyncio.subprocess"}
OS_STARTERS = {"system", "popen", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve",
               "spawnvp", "spawnvpe", "execl", "execle", "execlp", "execlpe", "execv", "execve",
               "execvp", "execvpe", "posix_spawn", "posix_spawnp"}
# os.fork: the CUDA probe's children run our own code (read/cudaprobe.py), no outside program
FORK_ALLOWED = {PACKAGE / "read" / "cudaprobe.py"}


def starters(path: Path) -> List[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name in STARTERS]
        elif isinstance(node, ast.ImportFrom) and node.module in STARTERS | {"os"}:
            names = [a.name for a in node.names]
            if node.module != "os" or set(names) & (OS_STARTERS | {"fork"}):
                found.append(f"from {node.module} import {', '.join(names)}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr in OS_STARTERS or (node.attr == "fork" and path not in FORK_ALLOWED):
                found.append(f"os.{node.attr}")
    return [f"{path.relative_to(PACKAGE.parent)}:{what}" for what in found]


def test_only_outside_py_starts_an_outside_program():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != DOOR for hit in starters(path)]
    assert found == [], found


def test_the_door_itself_is_found_by_this_scan():
    """The scan sees what it looks for: outside.py's own subprocess use."""
    assert any("subprocess" in hit for hit in starters(DOOR))
