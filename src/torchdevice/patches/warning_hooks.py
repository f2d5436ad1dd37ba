"""The two hooks on Python's warning machinery: warnings at the user's line, and torch's
own MPS fallbacks counted in the report.

* :func:`attribute_warnings` (every host): a warning torch raises while one of
  torchdevice's handlers runs the user's call names the user's line, as it does natively.
* :func:`observe_native` (MPS hosts): PyTorch's own CPU fallback for MPS says so in a
  warning, which is the only way the report can learn of it.

Both are changes to the standard library's ``warnings`` module, made and undone through
the :mod:`~torchdevice.ledger` (moved here from ``logs.py`` and ``fallback.py`` so that
every patch lives in :mod:`torchdevice.patches`).
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, Final

from torchdevice import ledger
from torchdevice.logs import GROUP as _LOGGING_GROUP
from torchdevice.redirecting import callsite
from torchdevice.redirecting.runtime import active

__all__ = ["ATTRIBUTE_GROUP", "NATIVE_GROUP", "attribute_warnings", "observe_native"]

#: The package's own directory: warnings located there are moved to the user's line.
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

#: The ledger group of the ``warnings._showwarnmsg`` hook.
ATTRIBUTE_GROUP: Final = _LOGGING_GROUP + ": warnings"


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
    if ledger.has(ATTRIBUTE_GROUP):
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

    ledger.set_attr(ATTRIBUTE_GROUP, warnings, "_showwarnmsg", showwarnmsg)


# With PYTORCH_ENABLE_MPS_FALLBACK=1 (read by torch at import; `python -m torchdevice` sets
# it on macOS before torch loads) torch reruns unsupported MPS ops on the CPU itself,
# backward ops included, and says so once per op in a UserWarning. Those ops never raise,
# so the report learns of them from the warning. The simulated MPS device says the same,
# with its own backend name, under the same variable.
_NATIVE = re.compile(
    r"The operator '(?P<op>[\w:.]+)' is not currently supported on the \w+ backend and "
    r"will fall back to run on the CPU"
)
#: The ledger group of the ``warnings.showwarning`` wrapper.
NATIVE_GROUP = "native MPS fallback observer"


def observe_native() -> None:
    """Count torch's native MPS fallbacks in the migration report (wraps showwarning).

    Idempotent; the wrapper leaves through the ledger (``disable()``, or
    ``ledger.undo(NATIVE_GROUP)`` when the host stops being an MPS host).
    """
    if ledger.has(NATIVE_GROUP):
        return
    original = warnings.showwarning

    def showwarning(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
        match = _NATIVE.search(str(message))
        rt = active()
        if match is not None and rt is not None:
            rt.note_event("fallback", match["op"], "mps", "cpu", "PyTorch's MPS fallback (native)")
        original(message, category, *args, **kw)

    ledger.set_attr(NATIVE_GROUP, warnings, "showwarning", showwarning)
