"""Where the tools write: one rule for every output path, checked before the work starts.

``torchdevice run --report``, ``port -o``, ``combine -o``, ``compare --output``, the pytest
plugin's ``--torchdevice-report`` and ``TORCHDEVICE_REPORT`` all follow it: missing parent
folders are created (as pytest's ``--junitxml`` does), and a path that cannot be written is
a one-line usage error before anything runs, not a traceback after a long run that then
loses its output. The report itself makes the folders when it is written
(:meth:`torchdevice.reporting.MigrationReport.write`); :func:`unwritable` is the check,
which lives beside the report's writer (:mod:`torchdevice.reporting.file`), where the
settings find it too.
"""

from __future__ import annotations

from torchdevice.reporting.file import unwritable

__all__ = ["unwritable"]
