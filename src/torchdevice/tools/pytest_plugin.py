"""pytest plugin: run a whole suite, or one test, redirected.

Registered through the ``pytest11`` entry point, so an installed torchdevice adds:

``--torchdevice``
    redirect the whole run. Switched on in ``pytest_load_initial_conftests``, before the
    initial ``conftest.py`` files and any test module are imported: decorators evaluated at
    import (Transformers' ``require_torch_gpu``, ``skipif(not torch.cuda.is_available())``)
    see the redirected answers. ``ACTIVATE_TORCH_DEVICE=1`` is put in ``os.environ`` so that
    child processes that import torchdevice are redirected too: pytest-xdist workers, and
    tests that re-run themselves in a child ``pytest`` (which loads this plugin, hence
    torchdevice, at start-up).
``--torchdevice-report PATH``
    write the migration report at the end of the session (JSON if ``PATH`` ends in
    ``.json``, text otherwise). Under pytest-xdist every worker sends its report to the
    controller, which merges them (:func:`torchdevice.report.merge`: counts of identical
    call sites add up) into one file, with the parts of other child processes
    (:mod:`torchdevice.report_parts`).
fixture ``torchdevice``
    redirects the one test that asks for it and restores torch after it; yields the active
    :class:`~torchdevice.runtime.Runtime`.
marker ``@pytest.mark.torchdevice_native``
    the test runs natively even under ``--torchdevice``: redirection is off from its setup
    to its teardown and back on afterwards.

While redirection is on, each test's redirect and fallback counts are added to its
``user_properties`` (``torchdevice_redirects``, ``torchdevice_fallbacks``): JUnit XML and
``torchdevice compare`` show them per test.

Without ``--torchdevice``, with the fixture and marker unused, the plugin changes nothing.
Loading it costs no torch import (the package loads its torch-facing modules on first
use, and this plugin imports them only once redirection is asked for); it enables nothing
and touches no state.

Shaped like pytest-randomly: one module, options in a named group with prefixed ``dest``,
markers registered in ``pytest_configure``, per-run state in ``config.stash``, xdist hooks
registered only when xdist is there.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Generator, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from torchdevice import report_parts
from torchdevice.environment import activation_requested
from torchdevice.errors import SettingsError
from torchdevice.report import MigrationReport, merge

if TYPE_CHECKING:
    from torchdevice.runtime import Runtime

__all__ = [
    "MARKER",
    "REPORT_KEY",
    "pytest_addoption",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_report_header",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
    "torchdevice_fixture",
]

#: Marker for tests that must run natively under ``--torchdevice``.
MARKER = "torchdevice_native"
#: Key of a worker's migration report in xdist's ``workeroutput``.
REPORT_KEY = "torchdevice_report"
#: The environment variable that redirects child processes.
_ENV = "ACTIVATE_TORCH_DEVICE"
#: The environment variable that forces the host, in this process and its children.
_HOST_ENV = "TORCHDEVICE_HOST"
_UNSET = "\0unset"


@dataclasses.dataclass
class _State:
    """What this run switched on, so that unconfigure undoes exactly that."""

    #: ``--torchdevice`` was given and this plugin enabled redirection.
    enabled: bool = False
    #: ``os.environ[ACTIVATE_TORCH_DEVICE]`` before we set it (``_UNSET`` if absent).
    saved_env: str = _UNSET
    #: ``os.environ[TORCHDEVICE_HOST]`` before ``--torchdevice-host`` set it (None: not set).
    saved_host: str | None = None
    #: Reports received from xdist workers (plain dicts, as ``MigrationReport.to_dict``).
    worker_reports: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The merged report, once written.
    written: MigrationReport | None = None


_STATE = pytest.StashKey[_State]()
#: Per test: redirect and fallback counts at the start of its setup.
_START = pytest.StashKey[Counter[str]]()
#: Per test: redirection was on before a ``torchdevice_native`` test and must come back.
_RESUME = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``torchdevice`` option group."""
    group = parser.getgroup("torchdevice", "torchdevice: run CUDA-first tests redirected")
    group.addoption(
        "--torchdevice",
        action="store_true",
        default=False,
        dest="torchdevice_enabled",
        help="redirect the whole run: every device request goes to the device this host has "
        "(switched on before conftest.py files and test modules are imported)",
    )
    group.addoption(
        "--torchdevice-report",
        metavar="PATH",
        default=None,
        dest="torchdevice_report",
        help="write the migration report to PATH at the end of the session (JSON if PATH "
        "ends in .json); under xdist the workers' reports are merged into it",
    )
    group.addoption(
        "--torchdevice-host",
        choices=["cpu", "mps", "cuda", "simulated-mps"],
        default=None,
        dest="torchdevice_host",
        help="redirect the whole run (implies --torchdevice) as on this host, in every "
        "process of the run (TORCHDEVICE_HOST); simulated-mps runs on the simulated MPS "
        "device: MPS's op set, errors and dtypes on the CPU",
    )


def _activation() -> ModuleType:
    """:mod:`torchdevice.activation`, imported when first needed: it imports torch, and a
    pytest run that never asks for torchdevice should not pay for that."""
    from torchdevice import activation  # noqa: PLC0415 - deferred on purpose

    return activation


def _enabled() -> bool:
    """Whether redirection is on, without importing torch to find out."""
    module = sys.modules.get("torchdevice.activation")
    return module is not None and bool(module.is_enabled())


