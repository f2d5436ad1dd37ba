"""The migration report at the end of a run: one writer, one rule, whichever way torchdevice
is on.

``TORCHDEVICE_REPORT=PATH`` (or ``enable(report_path=PATH)``) asks for the report in a file.
Every way of switching torchdevice on ends in :func:`deliver`, the one writer:

- ``enable()``, ``with redirect()``, ``ACTIVATE_TORCH_DEVICE=1``: each activation asks
  for its path (:func:`request`), the last one decides, and the exit handler here
  delivers it, once per process, after the interpreter has joined its threads;
- the launcher (``python -m torchdevice``) takes the report over (:func:`take`): its path (or
  stderr, with no path) stands whatever the script's own activations ask, and the same
  exit handler delivers it, with a line that says where it went;
- the pytest plugin takes it over with nothing left for the exit, and delivers the run's
  merged report itself at the end of the session, before pytest's summary.

One rule for a file that cannot be written then: the report is not lost, it goes to stderr
after one line that says why (the tools' outputs rule, :mod:`torchdevice.tools.outputs`;
the tools also check their path before the run starts). Only the process that started the
run writes: a child of a redirected run sends its part to that process
(:mod:`torchdevice.reporting.parts`) instead. A ``fork`` child starts with no order: the
process it was copied from delivers the report.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torchdevice.reporting import parts as report_parts
from torchdevice.reporting.report import MigrationReport

__all__ = ["deliver", "request", "take"]


@dataclass(frozen=True)
class _Order:
    """What the exit handler delivers: ``report()`` to ``path`` (``None``: to stderr when
    ``speak``, else nowhere); ``speak``: say where it went, as the launcher does."""

    path: Path | None
    report: Callable[[], MigrationReport]
    speak: bool


_lock = threading.Lock()
_order: _Order | None = None
#: A tool took the report over: the activations' requests no longer change the order.
_taken = False
_registered = False


def request(path: Path | None, report: Callable[[], MigrationReport]) -> None:
    """Write ``report()`` to ``path`` when this process exits (``None``: no file).

    The last activation decides, as it does for every setting: ``enable()`` without a path
    (and without ``TORCHDEVICE_REPORT``) after ``enable(report_path=...)`` asks for none;
    a ``redirect()`` block inherits the enclosing activation's path. ``disable()`` keeps
    the request: the report of what ran is still written at exit. Ignored once a tool has
    taken the report over (:func:`take`).
    """
    global _order
    with _lock:
        if _taken:
            return
        _order = None if path is None else _Order(path, report, speak=False)
        if path is not None:
            _register()


def take(
    path: Path | None = None,
    report: Callable[[], MigrationReport] | None = None,
    *,
    speak: bool = False,
) -> None:
    """A tool owns this process's report from now on: at exit, ``report()`` goes to
    ``path``, or with no path to stderr when ``speak`` (the launcher), or nowhere (the
    pytest plugin, which calls :func:`deliver` itself; the launcher's ``--no-report``).

    A JSON path's writer is imported now, not in the exit handler (see :func:`_prepare`).
    """
    global _order, _taken
    with _lock:
        _taken = True
        wanted = report is not None and (path is not None or speak)
        _order = _Order(path, report, speak) if wanted and report is not None else None
        if _order is not None:
            _prepare(path)
            _register()


def _register() -> None:
    """Register the exit handler once; it runs before the report parts' handler, which
    was registered at activation, before any request (``atexit`` runs newest first)."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_deliver_at_exit)


def _prepare(path: Path | None) -> None:
    """Import now what writing the report to ``path`` needs, not in the exit handler.

    An uncaught ``KeyboardInterrupt`` ends the interpreter with SIGINT (status 130 in a
    shell) only if no code runs through ``PyRun_*`` between the exception and the exit:
    CPython clears its "unhandled KeyboardInterrupt" flag there. Importing :mod:`decimal`
    does (its C module runs Python source that way), and pydantic, which checks the JSON
    report, imports it: done at exit, it turned status 130 into 1.
    """
    if path is not None and path.suffix == ".json":
        import torchdevice.reporting.schema  # noqa: F401, PLC0415 - see the docstring


def _forget_in_fork_child() -> None:
    """A ``fork`` child delivers nothing of what it inherited: its parent does."""
    global _order, _taken, _lock
    _lock = threading.Lock()  # the parent's may have been held by another thread
    _order, _taken = None, False


os.register_at_fork(after_in_child=_forget_in_fork_child)


def _deliver_at_exit() -> None:
    global _order
    with _lock:
        order, _order = _order, None  # delivered once
    if order is None or report_parts.role() == "writer":
        return  # nothing asked, or its part goes to the process that started the run
    deliver(order.report(), order.path, speak=order.speak)


def deliver(report: MigrationReport, path: Path | None, *, speak: bool = False) -> bool:
    """The one writer: ``report`` to ``path``, or to stderr when ``path`` is ``None`` and
    ``speak``. A file that cannot be written gets the report on stderr after one line
    that says why (a report made at the end of a run has no later chance); with ``speak``,
    a written file gets a line saying where it is. Whether a file was written."""
    if path is None:
        if speak:
            print(report.to_text(), file=sys.stderr)
        return False
    try:
        report.write(path)
    except OSError as exc:
        why = exc.strerror or str(exc)
        print(
            f"torchdevice: cannot write the migration report to {path} ({why}); it "
            "follows here instead:",
            file=sys.stderr,
        )
        print(report.to_text(), file=sys.stderr)
        return False
    if speak:
        print(f"torchdevice: migration report written to {path}", file=sys.stderr)
    return True
