"""The report file at exit, wherever torchdevice is on.

``TORCHDEVICE_REPORT=PATH`` (or ``enable(report_path=PATH)``) asks for the migration report
in a file. The launcher (``python -m torchdevice``) and the pytest plugin write it
themselves and :func:`claim` it; every other way of switching torchdevice on
(``enable()``, ``with redirect()``, ``ACTIVATE_TORCH_DEVICE=1``) gets it from the exit
handler here, once per process, after the interpreter has joined its threads. Only the
process that started the run writes: a child of a redirected run sends its part to that
process (:mod:`torchdevice.reporting.parts`) instead. A file that cannot be written at exit is
not lost: the report goes to stderr after one line that says why.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from torchdevice.reporting import parts as report_parts
from torchdevice.reporting.report import MigrationReport

__all__ = ["claim", "request", "write"]

_lock = threading.Lock()
#: (path, the function that gives the whole run's report), as the last activation asked.
_wanted: tuple[Path, Callable[[], MigrationReport]] | None = None
_registered_pid: int | None = None
_claimed_pid: int | None = None


def request(path: Path | None, report: Callable[[], MigrationReport]) -> None:
    """Write ``report()`` to ``path`` when this process exits (``None``: no file).

    The last activation decides, as it does for every setting: ``enable()`` without a path
    (and without ``TORCHDEVICE_REPORT``) after ``enable(report_path=...)`` asks for none;
    a ``redirect()`` block inherits the enclosing activation's path. ``disable()`` keeps
    the request: the report of what ran is still written at exit.
    """
    global _wanted, _registered_pid
    with _lock:
        _wanted = None if path is None else (path, report)
        if path is not None and _registered_pid != os.getpid():
            _registered_pid = os.getpid()  # a fork child that exits registers its own
            atexit.register(_write_at_exit)


def claim() -> None:
    """This process's report is written by its caller (the launcher, the pytest plugin)."""
    global _claimed_pid
    _claimed_pid = os.getpid()


def _write_at_exit() -> None:
    wanted = _wanted
    if wanted is None or _claimed_pid == os.getpid() or _registered_pid != os.getpid():
        return
    if report_parts.role() == "writer":
        return  # its part goes to the process that started the run, which reports
    path, report = wanted
    write(report(), path)


def write(report: MigrationReport, path: Path) -> bool:
    """Write ``report`` to ``path``; if that fails, print it to stderr after one line that
    says why (a report made at exit has no later chance). Whether the file was written."""
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
    return True
