"""The package's shape, read from its source (never run): room-to-room import counts and the
longest functions; with --import-time, `gpu-healthcheck --prolog`'s import time of our modules
(python -X importtime, the sum of healthcheck.* cumulative times of the top-level imports).

    python3 -m tests.bench.rooms [--import-time]

Printed, never asserted (tests/unit/test_architecture.py holds the rules).
"""

from __future__ import annotations

import ast
import collections
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "healthcheck"
ROOMS = ("read", "checks", "decide", "act", "report", "commands")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> Set[str]:
    """Every healthcheck module this file imports, at the top or inside a function."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "healthcheck")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "healthcheck":
                continue
            found.add(target)
            # `from . import nvml` names a module, `from .model import X` a symbol
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists():
                    found.add(candidate)
    found.discard(module)
    return found


def graph() -> Dict[str, Set[str]]:
    return {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ROOMS else "top"


def room_counts(g: Dict[str, Set[str]]) -> Dict[Tuple[str, str], int]:
    """{(from room, to room): number of (module, imported module) pairs}, rooms differing."""
    counts: Dict[Tuple[str, str], int] = collections.Counter()
    for module, targets in g.items():
        for target in targets:
            if target in g and room(module) != room(target):
                counts[(room(module), room(target))] += 1
    return dict(counts)


def longest_functions(n: int = 10) -> List[Tuple[int, str]]:
    found: List[Tuple[int, str]] = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append((lines, f"{path.relative_to(PACKAGE.parent)}:{node.name}"))
    return sorted(found, reverse=True)[:n]


def prolog_import_ms(runs: int = 15) -> float:
    """The import time (ms) of the healthcheck modules `gpu-healthcheck --prolog` imports at the
    top (not nested; `python -X importtime`), each module's least cumulative time over `runs` (a
    loaded host only ever adds time), summed.  The prolog runs outside a job with a config of
    its own: state and history in a temporary folder, no journal, no scontrol (the host's
    /var/lib/gpu-healthcheck, journald and Slurm are never touched)."""
    import compileall
    import tempfile

    # as installed: compiled (a package manager byte-compiles it), whatever PYTHONDONTWRITEBYTECODE says
    compileall.compile_dir(str(PACKAGE), quiet=1)
    best: Dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.toml")
        with open(config, "w") as handle:
            # scontrol: a run that would call it fails that call, never reaches a cluster
            handle.write(f'state_dir = "{tmp}/state"\njournal = false\nscontrol = "/bin/false"\n')
        env = dict(os.environ, GPU_HEALTHCHECK_CONFIG=config, PYTHONPATH=str(PACKAGE.parent))
        for _ in range(runs):
            for name, us in _import_us(env).items():
                best[name] = min(best.get(name, us), us)
    return sum(best.values()) / 1000


def _import_us(env: Dict[str, str]) -> Dict[str, int]:
    """{module imported at the top: cumulative microseconds} of one --prolog."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "from healthcheck.cli import main; main(['--prolog'])"],
                          capture_output=True, text=True, cwd=str(PACKAGE.parent), env=env)
    if "config error" in done.stderr:
        raise SystemExit(f"the bench's own config was refused: {done.stderr[-500:]}")
    found: Dict[str, int] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if name.startswith(" healthcheck"):  # one space: imported at the top, not nested
            found[name.strip()] = int(cumulative)
    return found


def main(argv: List[str]) -> int:
    g = graph()
    print("room -> room imports (module pairs):")
    for (a, b), count in sorted(room_counts(g).items()):
        print(f"  {a:>8} -> {b:<8} {count}")
    print("longest functions (lines):")
    for lines, name in longest_functions():
        print(f"  {lines:4d}  {name}")
    if "--import-time" in argv:
        print(f"--prolog import time of healthcheck.*: {prolog_import_ms():.1f} ms (each module's least of 15, summed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
