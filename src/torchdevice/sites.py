"""Where in the user's source a call was made: the file, line and function a person would
edit, and the exact span of the call expression.

These are plain data that three rooms share: the redirect records them, the report stores and
renders them, and the port rewrites the code they point at. They sit below all three, so
none of those rooms has to import another to name a line.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import FrameType

__all__ = ["CallSite", "Position", "position_of", "site_of"]


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
