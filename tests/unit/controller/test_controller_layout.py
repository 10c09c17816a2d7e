"""The controller's shape, checked like its behaviour (issue 15): rooms of small modules and functions, no
module importing another's private names, and one table of watched kinds behind watches, priming and
relisting. Import direction and circles are import-linter's (pyproject.toml)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from testkit import StaticContext

from phalanx.controller.watch.registry import build_registry
from phalanx.controller.watch.watched import WATCHED

PHALANX = Path(__file__).resolve().parents[3] / "operator" / "phalanx"
CONTROLLER = PHALANX / "controller"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def modules(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


@pytest.mark.parametrize("path", modules(CONTROLLER), ids=lambda p: str(p.relative_to(CONTROLLER)))
def test_no_controller_module_is_long_nor_any_of_its_functions(path: Path) -> None:
    source = path.read_text()
    assert source.count("\n") <= MAX_MODULE_LINES
    long = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long


def test_no_module_of_phalanx_imports_another_modules_private_names() -> None:
    found = []
    for path in modules(PHALANX):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phalanx"):
                found += [
                    f"{path.relative_to(PHALANX)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    assert not found


def test_every_package_of_the_controller_says_what_it_holds() -> None:
    for init in CONTROLLER.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{init.relative_to(PHALANX)} has no docstring (its room's map)"


def test_every_watched_kind_is_watched_from_the_one_table() -> None:
    registry = build_registry(StaticContext())
    watched = {
        (h.selector.group or "", h.selector.plural or h.selector.any_name)
        for h in registry._watching.get_all_handlers()
    }
    assert watched == {(row.resource.group, row.resource.plural) for row in WATCHED}
    assert len({row.kind for row in WATCHED}) == len(WATCHED)
