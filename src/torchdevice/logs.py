"""Logging as a library should do it: records and warnings at the user's line.

* The ``torchdevice`` logger has a ``NullHandler`` and its level is left alone unless the
  user asked for one (the ``log_level`` option or ``TORCHDEVICE_LOG_LEVEL``), so
  ``logging.basicConfig(level=INFO)`` or pytest's ``--log-cli-level=INFO`` shows the
  redirects, as for any library (urllib3 does the same).
* Records go to a child logger per concern, so a user can filter one:
  ``torchdevice.redirects`` (device requests moved, the CPU override, dtype rules, device
  API calls), ``torchdevice.fallback`` (ops rerun on the CPU), ``torchdevice.report``
  (the migration report and its parts from other processes), ``torchdevice.threads``;
  the start-up line is on ``torchdevice`` itself.
* A stderr handler is added only when torchdevice is asked to show records (a level
  given, or the launcher, which owns the process's stderr), as urllib3's
  ``add_stderr_logger`` or ``TORCH_LOGS`` do; it stands aside as soon as the application
  configures logging (a handler on the root logger or on a ``torchdevice`` logger), so a
  script that calls ``logging.basicConfig`` sees each record once.
* A record about a call carries the user's ``pathname``, ``lineno`` and ``funcName``
  (:func:`at_site`), so a format with ``%(filename)s:%(lineno)d`` names the user's line,
  not this package's.
* A warning torch raises while a handler runs the user's call (a deprecation, a beta
  feature) names the user's line too, as it does natively, where torch warns from the
  user's frame: that hook changes the standard library, so it lives with the other
  patches (:func:`torchdevice.patches.warning_hooks.attribute_warnings`).

Everything here that changes the process goes through the :mod:`~torchdevice.ledger`.
"""

from __future__ import annotations

import logging
import sys
from typing import Final

from torchdevice import ledger
from torchdevice.sites import CallSite

__all__ = [
    "GROUP",
    "LAUNCHER_GROUP",
    "at_site",
    "configure_logging",
    "fallback_logger",
    "logger",
    "redirects_logger",
    "report_logger",
    "show_on_stderr",
    "threads_logger",
]

logger = logging.getLogger("torchdevice")
logger.addHandler(logging.NullHandler())
redirects_logger = logging.getLogger("torchdevice.redirects")
fallback_logger = logging.getLogger("torchdevice.fallback")
report_logger = logging.getLogger("torchdevice.report")
threads_logger = logging.getLogger("torchdevice.threads")

#: The ledger group of what this module changes (the level, a handler).
GROUP: Final = "logging"


class _StderrUntilConfigured(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes torchdevice's records to stderr while nothing else would show them.

    Once the application has configured logging (a handler on the root logger, or on a
    ``torchdevice`` logger the record passes through), the record reaches that handler
    by propagation, and this one stays silent: every record is shown once.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if not _configured_elsewhere(record.name, self):
            super().emit(record)


def _shows(handler: logging.Handler, own: logging.Handler) -> bool:
    return handler is not own and not isinstance(handler, logging.NullHandler)


def _configured_elsewhere(name: str, own: logging.Handler) -> bool:
    """Whether a handler other than ``own`` will get a record of logger ``name``."""
    current: logging.Logger | None = logging.getLogger(name)
    while current is not None:
        if any(_shows(handler, own) for handler in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


#: The ledger group of the launcher's handler (it outlives a reconfiguration).
LAUNCHER_GROUP: Final = "logging: launcher"


def show_on_stderr(group: str = LAUNCHER_GROUP) -> None:
    """Attach the stderr handler that stands aside for the application's configuration.

    For the launcher (it owns the process's stderr) and for an explicit ``log_level``;
    one handler at most, recorded in the ledger under ``group``.
    """
    if any(isinstance(handler, _StderrUntilConfigured) for handler in logger.handlers):
        return
    handler = _StderrUntilConfigured()
    logger.addHandler(handler)
    ledger.hook(group, "a stderr handler", lambda: logger.removeHandler(handler))


def configure_logging(level: str | None) -> None:
    """Apply the ``log_level`` setting, only when the user gave one.

    Asked for, the level is set and the stderr handler attached (it shows nothing once
    the application has configured logging: see :class:`_StderrUntilConfigured`). Not
    asked for, the logger keeps the level the application gave it (by default none: it
    inherits the root logger's). A reconfiguration first undoes the previous one;
    ``disable()`` undoes it through the ledger.
    """
    ledger.undo(GROUP)
    if level is None:
        return
    previous = logger.level
    logger.setLevel(level)
    ledger.hook(GROUP, "the 'torchdevice' logger's level", lambda: logger.setLevel(previous))
    show_on_stderr(GROUP)


def at_site(
    level: int, site: CallSite, message: str, *args: object, to: logging.Logger = logger
) -> None:
    """Log ``message % args`` on logger ``to`` as a record made at ``site`` (the user's line)."""
    if not to.isEnabledFor(level):
        return
    record = to.makeRecord(
        to.name, level, site.filename, site.lineno, message, args, None, site.function
    )
    to.handle(record)
