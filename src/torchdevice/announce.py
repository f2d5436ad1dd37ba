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

import sys
from collections.abc import Callable

from torchdevice import activation
from torchdevice.reporting import MigrationReport
from torchdevice.reporting import file as report_file
from torchdevice.reporting import parts as report_parts

__all__ = ["closing_line", "from_environment", "start_line", "starts_the_run"]


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
    the run, and one line at exit saying how much was redirected and what became of the
    migration report (the exit sequence says it after delivering:
    :func:`torchdevice.reporting.file.close_with`)."""
    enable()
    report_file.close_with(activation.report, closing_line)
    if starts_the_run():
        print(start_line(" (ACTIVATE_TORCH_DEVICE)"), file=sys.stderr, flush=True)


def closing_line(report: MigrationReport, delivery: report_file.Delivery) -> str:
    """How much was redirected, and where the report is (or how to have one): "written"
    only when the exit sequence wrote it, not when a file of that name exists."""
    counted = f"{report.total} call(s) redirected at {len(report.entries)} call site(s)"
    if delivery.written:
        where = f"migration report written to {delivery.path}"
    elif delivery.path is not None:
        where = (
            f"the migration report was not written to {delivery.path} ({delivery.why}): "
            "it is above, on stderr"
        )
    elif delivery.on_stderr:
        where = "the migration report is above, on stderr"
    else:
        where = (
            "TORCHDEVICE_REPORT=report.json writes the migration report "
            "(python -m torchdevice SCRIPT prints it)"
        )
    return f"torchdevice: {counted}; {where}"
