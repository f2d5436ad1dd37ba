"""The lines that say torchdevice is on: one on stderr at start, and one at exit.

``python -m torchdevice`` prints the start line (then the report at exit, as it always
did); ``ACTIVATE_TORCH_DEVICE=1 python script.py`` prints it too, and at exit a line that
says how much was redirected and where the migration report is (or how to get one). Only
the process that started the run says anything: the processes it starts (DataLoader
workers, subprocesses, torchrun's ranks) inherit the activation and send their report to
it (:mod:`torchdevice.reporting.parts`), silently. ``torchdevice.enable()`` in a program
prints nothing: the program owns its output.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable

from torchdevice import activation
from torchdevice.reporting import parts as report_parts

__all__ = ["from_environment", "start_line", "starts_the_run"]


def starts_the_run() -> bool:
    """Whether this process started the run (its children's reports come to it)."""
    return report_parts.role() == "root"


def start_line(how: str = "") -> str:
    """``torchdevice: on, redirecting to cpu (cpu host, ...)`` for the active runtime."""
    runtime = activation.current_runtime()
    said = activation.describe(runtime) if runtime is not None else "off"
    return f"torchdevice: on{how}, {said}"


def from_environment(enable: Callable[[], None]) -> None:
    """Enable as the environment asks, with the start line, in the process that started
    the run, and one line at exit pointing to the migration report.

    The exit line's handler is registered before ``enable()`` registers the report file's
    and the report parts' (``atexit`` runs newest first): it runs after the file is
    written and the children's parts are merged.
    """
    atexit.register(_pointer, os.getpid())
    enable()
    if starts_the_run():
        print(start_line(" (ACTIVATE_TORCH_DEVICE)"), file=sys.stderr, flush=True)


def _pointer(pid: int) -> None:
    """How much was redirected, and where the report is (or how to have one)."""
    if os.getpid() != pid or not starts_the_run():
        return  # a forked copy, a process of someone else's run, or disabled since
    report = activation.report()
    runtime = activation.current_runtime()
    path = None if runtime is None else runtime.settings.report_path
    counted = f"{report.total} call(s) redirected at {len(report.entries)} call site(s)"
    if path is not None and path.exists():
        where = f"migration report written to {path}"
    else:
        where = (
            "TORCHDEVICE_REPORT=report.json writes the migration report "
            "(python -m torchdevice SCRIPT prints it)"
        )
    print(f"torchdevice: {counted}; {where}", file=sys.stderr, flush=True)
