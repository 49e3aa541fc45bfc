"""The test layout (tests/README.md) holds: one unit test file per module of healthcheck/checks/,
naming each of its checks, and a unit layer that stays in-process.  (tests/conftest.py keeps
tests/slurm/ to exactly the tests with the slurm marker.)"""

from __future__ import annotations

import ast
import importlib

from healthcheck.checks import CATALOGUE, INTERNODE
from tests.lib.fakenode import ROOT
from tests.lib.percheck import stem

UNIT = ROOT / "tests" / "unit"

# What the unit layer never uses: a child process, the fake GPU libraries or the fixtures they
# replay, the CLI's entry points, a Slurm cluster, a real sleep (the code under test takes a
# sleep callable; a wait on the clock is a test of another layer, and no quicker there).
NO_IMPORTS = {"subprocess", "multiprocessing", "ctypes", "tests.lib.gpucluster", "healthcheck.entrypoints"}
NO_NAMES = {"FIXTURES", "FAKEGPU", "FAKE_BUILD", "ensure_fakegpu", "make_sysfs", "nvml_read",
            "SlurmCluster", "GpuCluster", "Popen", "sleep"}
NO_FIXTURES = {"node", "fakegpu", "cluster"}
NO_CLI = {"main", "entry"}


def _fixtures(test: ast.FunctionDef) -> list:
    """The test's parameters less those hypothesis's @given fills (the last ones, or by name)."""
    names = [a.arg for a in test.args.args]
    for deco in test.decorator_list:
        if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "given":
            names = names[:len(names) - len(deco.args)] if deco.args else names
            names = [n for n in names if n not in {k.arg for k in deco.keywords}]
    return names


def test_every_checks_module_has_a_unit_test_file_with_a_test_of_each_of_its_checks():
    modules = sorted(p.stem for p in (ROOT / "healthcheck" / "checks").glob("*.py") if p.stem != "__init__")
    files = sorted(p.stem[len("test_"):] for p in (UNIT / "checks").glob("test_*.py"))
    assert [m for m in modules if m not in files] == [], "healthcheck/checks/<module>.py without tests/unit/checks/test_<module>.py"
    assert [f for f in files if f not in modules] == [], "tests/unit/checks/test_<module>.py without healthcheck/checks/<module>.py"
    for check_id, spec in {**CATALOGUE, **INTERNODE}.items():
        module = spec.fn.__module__.rsplit(".", 1)[-1]
        names = vars(importlib.import_module(f"tests.unit.checks.test_{module}"))
        assert any(n.startswith(f"test_{stem(check_id)}_") for n in names), \
            f"{check_id}: no test_{stem(check_id)}_* in tests/unit/checks/test_{module}.py"


def test_unit_tests_start_no_process_and_load_no_fake_gpu_library():
    found = []
    for path in sorted(UNIT.rglob("*.py")):
        if path.name == "test_layout.py":
            continue
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if a.name in NO_IMPORTS]
            elif isinstance(node, ast.ImportFrom):
                if node.module in NO_IMPORTS:
                    found.append(f"{where}:{node.lineno}: from {node.module}")
                if node.module == "healthcheck.cli":
                    found += [f"{where}:{node.lineno}: the CLI's {a.name}()" for a in node.names if a.name in NO_CLI]
                found += [f"{where}:{node.lineno}: {a.name}" for a in node.names if a.name in NO_NAMES]
            elif isinstance(node, (ast.Name, ast.Attribute)):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if name in NO_NAMES:
                    found.append(f"{where}:{node.lineno}: {name}")
            elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found += [f"{where}:{node.lineno}: fixture {name}" for name in _fixtures(node) if name in NO_FIXTURES]
    assert found == [], "these belong in tests/readers/, tests/cli/ or tests/slurm/"
