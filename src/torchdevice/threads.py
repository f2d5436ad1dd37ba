"""Carry the function mode into other threads.

PyTorch's function-mode stack is per thread. ``threading.setprofile`` runs a hook as the
first thing in every thread started afterwards; the hook pushes the mode and puts the
previous profile function back. On Python 3.12+ ``threading.setprofile_all_threads`` does
the same for threads that are already running, at their next Python call.

Not covered: threads created in C++ (they run no ``threading`` start-up), running threads
on Python < 3.12, and child processes (they import torchdevice afresh: use
``ACTIVATE_TORCH_DEVICE=1`` in their environment).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["install", "uninstall"]

ProfileFunc = Callable[..., object]

_previous: ProfileFunc | None = None
_installed = False
_enter: Callable[[], None] | None = None


def _hook(frame: FrameType, event: str, arg: Any) -> object:
    """The first profile event of a covered thread: enter the mode, then step aside."""
    previous = _previous
    sys.setprofile(previous)
    enter = _enter
    if enter is not None:
        enter()
    if previous is not None:
        return previous(frame, event, arg)
    return None


def install(enter: Callable[[], None]) -> None:
    """Run ``enter`` in every thread started from now on (and running ones on 3.12+)."""
    global _previous, _installed, _enter
    _enter = enter
    if _installed:
        return
    _previous = threading.getprofile()
    _installed = True
    if sys.version_info >= (3, 12):
        threading.setprofile_all_threads(_hook)
        # The calling thread already has the mode: undo the hook here.
        sys.setprofile(_previous)
    else:
        threading.setprofile(_hook)


def uninstall() -> None:
    """Stop covering new threads; restore the profile function that was there before."""
    global _previous, _installed, _enter
    if not _installed:
        return
    _enter = None
    threading.setprofile(_previous)
    _previous = None
    _installed = False
