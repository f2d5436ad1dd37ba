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
    ``.json``, Markdown if ``.md``, HTML if ``.html``, text otherwise). Under pytest-xdist
    every worker sends its report to the controller, which merges them
    (:func:`torchdevice.reporting.merge`: counts of identical call sites add up) into one
    file, with the parts of other child processes (:mod:`torchdevice.reporting.parts`).
fixture ``torchdevice``
    redirects the one test that asks for it and restores torch after it; yields the active
    :class:`~torchdevice.redirecting.runtime.Runtime`.
marker ``@pytest.mark.torchdevice_native``
    the test runs natively even under ``--torchdevice``: redirection is off from its setup
    to its teardown and back on afterwards.
``--torchdevice-intercept {mode,entry-points}``
    redirect the whole run (implies ``--torchdevice``) through that tier, in every process
    of the run (``TORCHDEVICE_INTERCEPT``; docs/tiers.md).
``--torchdevice-skip-unsupported`` and marker ``@pytest.mark.torchdevice_skip_unsupported``
    a test (or its setup) that raises :class:`~torchdevice.errors.UnsupportedFeatureError`
    (a CUDA-only feature such as CUDA graphs, on a host that cannot run it) is reported as
    skipped, with the feature in the reason, instead of failed.
``--torchdevice-max-redirected-lines [N]``
    the CI gate (:mod:`torchdevice.tools.gate`; implies ``--torchdevice``, so that a
    gate never passes for want of a redirected run): a run whose migration report (xdist
    workers included) holds more than ``N`` lines of the user's code to change fails
    (exit status 1, as a failed test, with the lines listed in the summary); ``N`` is 0
    when the option is given alone.
ini keys ``torchdevice``, ``torchdevice_report``, ``torchdevice_skip_unsupported``,
``torchdevice_max_redirected_lines``
    the options, set in the project's configuration (``[tool.pytest.ini_options]``,
    ``pytest.ini``...); the command line wins over them.

Every ``--torchdevice`` run ends its terminal summary with one line: the redirected calls
and call sites of the whole run (xdist workers included) and where the report went.

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

import argparse
import dataclasses
import sys
from collections import Counter
from collections.abc import Generator, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, get_args

import pytest

from torchdevice import ledger, program
from torchdevice.environment import activation_requested
from torchdevice.errors import SettingsError, UnsupportedFeatureError
from torchdevice.host import HOST_CHOICES
from torchdevice.reporting import MigrationReport, merge
from torchdevice.reporting import file as report_file
from torchdevice.reporting import parts as report_parts
from torchdevice.settings import Intercept
from torchdevice.tools import gate as ci_gate
from torchdevice.tools.outputs import unwritable

if TYPE_CHECKING:
    from torchdevice.redirecting.runtime import Runtime

__all__ = [
    "LIFETIME",
    "MARKER",
    "REPORT_KEY",
    "SKIP_MARKER",
    "pytest_addoption",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_report_header",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
    "spots",
    "torchdevice_fixture",
]

#: Marker for tests that must run natively under ``--torchdevice``.
MARKER = "torchdevice_native"
#: Marker for tests whose ``UnsupportedFeatureError`` is a skip.
SKIP_MARKER = "torchdevice_skip_unsupported"
#: Key of a worker's migration report in xdist's ``workeroutput``.
REPORT_KEY = "torchdevice_report"
#: The environment variable that redirects child processes.
_ENV = "ACTIVATE_TORCH_DEVICE"
#: The environment variable that forces the host, in this process and its children.
_HOST_ENV = "TORCHDEVICE_HOST"
#: The environment variable that picks the tier, in this process and its children.
_INTERCEPT_ENV = "TORCHDEVICE_INTERCEPT"
#: The tiers ``--torchdevice-intercept`` takes (the ``intercept`` setting's values).
_INTERCEPTS: tuple[str, ...] = get_args(Intercept)
#: The ledger lifetime of the variables a run sets for its children: they outlive an
#: activation (a ``torchdevice_native`` test disables and re-enables redirection mid-run)
#: and leave at the end of the session, where ``disable()`` leaves them be.
LIFETIME = "pytest session"


