"""Splitting a command line between torchdevice's options and the program it runs.

``torchdevice run [OPTIONS] SCRIPT [ARGS...]`` and ``torchdevice compare [OPTIONS] [PYTEST
ARGS...]`` both take their own options first; the first argument that is not one of them
(or ``--``) starts the other program's, which argparse must never see.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

__all__ = ["split_leading"]


def split_leading(
    argv: list[str],
    takes_value: Collection[str],
    is_flag: Callable[[str], bool],
    last: Collection[str] = (),
    takes_number: Collection[str] = (),
) -> tuple[list[str], list[str]]:
    """``(ours, theirs)``: leading options of ours, then everything else.

    ``takes_value`` options consume the next argument; ``takes_number`` options consume it
    only when it is a whole number (``--max-redirected-lines [N]``: alone, it means 0, and
    the script's name that follows is not its value); ``is_flag`` says which other
    arguments are ours; an option in ``last`` ends ours after its value (``-m MODULE``).
    A ``--`` ends ours and is dropped.
    """
    ours: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return ours, argv[i + 1 :]
        if arg in takes_value:
            ours += argv[i : i + 2]
            i += 2
            if arg in last:
                break
        elif arg in takes_number and i + 1 < len(argv) and argv[i + 1].isdigit():
            ours += argv[i : i + 2]
            i += 2
        elif is_flag(arg):
            ours.append(arg)
            i += 1
        else:
            break
    return ours, argv[i:]
