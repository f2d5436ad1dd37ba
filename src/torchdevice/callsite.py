"""Find the line of user code that made a torch call.

Redirects are logged with the user's file, line and function, not torch's frames or ours.
The common case (user code calling ``torch.zeros`` directly) costs one ``sys._getframe``
and one dict lookup; only calls that arrive through torch's own Python code (``Module.to``
reaching ``_parse_to``) walk further up the stack.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from types import CodeType, FrameType

__all__ = ["CallSite", "is_internal", "site_of", "user_frame"]


def _package_dir(module_name: str) -> str:
    module = sys.modules[module_name]
    return os.path.dirname(os.path.abspath(module.__file__ or "")) + os.sep


_INTERNAL_PREFIXES: tuple[str, ...] = ()
# Keyed by id(code): hashing a code object recomputes its hash on every lookup (~0.1 µs on
# 3.11). The code objects are kept alive in _seen so their ids are never reused.
internal_cache: dict[int, bool] = {}
_seen: list[CodeType] = []
_lock = threading.Lock()


def _prefixes() -> tuple[str, ...]:
    global _INTERNAL_PREFIXES
    if not _INTERNAL_PREFIXES:
        import torch  # noqa: PLC0415, F401 - ensure torch is loaded before reading its path

        _INTERNAL_PREFIXES = (
            _package_dir("torch"),
            _package_dir("torchdevice"),
            os.path.join(os.path.dirname(threading.__file__), "contextlib.py"),
        )
    return _INTERNAL_PREFIXES


def is_internal(code: CodeType) -> bool:
    """True for code inside torch, torchdevice or contextlib (cached per code object)."""
    internal = internal_cache.get(id(code))
    if internal is None:
        name = code.co_filename
        internal = name.startswith("<frozen ") or os.path.abspath(name).startswith(_prefixes())
        with _lock:
            _seen.append(code)
            internal_cache[id(code)] = internal
    return internal


def user_frame(depth: int) -> FrameType | None:
    """The first frame at or above ``depth`` (relative to the caller) that is user code.

    On the redirect hot path: one cached dict lookup by code id per frame walked.
    """
    frame: FrameType | None = sys._getframe(depth + 1)
    known = internal_cache
    while frame is not None:
        internal = known.get(id(frame.f_code))
        if internal is None:
            internal = is_internal(frame.f_code)
        if not internal:
            break
        frame = frame.f_back
    return frame


@dataclass(frozen=True, slots=True)
class CallSite:
    """A line of user code: where a user would edit to port the call by hand."""

    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}()"


_UNKNOWN = CallSite("<unknown>", 0, "<unknown>")


def site_of(frame: FrameType | None) -> CallSite:
    """The :class:`CallSite` of ``frame`` (``<unknown>`` when torch was called from C)."""
    if frame is None:
        return _UNKNOWN
    return CallSite(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