def spots() -> tuple[ledger.Spot, ...]:
    """The variables a run sets (:data:`LIFETIME`), as the pristine check reads them."""
    return tuple(ledger.env_spot(name) for name in (_ENV, _HOST_ENV, _INTERCEPT_ENV))


@dataclasses.dataclass
class _State:
    """What this run switched on, so that unconfigure undoes exactly that."""

    #: ``--torchdevice`` was given and this plugin enabled redirection.
    enabled: bool = False
    #: The ledger group of the variables this run set (:data:`LIFETIME`); one per run, so
    #: that a run inside a run (pytester's in-process runs) undoes only its own.
    group: str = ""
    #: Reports received from xdist workers (plain dicts, as ``MigrationReport.to_dict``).
    worker_reports: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The merged report, once written.
    written: MigrationReport | None = None
    #: Where it was written (``None``: not to a file, or the file could not be written).
    written_to: str | None = None
    #: The CI gate's lines when the run redirected more of the user's lines than allowed.
    gate_failed: tuple[str, ...] = ()


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
        "ends in .json, Markdown if .md, HTML if .html, else text); under xdist the "
        "workers' reports are merged into it",
    )
    group.addoption(
        "--torchdevice-skip-unsupported",
        action="store_true",
        default=False,
        dest="torchdevice_skip_unsupported",
        help="report a test that raises torchdevice.UnsupportedFeatureError (a CUDA-only "
        "feature this host cannot run) as skipped instead of failed",
    )
    group.addoption(
        "--torchdevice-host",
        choices=HOST_CHOICES,
        metavar="HOST",  # the choices are read when asked (HostChoices), not now
        default=None,
        dest="torchdevice_host",
        help="redirect the whole run (implies --torchdevice) as on this host, in every "
        "process of the run (TORCHDEVICE_HOST): one of %(choices)s (a host kind, or a "
        "backend an installed distribution declares)",
    )
    group.addoption(
        "--torchdevice-intercept",
        choices=_INTERCEPTS,
        default=None,
        dest="torchdevice_intercept",
        help="redirect the whole run (implies --torchdevice) through this tier, in every "
        "process of the run (TORCHDEVICE_INTERCEPT): mode (a function mode sees every torch "
        "call) or entry-points (wrappers on the functions that take a device; docs/tiers.md)",
    )
    group.addoption(
        f"--torchdevice-{ci_gate.FLAG.removeprefix('--')}",
        type=_line_count,
        nargs="?",
        const=0,
        default=None,
        metavar="N",
        dest="torchdevice_max_lines",
        help="the CI gate: fail the run (exit status 1), listing them, when it redirected "
        "more than N lines of your code (N is 0 when the option is given alone)",
    )
    parser.addini(
        "torchdevice", "redirect the whole run (as --torchdevice)", type="bool", default=False
    )
    parser.addini(
        "torchdevice_max_redirected_lines",
        "as --torchdevice-max-redirected-lines N",
        default=None,
    )
    parser.addini(
        "torchdevice_report",
        "where to write the migration report (as --torchdevice-report)",
        default=None,
    )
    parser.addini(
        "torchdevice_skip_unsupported",
        "as --torchdevice-skip-unsupported",
        type="bool",
        default=False,
    )


def _asked(config: pytest.Config) -> bool:
    """``--torchdevice``, ``--torchdevice-host``, ``--torchdevice-intercept``, the gate, or
    ``torchdevice = true`` in the configuration."""
    return bool(
        config.getoption("torchdevice_enabled")
        or config.getoption("torchdevice_host")
        or config.getoption("torchdevice_intercept")
        or _max_lines(config) is not None
        or config.getini("torchdevice")
    )


def _report_path(config: pytest.Config) -> str | None:
    value = config.getoption("torchdevice_report") or config.getini("torchdevice_report")
    return str(value) if value else None


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


