"""Logging as a library should do it: records and warnings at the user's line.

* The ``torchdevice`` logger's level is left alone unless the user asked for one (the
  ``log_level`` option or ``TORCHDEVICE_LOG_LEVEL``), so ``logging.basicConfig(level=INFO)``
  or pytest's ``--log-cli-level=INFO`` shows the redirects, as for any library.
* A record about a call carries the user's ``pathname``, ``lineno`` and ``funcName``
  (:func:`at_site`), so a format with ``%(filename)s:%(lineno)d`` names the user's line,
  not this package's.
* A warning torch raises while a handler runs the user's call (a deprecation, a beta
  feature) names the user's line too (:func:`attribute_warnings`), as it does natively,
  where torch warns from the user's frame.

Everything here that changes the process goes through the :mod:`~torchdevice.ledger`.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any, Final

from torchdevice import callsite, ledger
from torchdevice.callsite import CallSite

__all__ = ["GROUP", "at_site", "attribute_warnings", "configure_logging", "logger"]

logger = logging.getLogger("torchdevice")

#: The ledger group of what this module changes (the level, a handler, the warning hook).
GROUP: Final = "logging"

_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def configure_logging(level: str | None) -> None:
    """Apply the ``log_level`` setting, only when the user gave one.

    Asked for, the level is set, and when nothing is configured to show the records a
    stderr handler is attached (without one, Python's last-resort handler would drop every
    record below WARNING). Not asked for, the logger keeps the level the application gave
    it (by default none: it inherits the root logger's). A reconfiguration first undoes
    the previous one; ``disable()`` undoes it through the ledger.
    """
    ledger.undo(GROUP)
    if level is None:
        return
    previous = logger.level
    logger.setLevel(level)
    ledger.hook(GROUP, "the 'torchdevice' logger's level", lambda: logger.setLevel(previous))
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        ledger.hook(GROUP, "a stderr handler", lambda: logger.removeHandler(handler))


def at_site(level: int, site: CallSite, message: str, *args: object) -> None:
    """Log ``message % args`` as a record made at ``site`` (the user's line)."""
    if not logger.isEnabledFor(level):
        return
    record = logger.makeRecord(
        logger.name, level, site.filename, site.lineno, message, args, None, site.function
    )
    logger.handle(record)


def attribute_warnings() -> None:
    """Make warnings raised inside torchdevice's handlers name the user's line.

    torch warns from C++ at the innermost Python frame, which under redirection is the
    handler that made the call for the user. Python hands every warning to
    ``warnings._showwarnmsg`` (also under ``catch_warnings(record=True)``, which pytest
    uses); the hook moves a warning located in this package to the first user frame
    before it is shown or recorded. Limits: the once-per-location filter has already
    keyed the warning on the handler's line, so the same message from two user lines is
    shown once, not twice.
    """
    if ledger.has(GROUP + ": warnings"):
        return
    original = warnings._showwarnmsg  # type: ignore[attr-defined]

    def showwarnmsg(message: Any) -> None:
        if str(message.filename).startswith(_OWN_DIR):
            frame = callsite.user_frame(1)
            if frame is not None:
                message.filename = frame.f_code.co_filename
                message.lineno = frame.f_lineno
                message.line = None  # read from the user's file when formatted
        original(message)

    ledger.set_attr(GROUP + ": warnings", warnings, "_showwarnmsg", showwarnmsg)