def _state(config: pytest.Config) -> _State:
    return config.stash.setdefault(_STATE, _State())


def _start(config: pytest.Config, host: str | None) -> None:
    """Switch redirection on for this process and its children (idempotent)."""
    state = _state(config)
    if state.enabled:
        return
    state.saved_env = os.environ.get(_ENV, _UNSET)
    os.environ[_ENV] = "1"  # xdist workers and subprocesses import torchdevice enabled
    if host is not None:
        state.saved_host = os.environ.get(_HOST_ENV, _UNSET)
        os.environ[_HOST_ENV] = host  # ... and force the same host
    try:
        _activation().enable()
    except BaseException:
        _restore_env(state)  # a refused host leaves the environment as it was
        raise
    state.enabled = True


def _restore_env(state: _State) -> None:
    """Put back the variables :func:`_start` set."""
    for variable, saved in ((_ENV, state.saved_env), (_HOST_ENV, state.saved_host)):
        if saved == _UNSET:
            os.environ.pop(variable, None)
        elif saved is not None:
            os.environ[variable] = saved
    state.saved_host = None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Enable before the initial conftests import the code under test.

    A suite's root ``conftest.py`` often imports its test utilities, whose module-level
    ``torch.cuda.is_available()`` answers decide which tests skip: they must see the
    redirected answers, so ``pytest_configure`` would be too late. A bad
    ``ACTIVATE_TORCH_DEVICE`` is a usage error here, before any test runs, and so is a
    ``--torchdevice-host`` the machine cannot be.
    """
    known = early_config.known_args_namespace
    try:
        activation_requested()
        if known.torchdevice_enabled or known.torchdevice_host:
            _start(early_config, known.torchdevice_host)
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; enable if the plugin was loaded too late for the hook above."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}: run this test natively (torchdevice off) even under --torchdevice",
    )
    host = config.getoption("torchdevice_host")
    if config.getoption("torchdevice_enabled") or host:
        _start(config, host)  # e.g. loaded via `pytest_plugins` in a conftest
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config), "torchdevice-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Undo what this run switched on (matters for in-process runs such as pytester's)."""
    state = config.stash.get(_STATE, None)
    if state is None or not state.enabled:
        return
    _activation().disable()
    _restore_env(state)
    state.enabled = False


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say in the header that the run is redirected, and where to."""
    if not _enabled():
        return None
    runtime = _activation().current_runtime()
    assert runtime is not None
    target = runtime.default_device
    host = runtime.host
    where = "cpu" if target is None else str(target)
    return f"torchdevice: redirecting to {where} ({host.kind} host, {host.device_name()})"


def _counts() -> Counter[str]:
    """Redirected and fallen-back calls so far in this process, by event kind."""
    totals: Counter[str] = Counter()
    for entry in _activation().report().entries:
        totals[entry.kind] += entry.count
    return totals


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Note the counts at the test's start; turn redirection off for native-marked tests."""
    if _enabled() or "torchdevice" in getattr(item, "fixturenames", ()):
        item.stash[_START] = _counts()
    if item.get_closest_marker(MARKER) is not None and _enabled():
        _activation().disable()
        item.stash[_RESUME] = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """After the test's teardown: record its counts, and re-enable after a native test.

    The counts go in ``user_properties`` before the teardown report is built, which is the
    report JUnit XML takes properties from.
    """
    try:
        yield
    finally:
        start = item.stash.get(_START, None)
        if start is not None:
            delta = _counts() - start
            redirects = delta["redirect"] + delta["override"] + delta["dtype"]
            item.user_properties.append(("torchdevice_redirects", redirects))
            item.user_properties.append(("torchdevice_fallbacks", delta["fallback"]))
        if item.stash.get(_RESUME, False):
            _activation().enable()


@pytest.fixture(name="torchdevice")
def torchdevice_fixture() -> Iterator[Runtime]:
    """Redirect this one test (and the fixtures it sets up after this one); restore after.

    Nests: under ``--torchdevice`` it changes nothing, in a ``torchdevice_native`` test it
    switches redirection back on for the test's body.
    """
    with _activation().redirect() as runtime:
        yield runtime


# -- the migration report ------------------------------------------------------------
def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the report (controller or plain run), or hand it to the controller (worker)."""
    config = session.config
    path = config.getoption("torchdevice_report")
    if path is None:
        return
    state = _state(config)
    own = _activation().report()
    if _is_worker(config):
        config.workeroutput[REPORT_KEY] = own.to_dict()  # type: ignore[attr-defined]
        report_parts.detach()  # sent to the controller: no part file on top of it
        return
    workers = [MigrationReport.from_dict(report) for report in state.worker_reports]
    merged = merge([own, *workers], own.host)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    merged.write(target)
    state.written = merged


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line: how much was redirected, and where the report went."""
    state = config.stash.get(_STATE, None)
    if state is None or state.written is None:
        return
    report = state.written
    terminalreporter.write_line(
        f"torchdevice: {report.total} redirected call(s) at {len(report.entries)} call "
        f"site(s); migration report written to {config.getoption('torchdevice_report')}"
    )


class _XdistHooks:
    """Controller side of pytest-xdist: collect each worker's migration report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """A worker finished: keep the report it sent, if any."""
        report = getattr(node, "workeroutput", {}).get(REPORT_KEY)
        if report is not None:
            _state(self.config).worker_reports.append(report)
