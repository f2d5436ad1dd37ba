"""The CI gate: a run fails when it redirected more lines of the user's code than allowed.

As coverage's ``--fail-under`` keeps a project's coverage from drifting down, this keeps a
ported codebase from drifting back to ``"cuda"``: ``python -m torchdevice
--max-redirected-lines N``, ``pytest --torchdevice --torchdevice-max-redirected-lines N``
and ``torchdevice compare --max-redirected-lines N`` (``N`` is 0 when the option is given
alone) end with a non-zero status and the lines listed when the run's migration report
holds more than ``N`` of them (docs/pytest-and-compare.md has the CI recipe).

A line counts once, however many calls it made: a line of the user's own files (not a
library's: :func:`torchdevice.sites.origin`) that the report says to change
(:func:`~torchdevice.port.to_change`: a device named in the code, a
``torch.cuda`` call the facade answered, a NCCL backend). A fallback or a dtype narrowed
for MPS is the host's business, not a line to port, and does not count.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final

from torchdevice.port import to_change
from torchdevice.reporting import MigrationReport
from torchdevice.sites import origin

__all__ = ["FLAG", "STATUS", "fail_at_exit", "lines_to_port", "verdict"]

#: The option's name in ``torchdevice run`` and ``torchdevice compare`` (the pytest
#: plugin's is ``--torchdevice-`` followed by the same words).
FLAG: Final = "--max-redirected-lines"
#: The exit status of a run (``torchdevice run``) or comparison that succeeded but
#: redirected more lines than allowed (1 is a script's own failure or a regression, 2 a
#: usage error). The pytest plugin's is pytest's for failed tests, 1.
STATUS: Final = 3


def lines_to_port(report: MigrationReport) -> list[str]:
    """The user's lines that ``report`` says to change, one ``file:line: what`` each, in
    file and line order (a line with several calls names each)."""
    found: dict[tuple[str, int], list[str]] = {}
    for entry in report.entries:
        if origin(entry.site.filename) is not None or not to_change(entry):
            continue
        what = f"{entry.api}({entry.requested}) -> {entry.decided}"
        calls = found.setdefault((entry.site.filename, entry.site.lineno), [])
        if what not in calls:
            calls.append(what)
    return [
        f"{_shown(filename)}:{line}: {'; '.join(calls)}"
        for (filename, line), calls in sorted(found.items())
    ]


def verdict(report: MigrationReport, limit: int, option: str = FLAG) -> Sequence[str]:
    """The lines to print when ``report`` redirected more than ``limit`` of the user's
    lines (a heading, then each line); empty when it passes."""
    lines = lines_to_port(report)
    if len(lines) <= limit:
        return ()
    heading = (
        f"torchdevice: {len(lines)} line(s) of your code were redirected, more than the "
        f"{limit} allowed ({option} {limit}):"
    )
    return [heading, *(f"  {line}" for line in lines)]


def _shown(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith(os.pardir) else relative


def fail_at_exit(
    limit: int,
    report: Callable[[], MigrationReport | None],
    script_status: Callable[[], int | None],
) -> None:
    """End the process with :data:`STATUS` at exit when ``report()`` holds more than
    ``limit`` of the user's lines and ``script_status()`` is 0 (a script that failed
    keeps its status; the lines are listed either way). ``report()`` returns ``None`` in
    a process that must not judge (one a redirected run started).

    Register it before torch is imported and before redirection is switched on: ``atexit``
    runs newest first, so it runs last, after the report is delivered, the child
    processes' parts are merged into it, and torch's and multiprocessing's own handlers
    have run. Python fixes the exit status before ``atexit`` handlers run, so a run that
    must fail ends here, with its streams flushed and logging shut down.
    """
    pid = os.getpid()

    def at_exit() -> None:
        if os.getpid() != pid:
            return  # a forked copy
        judged = report()
        lines = () if judged is None else verdict(judged, limit)
        if not lines:
            return
        print("\n".join(lines), file=sys.stderr, flush=True)
        if script_status() == 0:
            sys.stdout.flush()
            logging.shutdown()
            os._exit(STATUS)

    atexit.register(at_exit)
