"""Where in the user's source a call was made: the file, line and function a person would
edit, the exact span of the call expression, and whose code the file is (the user's or
a library's).

These are plain data that three rooms share: the redirect records them, the report stores and
renders them, and the port rewrites the code they point at. They sit below all three, so
none of those rooms has to import another to name a line.
"""

from __future__ import annotations

import itertools
import os
import sys
import sysconfig
from dataclasses import dataclass
from types import FrameType

__all__ = ["CallSite", "Position", "origin", "position_of", "site_of"]


#: Where a call's expression lies in its file: line, end line, column, end column (columns
#: are UTF-8 byte offsets, as ``co_positions`` gives them).
Position = tuple[int, int, int, int]


def position_of(frame: FrameType) -> Position | None:
    """The exact source span of the call ``frame`` is making (3.11+; ``None`` before).

    Python keeps one position per instruction (``code.co_positions()``); the frame's last
    instruction is the call, so its span covers the call expression the user wrote.
    """
    code = frame.f_code
    if not hasattr(code, "co_positions"):  # 3.10
        return None
    found = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None), None)
    if found is None:
        return None
    line, end_line, column, end_column = found
    if line is None or end_line is None or column is None or end_column is None:
        return None
    return (line, end_line, column, end_column)


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


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("purelib", "platlib", "stdlib", "platstdlib") if key in paths}
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    # Longest first: in a venv the standard library's platform root contains site-packages.
    return tuple(sorted((os.path.abspath(root) + os.sep for root in roots), key=len, reverse=True))


_ROOTS: tuple[str, ...] = ()


def origin(filename: str) -> str | None:
    """The package a file belongs to, or ``None`` for the user's own code.

    Files under site-packages (or the standard library) are a library's: named by their
    top-level package (``transformers``). Everything else is the user's.
    """
    global _ROOTS
    if not _ROOTS:
        _ROOTS = _library_roots()
    path = os.path.abspath(filename)
    for root in _ROOTS:
        if path.startswith(root):
            top = path[len(root) :].split(os.sep, 1)[0]
            return top.removesuffix(".py") or "python"
    return None
