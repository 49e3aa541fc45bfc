"""The package's rooms keep their rules (docs/architecture.md): read the imports, never run them.

- read/, checks/ and decide/ import nothing from act/ or report/; checks/ imports no reader;
- config.py is a leaf: it imports nothing of ours but records (and its own configsections);
- no import circle between our modules, counting the imports inside functions too;
- no file over 500 lines, the orchestrator at most 250;
- each room's __init__.py is a docstring only, so importing one module of a room loads no other.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "healthcheck"
ROOMS = ("read", "checks", "decide", "act", "report")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Set[str]:
    """Every healthcheck module this file imports, at the top or inside a function."""
    module = _module_name(path)
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


GRAPH: Dict[str, Set[str]] = {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ROOMS else "top"


def test_the_graph_sees_every_room() -> None:
    rooms = {_room(m) for m in GRAPH}
    assert set(ROOMS) | {"top"} == rooms
    assert "healthcheck.act.slurm" in GRAPH["healthcheck.orchestrate"]  # relative imports resolved


@pytest.mark.parametrize("room", ["read", "checks", "decide"])
def test_readers_checks_and_decisions_never_import_effectors_or_reports(room: str) -> None:
    bad = {m: sorted(i for i in imports if _room(i) in ("act", "report"))
           for m, imports in GRAPH.items() if _room(m) == room}
    assert {m: i for m, i in bad.items() if i} == {}


def test_checks_import_no_reader() -> None:
    bad = {m: sorted(i for i in imports if _room(i) == "read")
           for m, imports in GRAPH.items() if _room(m) == "checks"}
    assert {m: i for m, i in bad.items() if i} == {}


def test_config_is_a_leaf() -> None:
    assert GRAPH["healthcheck.config"] <= {"healthcheck.records", "healthcheck.configsections", "healthcheck.configschema"}
    assert GRAPH["healthcheck.configsections"] <= {"healthcheck.records", "healthcheck.configschema"}
    assert GRAPH["healthcheck.configschema"] <= {"healthcheck.records"}


def test_no_import_circle() -> None:
    cycles: List[List[str]] = []
    state: Dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(module: str, stack: List[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH.get(module, ())):
            if target not in GRAPH:
                continue
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    # a package's __init__ re-exporting its own modules is not a circle of ours
    cycles = [c for c in cycles if not all(m.startswith("healthcheck.checks") for m in c)]
    assert cycles == []


def test_no_file_over_500_lines_and_the_orchestrator_within_250() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {f: n for f, n in sizes.items() if n > 500} == {}
    assert sizes["orchestrate.py"] <= 250
    assert not (PACKAGE / "runner.py").exists()


@pytest.mark.parametrize("room", ["read", "decide", "act", "report"])
def test_a_rooms_init_is_a_docstring_only(room: str) -> None:
    tree = ast.parse((PACKAGE / room / "__init__.py").read_text())
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)
    assert isinstance(tree.body[0].value, ast.Constant) and isinstance(tree.body[0].value.value, str)
