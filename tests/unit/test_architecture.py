"""The package's rooms keep their rules (docs/architecture.md): read the imports, never run them.

- read/ and decide/ do not import each other (a decision takes records, a reader makes them);
- read/, checks/ and decide/ import nothing from act/, report/ or commands/;
- act/ does not import report/ (an effector hands records on; a renderer words them);
- checks/ imports no reader;
- config.py is a leaf: it imports nothing of ours but records (and its own configsections);
- every command lives in commands/: cli.py's dispatch table names only modules there, each
  with its main(), and only cli.py imports a command;
- no import circle between our modules, counting the imports inside functions too;
- each room's __init__.py is a docstring only, so importing one module of a room loads no other.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Set

import pytest

from tests.bench.rooms import PACKAGE, graph, room

ROOMS = ("read", "checks", "decide", "act", "report", "commands")
GRAPH: Dict[str, Set[str]] = graph()


def _crossing(source: str, targets: Set[str]) -> Dict[str, List[str]]:
    """{module of room `source`: [the modules of `targets` it imports]}, those that do."""
    found = {m: sorted(i for i in imports if room(i) in targets)
             for m, imports in GRAPH.items() if room(m) == source}
    return {m: i for m, i in found.items() if i}


def test_the_graph_sees_every_room() -> None:
    assert set(ROOMS) | {"top"} == {room(m) for m in GRAPH}
    assert "healthcheck.act.slurm" in GRAPH["healthcheck.commands.node"]  # relative imports resolved
    assert "healthcheck.read.nvml" in GRAPH["healthcheck.commands.ack"]  # and those inside functions


# Imports between read/ and decide/ that are still to be moved (each a reader calling a pure
# helper, or a decision calling a parser): the list may only shrink.  A new one fails below,
# and so does a listed one that is gone (then strike it here).
READ_DECIDE_TO_MOVE: Dict[str, List[str]] = {}


def test_readers_and_decisions_do_not_import_each_other() -> None:
    crossing = {**_crossing("read", {"decide"}), **_crossing("decide", {"read"})}
    assert crossing == READ_DECIDE_TO_MOVE


@pytest.mark.parametrize("source", ["read", "checks", "decide"])
def test_readers_checks_and_decisions_never_import_effectors_reports_or_commands(source: str) -> None:
    assert _crossing(source, {"act", "report", "commands"}) == {}


def test_effectors_do_not_import_reports() -> None:
    assert _crossing("act", {"report", "commands"}) == {}


def test_checks_import_no_reader() -> None:
    assert _crossing("checks", {"read"}) == {}


def test_config_is_a_leaf() -> None:
    assert GRAPH["healthcheck.config"] <= {"healthcheck.records", "healthcheck.configsections", "healthcheck.configschema"}
    assert GRAPH["healthcheck.configsections"] <= {"healthcheck.records", "healthcheck.configschema"}
    assert GRAPH["healthcheck.configschema"] <= {"healthcheck.records"}


def _dispatch_table() -> Dict[str, str]:
    """cli.COMMANDS, read from the source: {mode: the module named in its Command(...)}."""
    tree = ast.parse((PACKAGE / "cli.py").read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "COMMANDS":
            assert isinstance(node.value, ast.Dict)
            table = {}
            for key, value in zip(node.value.keys, node.value.values):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Call)
                module = value.args[0]
                assert isinstance(module, ast.Constant)
                table[key.value] = module.value
            return table
    raise AssertionError("cli.py has no COMMANDS table")


def test_every_command_lives_in_commands() -> None:
    table = _dispatch_table()
    assert {"node", "prolog", "epilog", "repair", "internode_sweep", "gang", "ack", "job_report",
            "history", "cluster", "list_checks", "check_config"} <= set(table)
    commands = PACKAGE / "commands"
    for mode, module in table.items():
        path = commands / f"{module}.py"
        assert path.exists(), f"{mode}: {path}"
        functions = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
        assert "main" in functions, f"{mode}: {path} has no main()"
    # cli.py reaches a command only through the table (importlib), and nothing but cli.py and
    # the commands themselves imports a command
    importers = {m for m, imports in GRAPH.items() if any(room(i) == "commands" for i in imports)}
    assert {m for m in importers if room(m) != "commands"} == set()
    # the old homes of commands are gone
    assert not (PACKAGE / "orchestrate.py").exists() and not (PACKAGE / "runner.py").exists()


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


@pytest.mark.parametrize("name", ["read", "decide", "act", "report", "commands"])
def test_a_rooms_init_is_a_docstring_only(name: str) -> None:
    tree = ast.parse((PACKAGE / name / "__init__.py").read_text())
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)
    assert isinstance(tree.body[0].value, ast.Constant) and isinstance(tree.body[0].value.value, str)
