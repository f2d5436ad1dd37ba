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

Every path is checked before the run (:func:`unwritable`: the tools check theirs, the
settings check ``TORCHDEVICE_REPORT`` and ``report_path`` at activation). One rule for a
file that cannot be written at the end all the same: the report is not lost, it goes to
stderr after one line that says why. Only the process that started the run writes: a child
of a redirected run sends its part to that process (:mod:`torchdevice.reporting.parts`)
instead.

What happens at exit is one handler, :func:`_at_exit`, which runs the sequence in code:
finish this process's part of the run (or collect the children's), build the report once,
deliver it, then say the closing line (:func:`close_with`) about the outcome it got
(:class:`Delivery`: "written" only when this process wrote the file). Its state is one
object, :class:`_Ending`; a ``fork`` child starts with a fresh one: the process it was
copied from delivers the report.
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

__all__ = ["Delivery", "close_with", "deliver", "request", "take", "unwritable"]


@dataclass(frozen=True)
class Delivery:
    """What became of the report at exit: the one fact the closing line may tell."""

    #: The file asked for (``None``: none).
    path: Path | None
    #: Whether this process wrote the file: a file that merely exists (a stale report of an
    #: earlier run) is not "written".
    written: bool
    #: Why the file could not be written (the report went to stderr instead); empty if it was.
    why: str = ""
    #: Whether the report was printed to stderr (no file asked for, or it could not be written).
    on_stderr: bool = False


@dataclass(frozen=True)
class _Closing:
    """A closing line to print after delivery: ``line(report, delivery)``, with ``report()``
    when nothing is delivered (the line still counts what was redirected)."""

    report: Callable[[], MigrationReport]
    line: Callable[[MigrationReport, Delivery], str]


@dataclass
class _Ending:
    """Everything the exit sequence of this process needs, in one object: what the
    activations and tools asked for, read once by :func:`_at_exit`. A ``fork`` child starts
    with a fresh one: the process it was copied from delivers."""

    #: The report to deliver (``activation.report``: this process's, merged with the parts).
    report: Callable[[], MigrationReport] | None = None
    #: Where to (``None``: to stderr when ``speak``, else nowhere).
    path: Path | None = None
    #: Say where it went, as the launcher does (and print it when there is no path).
    speak: bool = False
    #: A tool took the report over: the activations' requests no longer change it.
    taken: bool = False
    #: The line said after delivery (``ACTIVATE_TORCH_DEVICE=1``: :mod:`torchdevice.announce`).
    closing: _Closing | None = None


_lock = threading.Lock()
_state = _Ending()
#: The exit handler is registered: in a ``fork`` child too, which inherits the handler.
_registered = False


def request(path: Path | None, report: Callable[[], MigrationReport]) -> None:
    """Write ``report()`` to ``path`` when this process exits (``None``: no file).

    The last activation decides, as it does for every setting: ``enable()`` without a path
    (and without ``TORCHDEVICE_REPORT``) after ``enable(report_path=...)`` asks for none;
    a ``redirect()`` block inherits the enclosing activation's path. ``disable()`` keeps
    the request: the report of what ran is still written at exit. Ignored once a tool has
    taken the report over (:func:`take`). Every activation asks, with a path or without,
    so the exit handler is there to finish the report parts too.
    """
    with _lock:
        _register()
        if _state.taken:
            return
        _state.report, _state.path, _state.speak = report, path, False


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
    with _lock:
        _register()
        _state.taken = True
        wanted = report is not None and (path is not None or speak)
        _state.report = report if wanted else None
        _state.path, _state.speak = (path, speak) if wanted else (None, False)
        if wanted:
            _prepare(path)


def close_with(
    report: Callable[[], MigrationReport], line: Callable[[MigrationReport, Delivery], str]
) -> None:
    """After delivering, print ``line(report, delivery)`` on stderr, in the process that
    started the run (:mod:`torchdevice.announce`: the line that says where the report is)."""
    with _lock:
        _register()
        _state.closing = _Closing(report, line)


def _register() -> None:
    """Register the exit handler once (under ``_lock``)."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_at_exit)


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
    global _state, _lock
    _lock = threading.Lock()  # the parent's may have been held by another thread
    _state = _Ending()


os.register_at_fork(after_in_child=_forget_in_fork_child)


def _at_exit() -> None:
    """The exit sequence, the one exit handler: in this order, whatever registered first.

    1. Finish this process's part of the run (:func:`torchdevice.reporting.parts.finish`):
       a part writer writes its part and is done (the process that started the run
       delivers); the root collects its children's parts.
    2. Build the report once (this process's, merged with the parts collected).
    3. Deliver it (:func:`deliver`'s rule).
    4. Say the closing line about the outcome step 3 got, in the root only.

    It runs after the interpreter has joined its threads, and once: what it reads is
    taken out of the state first.
    """
    global _state
    with _lock:
        state, _state = _state, _Ending(taken=_state.taken)
    role = report_parts.role()
    report_parts.finish()
    if role == "writer":
        return  # its part goes to the process that started the run
    delivering = state.report is not None and (state.path is not None or state.speak)
    closing = state.closing if role == "root" else None  # not after a disable()
    if state.report is not None and delivering:
        report = state.report()
        delivery = _deliver(report, state.path, speak=state.speak)
    elif closing is not None:
        report = closing.report()
        delivery = Delivery(None, written=False)
    else:
        return  # nothing asked
    if closing is not None:
        print(closing.line(report, delivery), file=sys.stderr, flush=True)


def deliver(report: MigrationReport, path: Path | None, *, speak: bool = False) -> bool:
    """The one writer: ``report`` to ``path``, or to stderr when ``path`` is ``None`` and
    ``speak``. A file that cannot be written gets the report on stderr after one line
    that says why (a report made at the end of a run has no later chance); with ``speak``,
    a written file gets a line saying where it is. Whether a file was written."""
    return _deliver(report, path, speak=speak).written


def _deliver(report: MigrationReport, path: Path | None, *, speak: bool) -> Delivery:
    """:func:`deliver`, telling what became of the report."""
    if path is None:
        if speak:
            print(report.to_text(), file=sys.stderr)
        return Delivery(None, written=False, on_stderr=speak)
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
        return Delivery(path, written=False, why=why, on_stderr=True)
    if speak:
        print(f"torchdevice: migration report written to {path}", file=sys.stderr)
    return Delivery(path, written=True)


def unwritable(path: Path, *, directory: bool = False) -> str | None:
    """Why ``path`` (a file, or with ``directory=True`` a folder) cannot be written, ``None``
    when it can, without writing anything. Missing parent folders are fine: the nearest
    folder that exists must be one this user may write in.

    The check every output path gets before the work starts (the tools' paths,
    :mod:`torchdevice.tools.outputs`; ``TORCHDEVICE_REPORT`` and ``report_path`` at
    activation, :mod:`torchdevice.settings`): here, beside the writer it answers for.
    """
    if path.exists():
        if path.is_dir() != directory:
            return "it is a directory" if path.is_dir() else "it is a file, not a directory"
        return None if os.access(path, os.W_OK) else "permission denied"
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{str(parent)!r} is a file, not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{str(parent)!r} is not writable"
