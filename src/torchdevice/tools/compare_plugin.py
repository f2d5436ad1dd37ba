"""The reporting plugin ``torchdevice compare`` loads into the pytest runs it starts.

``torchdevice compare`` runs ``python -m pytest -p torchdevice.tools.compare_plugin ...`` with
``TORCHDEVICE_COMPARE_LOG=PATH``; this plugin appends one JSON object per line to ``PATH``
as the run goes, which is both the per-test result and the progress feed (the parent reads
the file while the child runs, so it needs nothing from the child's terminal output, whose
format depends on ``-q``/``-v``/xdist):

``{"event": "collected", "count": N}``
    the number of tests selected (under xdist: the first worker's collection).
``{"event": "test", "nodeid": ..., "outcome": ..., "message": ..., "duration": ...,
"redirects": n|null, "fallbacks": n|null}``
    one per test, written after its teardown; ``outcome`` is ``passed``, ``failed``,
    ``error``, ``skipped``, ``xfailed`` or ``xpassed``; ``message`` is the first line of the
    error or the skip reason; the counts come from the ``user_properties`` that the
    torchdevice plugin adds while redirection is on (``null`` in native runs). A module
    that fails to import gives one ``error`` line with the module's node id.
``{"event": "finished", "exitstatus": n}``
    the session ended.

Under pytest-xdist only the controller writes: the workers' reports reach it as usual.
Without ``TORCHDEVICE_COMPARE_LOG`` the plugin does nothing.

With ``TORCHDEVICE_COMPARE_CHECK=1`` instead, the run only checks its command line: pytest
parses the arguments and loads the initial ``conftest.py`` files (which may add options),
then the plugin skips collection, so no test module is imported and no test runs. compare
runs this first, so that a usage error stops it before either real run starts.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

import pytest

__all__ = ["CHECK_VAR", "ENV_VAR", "first_line", "pytest_configure", "pytest_unconfigure"]

#: Where the JSON lines go; set by ``torchdevice compare`` for its children.
ENV_VAR = "TORCHDEVICE_COMPARE_LOG"
#: Set to ``1`` for the command-line check run (see the module's docstring).
CHECK_VAR = "TORCHDEVICE_COMPARE_CHECK"


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped and cut to 300 characters."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """What a person reads first: the crash line of a failure, or the skip reason."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (path, lineno, "Skipped: reason")
        return first_line(str(longrepr[2]).removeprefix("Skipped: "))
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return first_line(str(crash.message))
    return first_line(str(longrepr))


class _Recorder:
    """Folds each test's setup/call/teardown reports into one outcome line.

    Registered as a plugin object (the report hooks get no ``config``, so the open log
    lives on the instance rather than in a global).
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.pending: dict[str, dict[str, Any]] = {}
        self.collected_written = False

    def write(self, record: dict[str, Any]) -> None:
        """Append one line and flush it: the parent reads the file while we run."""
        self.stream.write(json.dumps(record) + "\n")
        self.stream.flush()

    def collected(self, count: int) -> None:
        """Announce the number of tests once (the progress display's denominator)."""
        if not self.collected_written:
            self.collected_written = True
            self.write({"event": "collected", "count": count})

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Count the selected tests (under xdist the controller has none: see below)."""
        if not session.config.pluginmanager.hasplugin("dsession"):
            self.collected(len(session.items))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A module that cannot be collected is one ``error`` line (it hides its tests)."""
        if report.failed:
            self.write(
                {
                    "event": "test",
                    "nodeid": report.nodeid,
                    "outcome": "error",
                    "message": _message(report),
                    "duration": 0.0,
                    "redirects": None,
                    "fallbacks": None,
                }
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold each phase's report; write the test's line after its teardown."""
        record = self.pending.setdefault(
            report.nodeid,
            {
                "event": "test",
                "nodeid": report.nodeid,
                "outcome": "passed",
                "message": "",
                "duration": 0.0,
                "redirects": None,
                "fallbacks": None,
            },
        )
        record["duration"] += report.duration
        xfail = hasattr(report, "wasxfail")
        if report.when in ("setup", "call"):
            if report.failed:
                record["outcome"] = "error" if report.when == "setup" else "failed"
                record["message"] = _message(report)
            elif report.skipped:
                record["outcome"] = "xfailed" if xfail else "skipped"
                record["message"] = (
                    first_line(str(getattr(report, "wasxfail", ""))) if xfail else _message(report)
                )
            elif report.when == "call" and xfail:
                record["outcome"] = "xpassed"
        elif report.when == "teardown":
            if report.failed and record["outcome"] in ("passed", "skipped", "xfailed"):
                record["outcome"] = "error"
                record["message"] = _message(report)
            properties = dict(report.user_properties)
            for key in ("redirects", "fallbacks"):
                value = properties.get(f"torchdevice_{key}")
                if value is not None:
                    record[key] = int(str(value))
            self.write(self.pending.pop(report.nodeid))

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        """Mark the end of the run."""
        self.write({"event": "finished", "exitstatus": int(exitstatus)})


class _XdistHooks:
    """Registered only when xdist is there (pytest rejects unknown hook names)."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The first worker's collection gives the number of tests."""
        self.recorder.collected(len(ids))


_RECORDER = pytest.StashKey[_Recorder]()


class _CheckOnly:
    """The check run: the arguments parsed, nothing collected."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool:
        """Collect nothing: no test module is imported (a result stops the other hooks)."""
        return True


def pytest_configure(config: pytest.Config) -> None:
    """Start recording in the controller (or a plain run) when compare asked for it."""
    if os.environ.get(CHECK_VAR) == "1":
        config.pluginmanager.register(_CheckOnly(), "torchdevice-compare-check")
        return
    path = os.environ.get(ENV_VAR)
    if not path or hasattr(config, "workerinput"):
        return
    stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in unconfigure
    recorder = _Recorder(stream)
    config.stash[_RECORDER] = recorder
    config.pluginmanager.register(recorder, "torchdevice-compare-recorder")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(recorder), "torchdevice-compare-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop recording and close the log."""
    recorder = config.stash.get(_RECORDER, None)
    if recorder is not None:
        config.pluginmanager.unregister(recorder)
        recorder.stream.close()
        del config.stash[_RECORDER]
