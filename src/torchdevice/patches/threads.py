"""Carry the function mode into other threads, and take it out again before they end.

PyTorch's function-mode stack is per thread. Two things follow.

**Entering.** ``threading.setprofile`` runs a hook as the first thing in every thread
started afterwards; the hook pushes the mode and puts the previous profile function back.
Threads that are already running get the same hook at their next Python call: through
``threading.setprofile_all_threads`` on Python 3.12+, and on 3.10/3.11 through the C API
that function is built on (``_PyEval_SetProfile`` on each thread state, the way debuggers
attach to running threads), called with :mod:`ctypes` on CPython.

**Leaving.** A mode still on a thread's stack when the thread ends is released by a C++
thread-local destructor after the thread's Python state is gone; if the main thread is
finalizing the interpreter by then, taking the GIL there ends the OS thread inside a
``noexcept`` destructor and the process aborts ("terminate called without an active
exception", exit 134) — a race that shows on a busy machine. So every thread the mode was
pushed on also gets an exit guard in a ``threading.local``: Python drops it when it clears
the thread's state, in that thread, with the GIL held, after ``run()`` returned and before
``join()`` returns; the guard pops the mode there.

Not covered: threads created in C++ that never run Python. Child processes are not
threads: they are redirected through the environment ``enable()`` exports and the
``.pth`` hook (:mod:`_torchdevice_startup`).
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from torchdevice import ledger

__all__ = ["GROUP", "guard_exit", "install"]

ProfileFunc = Callable[..., object]

_previous: ProfileFunc | None = None
_enter: Callable[[], None] | None = None
_leave: Callable[[], None] | None = None
_guards = threading.local()


class _ExitGuard:
    """Pops the mode when its thread's Python state is cleared (see the module docstring).

    At interpreter shutdown the main thread clears the states of daemon threads still
    running: the guard then runs on the main thread and must not touch its stack.
    """

    __slots__ = ("ident", "leave")

    def __init__(self, leave: Callable[[], None]) -> None:
        self.ident = threading.get_ident()
        self.leave = leave

    def __del__(self) -> None:
        if threading.get_ident() == self.ident:
            self.leave()


def guard_exit() -> None:
    """Make sure the calling thread pops the mode before it ends (idempotent).

    The main thread needs no guard: its stack is released after the interpreter is
    finalized, when torch no longer takes the GIL.
    """
    leave = _leave
    if (
        leave is None
        or threading.get_ident() == threading.main_thread().ident
        or getattr(_guards, "guard", None) is not None
    ):
        return
    _guards.guard = _ExitGuard(leave)


def _enter_here() -> None:
    """Enter the mode in the calling thread, with its exit guard (while installed)."""
    enter = _enter
    if enter is not None:
        enter()
        guard_exit()


def _hook(frame: FrameType, event: str, arg: Any) -> object:
    """The first profile event of a covered thread: enter the mode, then step aside."""
    previous = _previous
    sys.setprofile(previous)
    _enter_here()
    if previous is not None:
        return previous(frame, event, arg)
    return None


#: The ledger group of the thread hooks.
GROUP = "thread hooks"


def install(enter: Callable[[], None], leave: Callable[[], None]) -> None:
    """Run ``enter`` in every thread started from now on and in the running ones.

    ``leave`` runs in each of those threads when it ends (and in the thread that calls
    :func:`guard_exit`), whether or not redirection is still on by then. The hooks leave
    through the ledger (:func:`_stop_covering`).
    """
    global _previous, _enter, _leave
    _enter, _leave = enter, leave
    if ledger.has(GROUP):
        return
    _previous = threading.getprofile()
    if sys.version_info >= (3, 12):
        threading.setprofile_all_threads(_hook)
        # The calling thread already has the mode: undo the hook here.
        sys.setprofile(_previous)
    else:
        threading.setprofile(_hook)
        _profile_running_threads()
    ledger.hook(GROUP, "threading.setprofile", _stop_covering)


def _stop_covering() -> None:
    """Stop covering new threads; restore the profile function that was there before.

    Threads that have the mode keep their exit guards (``_leave`` stays): the mode, inert
    after disable, still has to leave their stacks before they end.
    """
    global _previous, _enter
    _enter = None
    threading.setprofile(_previous)
    _previous = None


# -- running threads on Python 3.10 / 3.11 ------------------------------------------------
# ``threading.setprofile_all_threads`` (3.12) walks the interpreter's thread states and calls
# ``_PyEval_SetProfile(tstate, func, arg)`` on each; 3.10 and 3.11 export the same functions,
# so the same walk is made here. The profile function is a C callback that calls the hook
# once, in the thread itself, at its next call; the hook then removes it.
_TRACEFUNC = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p
)


def _first_event(_obj: object, _frame: int | None, _what: int, _arg: int | None) -> int:
    """The C profile function of a thread that was running at ``enable()``: runs once.

    What profiled the thread before cannot be read back from Python, so the profile
    function is cleared (as ``threading.setprofile_all_threads`` overwrites it too).
    """
    sys.setprofile(None)
    try:
        _enter_here()
    except Exception:  # a C callback must not raise: the thread stays native, and says so
        logging.getLogger("torchdevice.threads").warning(
            "torchdevice could not enter thread %s",
            threading.current_thread().name,
            exc_info=True,
        )
    return 0


_callback = _TRACEFUNC(_first_event)  # kept alive: thread states point at it


def _profile_running_threads() -> None:
    """Hook every other running thread (CPython 3.10/3.11; elsewhere a no-op)."""
    if sys.implementation.name != "cpython":
        return
    api = ctypes.pythonapi
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
    api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
    api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Next.restype = ctypes.c_void_p
    api.PyThreadState_Get.restype = ctypes.c_void_p
    api._PyEval_SetProfile.argtypes = [ctypes.c_void_p, _TRACEFUNC, ctypes.py_object]
    api._PyEval_SetProfile.restype = ctypes.c_int
    me = api.PyThreadState_Get()
    # The GIL is held throughout (pythonapi calls keep it): no thread state can be deleted
    # while the list is walked.
    state = api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Get())
    while state:
        if state != me:
            api._PyEval_SetProfile(state, _callback, None)
        state = api.PyThreadState_Next(state)
