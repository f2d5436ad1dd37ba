"""Porting: the report's rows as device-agnostic source, as advice and as a patch.

Two questions, one answer each: what does this row's call become (:func:`advice_for`, the
one line the report shows), and what is the patch for these rows (:func:`patch_for`, what
``torchdevice port`` writes). Both are the same rules over the file's text, so what the
report tells a user to write at a line is what the patch writes there. The package sits
below the report and the tools and imports neither, nor the redirect: only
:mod:`torchdevice.sites` (docs/index.md has its modules; docs/port.md the rules).
"""

from torchdevice.port.advice import CHOOSE_DEVICE, advice_for, to_change
from torchdevice.port.patch import PortResult, patch_for
from torchdevice.port.source import MARK, PortEntry

__all__ = [
    "CHOOSE_DEVICE",
    "MARK",
    "PortEntry",
    "PortResult",
    "advice_for",
    "patch_for",
    "to_change",
]
