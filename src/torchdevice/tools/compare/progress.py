"""``torchdevice compare``'s progress: one status line per run, with an estimate of the
time left.

A suite run twice can take an hour; a line that only counts tests says nothing of when it
ends. The estimate is the run's own pace once a test has finished (the tests left at the
mean time of those done), and before that how long the other run of the same tests took
(the native run's duration, for the redirected run). It is rounded, as estimates should
be. rich and tqdm draw bars, but one line rewritten in place (``\\r``, erase to the end
of the line) is all this needs, and a log file gets a plain line every 10 s instead.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TextIO

from torchdevice.tools.compare.model import RunResult

__all__ = ["Progress", "estimate_left", "eta_text"]


def eta_text(seconds: float) -> str:
    """``about 40 s left``, ``about 3 min left``: a rough figure, as an estimate is."""
    if seconds < 60:
        return f"about {max(round(seconds / 5) * 5, 5)} s left"
    return f"about {round(seconds / 60)} min left"


def estimate_left(
    done: int, collected: int | None, elapsed_s: float, expected_s: float | None
) -> float | None:
    """Seconds left in a run, or ``None`` when nothing says yet.

    From the run's own pace once a test has finished and the total is known (the tests
    left at the mean time of those done, collection included); before that, from
    ``expected_s``, how long the other run of the same tests took (the native run's
    duration, for the redirected one).
    """
    if collected is not None and done > 0:
        return max(collected - done, 0) * elapsed_s / done
    if expected_s is not None:
        return max(expected_s - elapsed_s, 0.0)
    return None


class Progress:
    """One status line per run, with an ETA: on a terminal rewritten in place, else every
    few seconds."""

    def __init__(self, stream: TextIO | None, label: str, expected_s: float | None = None) -> None:
        self.stream = stream
        self.label = label
        self.expected_s = expected_s
        self.tty = stream is not None and stream.isatty()
        self.last_print = time.monotonic()
        self.start = time.monotonic()
        self.shown = ""
        self.printed = ""

    def line(self, run: RunResult, *, eta: bool = True) -> str:
        counts = Counter(result.outcome for result in run.tests.values())
        total = "?" if run.collected is None else str(run.collected)
        text = (
            f"{self.label}: {len(run.tests)}/{total} tests done ({counts['passed']} passed, "
            f"{counts['failed']} failed, {counts['error']} errors, {counts['skipped']} skipped)"
        )
        left = estimate_left(
            len(run.tests), run.collected, time.monotonic() - self.start, self.expected_s
        )
        return f"{text}, {eta_text(left)}" if eta and left is not None else text

    def update(self, run: RunResult) -> None:
        if self.stream is None:
            return
        text = self.line(run)
        now = time.monotonic()
        if self.tty and text != self.shown:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
        elif not self.tty and text != self.printed and now - self.last_print >= 10:
            self.stream.write(text + "\n")  # a log file: a line every 10 s at most
            self.stream.flush()
            self.last_print, self.printed = now, text
        self.shown = text

    def finish(self, run: RunResult) -> None:
        if self.stream is None:
            return
        prefix = "\r\x1b[K" if self.tty else ""
        elapsed = time.monotonic() - self.start
        self.stream.write(
            f"{prefix}{self.line(run, eta=False)} in {elapsed:.1f} s, exit status {run.exit_code}\n"
        )
        self.stream.flush()
