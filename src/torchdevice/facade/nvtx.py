"""NVTX ranges and the CUDA profiler switches as no-ops that keep their return values.

NVTX annotates a timeline for NVIDIA's profilers; with no CUDA device no such profiler can
attach, so the ranges do nothing. ``range_push``/``range_pop`` still return the nesting
depth (0-based), as NVTX does, kept per thread. ``torch.profiler`` works as usual.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "mark",
    "profile",
    "range",
    "range_end",
    "range_pop",
    "range_push",
    "range_start",
    "start",
    "stop",
]

_local = threading.local()
_ids = itertools.count(1)


def _depth() -> int:
    return int(getattr(_local, "depth", 0))


def range_push(msg: str) -> int:
    """Open a nested range; returns its 0-based depth."""
    depth = _depth()
    _local.depth = depth + 1
    return depth


def range_pop() -> int:
    """Close the innermost range; returns its depth, or -1 if none is open (as NVTX)."""
    depth = _depth()
    if depth == 0:
        return -1
    _local.depth = depth - 1
    return depth - 1


def range_start(msg: str) -> int:
    """Open a process-wide range; returns its id."""
    return next(_ids)


def range_end(range_id: int) -> None:
    """Close the range ``range_id``."""


def mark(msg: str) -> None:
    """Mark an instant on the (absent) NVIDIA timeline."""


@contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
    """``with torch.cuda.nvtx.range("step"):`` a nested range."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()


def start() -> None:
    """``torch.cuda.profiler.start()``: no CUDA profiler can attach here."""


def stop() -> None:
    """``torch.cuda.profiler.stop()``: no CUDA profiler can attach here."""


@contextmanager
def profile() -> Iterator[None]:
    """``with torch.cuda.profiler.profile():``: no CUDA profiler can attach here."""
    yield
