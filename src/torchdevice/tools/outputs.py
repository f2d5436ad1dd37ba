"""Where the tools write: one rule for every output path, checked before the work starts.

``torchdevice run --report``, ``port -o``, ``combine -o``, ``compare --output``, the pytest
plugin's ``--torchdevice-report`` and ``TORCHDEVICE_REPORT`` all follow it: missing parent
folders are created (as pytest's ``--junitxml`` does), and a path that cannot be written is
a one-line usage error before anything runs, not a traceback after a long run that then
loses its output. The report itself makes the folders when it is written
(:meth:`torchdevice.reporting.MigrationReport.write`); :func:`unwritable` is the check.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["unwritable"]


def unwritable(path: Path, *, directory: bool = False) -> str | None:
    """Why ``path`` (a file, or with ``directory=True`` a folder) cannot be written, ``None``
    when it can, without writing anything. Missing parent folders are fine: the nearest
    folder that exists must be one this user may write in."""
    if path.exists():
        if path.is_dir() != directory:
            return "it is a directory" if path.is_dir() else "it is a file, not a directory"
        return None if os.access(path, os.W_OK) else "permission denied"
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{str(parent)!r} is a file, not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{str(parent)!r} is not writable"