def _start(config: pytest.Config, host: str | None, intercept: str | None = None) -> None:
    """Switch redirection on for this process and its children (idempotent)."""
    state = _state(config)
    if state.enabled:
        return
    state.group = f"pytest run {id(config):#x}: variables for child processes"
    # xdist workers and subprocesses import torchdevice enabled, on the same host and in
    # the same tier.
    for variable, value in ((_ENV, "1"), (_HOST_ENV, host), (_INTERCEPT_ENV, intercept)):
        if value is not None:
            ledger.set_env(state.group, variable, value, LIFETIME)
    try:
        _activation().enable_for(program.of_main, {})
    except SettingsError as exc:  # a bad TORCHDEVICE_* value or a host the machine
        ledger.undo(state.group, LIFETIME)  # cannot be: one line, before any test,
        raise pytest.UsageError(str(exc)) from None  # the environment as it was
    except BaseException:
        ledger.undo(state.group, LIFETIME)
        raise
    state.enabled = True


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Enable before the initial conftests import the code under test.

    A suite's root ``conftest.py`` often imports its test utilities, whose module-level
    ``torch.cuda.is_available()`` answers decide which tests skip: they must see the
    redirected answers, so ``pytest_configure`` would be too late.

    A bad ``ACTIVATE_TORCH_DEVICE``/``TORCH_ALLOW_REDIRECTS`` is a usage error here under
    ``--torchdevice``, before any test runs, and so is a ``--torchdevice-host`` the machine
    cannot be. Without it, the plugin is only loaded because torchdevice is installed: a
    project that may never import torch must not be stopped by a variable meant for
    torchdevice, so the run goes on natively with a ``PytestConfigWarning`` that names the
    variable (``-W error`` makes it an error).
    """
    known = early_config.known_args_namespace
    requested = bool(
        known.torchdevice_enabled
        or known.torchdevice_host
        or known.torchdevice_intercept
        or known.torchdevice_max_lines is not None
        or _max_lines(early_config) is not None  # the ini key (a bad one stops here)
        or early_config.getini("torchdevice")
    )
    _check_report_path(early_config)
    try:
        activation_requested()
    except SettingsError as exc:
        if requested:
            raise pytest.UsageError(str(exc)) from None
        early_config.issue_config_time_warning(
            pytest.PytestConfigWarning(f"{exc}; torchdevice stays off"), stacklevel=2
        )
    if requested:
        _start(early_config, known.torchdevice_host, known.torchdevice_intercept)


def _check_report_path(config: pytest.Config) -> None:
    """A report path that cannot be written is a usage error before any test runs, not a
    traceback after all of them that loses the report and pytest's summary (the tools'
    one rule: :mod:`torchdevice.tools.outputs`; missing parent folders are made)."""
    path = _report_path(config)
    problem = None if path is None else unwritable(Path(path))
    if problem:
        raise pytest.UsageError(f"--torchdevice-report {path}: cannot write it: {problem}")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; enable if the plugin was loaded too late for the hook above."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}: run this test natively (torchdevice off) even under --torchdevice",
    )
    config.addinivalue_line(
        "markers",
        f"{SKIP_MARKER}: report this test as skipped if it raises "
        "torchdevice.UnsupportedFeatureError (a CUDA-only feature this host cannot run)",
    )
    if not _is_worker(config):
        _check_report_path(config)  # loaded too late for the hook above (`-p`, pytester)
    if _asked(config):
        _start(  # e.g. via `pytest_plugins`
            config, config.getoption("torchdevice_host"), config.getoption("torchdevice_intercept")
        )
    config.pluginmanager.register(_SkipUnsupported(config), "torchdevice-skip-unsupported")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config), "torchdevice-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Undo what this run switched on (matters for in-process runs such as pytester's)."""
    state = config.stash.get(_STATE, None)
    if state is None or not state.enabled:
        return
    try:
        _activation().disable()
    finally:
        ledger.undo(state.group, LIFETIME)
        state.enabled = False


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say in the header that the run is redirected, and where to."""
    if not _enabled():
        return None
    runtime = _activation().current_runtime()
    assert runtime is not None
    return f"torchdevice: {_activation().describe(runtime)}"


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
            # A torch.cuda call the facade answered is a line written for CUDA too.
            redirects = delta["redirect"] + delta["override"] + delta["dtype"] + delta["device-api"]
            item.user_properties.append(("torchdevice_redirects", redirects))
            item.user_properties.append(("torchdevice_fallbacks", delta["fallback"]))
        if item.stash.get(_RESUME, False):
            _activation().enable_for(program.of_main, {})


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
    """Merge the run's report (controller or plain run) and write it if asked, or hand it
    to the controller (worker)."""
    config = session.config
    path = _report_path(config)
    state = _state(config)
    if path is None and not state.enabled:
        return
    report_file.take()  # delivered here (or by the controller), nothing left for the exit
    own = _activation().report()
    if _is_worker(config):
        config.workeroutput[REPORT_KEY] = own.to_dict()  # type: ignore[attr-defined]
        report_parts.detach()  # sent to the controller: no part file on top of it
        return
    workers = [MigrationReport.from_dict(report) for report in state.worker_reports]
    merged = merge([own, *workers], own.host)
    if path is not None and report_file.deliver(merged, Path(path)):
        state.written_to = path  # else it was printed, after the line that says why
    state.written = merged
    limit = _max_lines(config)
    if limit is not None:
        option = f"--torchdevice-{ci_gate.FLAG.removeprefix('--')}"
        state.gate_failed = tuple(ci_gate.verdict(merged, limit, option))
        if state.gate_failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # as pytest-cov's fail-under


def _line_count(value: str) -> int:
    """The gate's ``N``. pytest's parser takes the word after an option with an optional
    value as its value: a test path there gets a message that says how to write it."""
    if not value.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected a number of lines, not {value!r}: write "
            "--torchdevice-max-redirected-lines=0 (or =N), or put it after the test paths"
        )
    return int(value)


def _max_lines(config: pytest.Config) -> int | None:
    """The gate's limit: the option, else the ini key (a usage error when not a number)."""
    given = config.getoption("torchdevice_max_lines")
    if given is None:
        raw = config.getini("torchdevice_max_redirected_lines")
        if not raw:
            return None
        if not str(raw).strip().isdigit():
            raise pytest.UsageError(
                f"torchdevice_max_redirected_lines = {raw!r}: expected a number of lines, 0 or more"
            )
        given = int(str(raw).strip())
    if given < 0:
        raise pytest.UsageError(
            f"--torchdevice-max-redirected-lines {given}: expected a number of lines, 0 or more"
        )
    return int(given)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line on every redirected run (as pytest-cov's summary): how much was redirected,
    and where the report went."""
    state = config.stash.get(_STATE, None)
    if state is None or state.written is None:
        return
    report = state.written
    path = state.written_to
    where = (
        f"migration report written to {path}"
        if path is not None
        else "--torchdevice-report=PATH writes the migration report"
    )
    terminalreporter.write_line(
        f"torchdevice: {report.total} redirected call(s) at {len(report.entries)} call "
        f"site(s); {where}"
    )
    for line in state.gate_failed:
        terminalreporter.write_line(line, red=True, bold=line == state.gate_failed[0])


class _SkipUnsupported:
    """``UnsupportedFeatureError`` in a test's setup or call becomes a skip, when asked.

    Asked per test by the marker, for the run by the option or ini key. Only the error
    itself counts, not another exception raised while handling it: what the test does
    with the error is the test's business.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.everywhere = bool(
            config.getoption("torchdevice_skip_unsupported")
            or config.getini("torchdevice_skip_unsupported")
        )

    def _guard(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        except UnsupportedFeatureError as exc:
            if not (self.everywhere or item.get_closest_marker(SKIP_MARKER) is not None):
                raise
            # Located at the test, as a skip marker's skip is (pytest's skipping plugin
            # raises it the same way), not at this line.
            raise pytest.skip.Exception(
                f"unsupported on this host under torchdevice: {exc.feature}",
                _use_item_location=True,
            ) from exc

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        """The fixtures' setup."""
        return (yield from self._guard(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """The test itself."""
        return (yield from self._guard(item))


class _XdistHooks:
    """Controller side of pytest-xdist: collect each worker's migration report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """A worker finished: keep the report it sent, if any."""
        report = getattr(node, "workeroutput", {}).get(REPORT_KEY)
        if report is not None:
            _state(self.config).worker_reports.append(report)
