"""The reporting package's imports run one way, no torchdevice module is in an import cycle
(issue 22: the report modules had two hidden ones; issue 30: the whole package), and the
core's folders import one way too (issue 37: a few rooms on a few floors)."""

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


#: The core's rooms, bottom first: each may import only the rooms before it. A room is a
#: folder (``redirecting/``...) or a group of flat modules; :func:`_room` says which. ``sites``
#: is below the base because ``logs`` makes its records at a user's site; ``settings`` is
#: above ``reporting`` because it checks a report path with the report writer's rule.
CORE_LAYERS = (
    "sites",
    "base",
    "port",
    "reporting",
    "settings",
    "redirecting",
    "facade",
    "patches",
    "activation",
    "api",
    "tools",
)

#: Flat modules by room (a folder's modules are its room: ``torchdevice.facade.cuda`` is
#: ``facade``). A new flat module is placed here, or the test below says so.
FLAT_ROOMS = {
    "sites": "sites",
    "errors": "base",
    "environment": "base",
    "program": "base",
    "extra_backends": "base",
    "host": "base",
    "ledger": "base",
    "logs": "base",
    "settings": "settings",
    "activation": "activation",
    "announce": "api",
    "notebook": "api",
    "": "api",  # torchdevice/__init__.py
    "__main__": "tools",
}

#: Accelerators torch does not ship, outside the core: they may import only the base,
#: through which the core finds them (``extra_backends``), and each other.
BACKENDS = ("simulated_mps", "testing")


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


def _room(module: str) -> str:
    """The room of a torchdevice module: its folder, or its flat module's group."""
    parts = module.split(".")[1:]
    name = parts[0] if parts else ""
    if (PACKAGE / name).is_dir() and name:
        return name
    assert name in FLAT_ROOMS, f"torchdevice.{name} has no room: add it to FLAT_ROOMS"
    return FLAT_ROOMS[name]


def _room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which rooms each room imports (itself left out)."""
    rooms: dict[str, set[str]] = {}
    for module, deps in graph.items():
        room = _room(module)
        rooms.setdefault(room, set()).update(_room(dep) for dep in deps)
    return {room: deps - {room} for room, deps in rooms.items()}


def test_the_core_imports_one_way_folder_by_folder():
    """Room by room, bottom first, each imports only rooms below it: no folder-level cycle
    (the recorder's type of a decision once made reporting and the redirect a pair), and
    nothing runs back up."""
    rooms = _room_graph(_graph())
    assert set(rooms) - set(CORE_LAYERS) == set(BACKENDS)
    assert set(CORE_LAYERS) == set(rooms) - set(BACKENDS)
    layers = [room for room in CORE_LAYERS if room in rooms]
    for i, room in enumerate(layers):
        above = rooms[room] - set(layers[:i])
        assert above == set(), f"{room} imports {sorted(above)}, not below it"
    for backend in BACKENDS:
        assert rooms[backend] <= {"base", *BACKENDS}, f"{backend}: {sorted(rooms[backend])}"


def test_the_room_check_finds_an_import_running_up():
    """The check above can fail: a reporting module importing the redirect is seen."""
    graph = _graph()
    graph["torchdevice.reporting.entries"] = {"torchdevice.redirecting.policy"}
    rooms = _room_graph(graph)
    assert "redirecting" in rooms["reporting"]


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


@pytest.mark.parametrize(
    ("function", "package"), [("report", "reporting"), ("redirect", "redirecting")]
)
def test_the_public_functions_are_not_shadowed_by_packages(function, package):
    """``torchdevice.report`` and ``torchdevice.redirect`` are the functions whatever was
    imported before: no submodule of either name shadows them (importing one sets the
    package's attribute to the module; hence ``reporting/`` and ``redirecting/``)."""
    code = (
        f"import torchdevice, torchdevice.{package}, torchdevice.{package}.runtime;"
        if package == "redirecting"
        else f"import torchdevice, torchdevice.{package}, torchdevice.{package}.report;"
    ) + f"import torchdevice.activation as a; print(torchdevice.{function} is a.{function})"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "True"
    assert not (PACKAGE / f"{function}.py").exists()
    assert not (PACKAGE / function).exists()


def test_the_redirect_package_imports_nothing_so_its_policy_loads_without_torch():
    """``torchdevice/redirecting/__init__.py`` imports nothing: the policy, a pure function,
    loads without torch (the command line's usage errors come before torch)."""
    code = "import sys, torchdevice.redirecting.policy; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"


#: The port package, bottom first: each module may import only those before it, and
#: nothing of torchdevice outside the package but :data:`PORT_BASE` (issue 37).
PORT_LAYERS = (
    "layout",
    "table",
    "source",
    "edits",
    "guards",
    "choices",
    "device_api",
    "calls",
    "advice",
    "patch",
)
PORT_BASE = {"torchdevice.sites"}


def test_the_port_imports_only_itself_and_the_base():
    """The report reads the port (its advice), the tools call it (the patch); the port
    imports neither, nor the redirect: what a line becomes is a function of its text."""
    graph = _graph()
    assert set(PORT_LAYERS) == {
        name.rsplit(".", 1)[1] for name in graph if name.startswith("torchdevice.port.")
    }
    for i, layer in enumerate(PORT_LAYERS):
        allowed = {f"torchdevice.port.{below}" for below in PORT_LAYERS[:i]} | PORT_BASE
        deps = graph[f"torchdevice.port.{layer}"]
        assert deps <= allowed, f"{layer} imports {sorted(deps - allowed)}"
    assert graph["torchdevice.port"] <= {f"torchdevice.port.{name}" for name in PORT_LAYERS}
    assert "torchdevice.port" in graph["torchdevice.reporting.entries"]
