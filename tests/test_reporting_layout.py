"""The reporting package's imports run one way, and no torchdevice module is in an import
cycle (issue 22: the report modules had two hidden ones; issue 30: the whole package)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src"
PACKAGE = SRC / "torchdevice"

#: The reporting package, bottom first: each module may import only those before it.
LAYERS = (
    "guide",
    "markdown",
    "html_page",
    "entries",
    "schema",
    "report",
    "recorder",
    "parts",
    "file",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every torchdevice module ``path`` imports, anywhere in it (deferred imports and
    ``TYPE_CHECKING`` blocks count: they are dependencies too). ``from P import M``
    depends on the submodule ``P.M`` when there is one, else on ``P`` itself."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}


def test_reporting_imports_run_one_way():
    graph = _graph()
    assert set(LAYERS) == {
        name.rsplit(".", 1)[1] for name in graph if name.startswith("torchdevice.reporting.")
    }
    for i, layer in enumerate(LAYERS):
        allowed = {f"torchdevice.reporting.{below}" for below in LAYERS[:i]}
        inside = {
            dep
            for dep in graph[f"torchdevice.reporting.{layer}"]
            if dep.startswith("torchdevice.reporting")
        }
        assert inside <= allowed, f"{layer} imports {sorted(inside - allowed)}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_holds_every_module():
    """The graph the cycle test reads is the whole package, each module's file a node."""
    graph = _graph()
    assert set(graph) == {_module_name(path) for path in PACKAGE.rglob("*.py")}
    assert {
        "torchdevice.redirecting.compiling",
        "torchdevice.redirecting.runtime",
        "torchdevice.redirecting.handlers",
    } <= set(graph)
    assert "torchdevice.redirecting.compiling" in graph["torchdevice.redirecting.runtime"]


def test_no_import_cycle_in_the_package():
    """No import cycle runs through any torchdevice module (the compiling <-> runtime one,
    through a ``TYPE_CHECKING`` import, was missed while only some packages were checked)."""
    assert _cycles(_graph()) == []


@pytest.mark.parametrize(
    "module",
    [f"torchdevice.reporting.{layer}" for layer in LAYERS] + ["torchdevice.settings"],
)
def test_each_module_imports_on_its_own(module):
    """Imported first, in a fresh interpreter, each module loads: no hidden order."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_report_is_the_public_function():
    """``torchdevice.report`` is the function whatever was imported before: no submodule
    of that name shadows it."""
    code = (
        "import torchdevice, torchdevice.reporting, torchdevice.reporting.report;"
        "import torchdevice.activation as a; print(torchdevice.report is a.report)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "True"
    assert not (PACKAGE / "report.py").exists()
