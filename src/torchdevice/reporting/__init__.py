"""The migration report: what was redirected or fell back, where, and what to change.

One package, its imports running one way (each module imports only those above it;
``tests/test_reporting_layout.py`` checks it):

- :mod:`~torchdevice.reporting.guide`: a row read as porting advice, and the text report
- :mod:`~torchdevice.reporting.entries`: a row (:class:`Entry`), the kinds of event, the
  schema version
- :mod:`~torchdevice.reporting.schema`: the JSON report's pydantic model (imported only to
  write or read JSON; ``python -m torchdevice.reporting.schema`` prints it)
- :mod:`~torchdevice.reporting.report`: :class:`MigrationReport`, :func:`merge`,
  :func:`relocate`
- :mod:`~torchdevice.reporting.recorder`: the :class:`~torchdevice.reporting.recorder.Recorder`
  that counts events per call site as they happen
- :mod:`~torchdevice.reporting.parts`: one report for a run of many processes
- :mod:`~torchdevice.reporting.file`: the one writer of the report at the end of a run

The public function is :func:`torchdevice.report`; this package holds what it returns.
"""

from __future__ import annotations

from torchdevice.reporting.entries import SCHEMA_VERSION, Entry, EventKind
from torchdevice.reporting.report import MigrationReport, merge, path_mapping, relocate

__all__ = [
    "SCHEMA_VERSION",
    "Entry",
    "EventKind",
    "MigrationReport",
    "merge",
    "path_mapping",
    "relocate",
]
