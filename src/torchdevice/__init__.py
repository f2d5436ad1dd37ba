"""torchdevice: run PyTorch code written for one accelerator on the one the host has.

>>> import torchdevice
>>> torchdevice.enable()          # or: with torchdevice.redirect(): ...
>>> torch.zeros(3, device="cuda").device   # on a Mac: mps:0, on a CPU-only box: cpu

``ACTIVATE_TORCH_DEVICE=1`` or ``TORCH_ALLOW_REDIRECTS=true`` enable it at import.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from types import FrameType as _FrameType

if _sys.platform == "darwin" and "torch" not in _sys.modules:
    # PyTorch's own MPS fallback reruns unsupported MPS ops on the CPU, in backward too,
    # where a function mode cannot reach. torch reads the variable once, at its import,
    # so it can only be set by code that runs first: `python -m torchdevice` does, and so
    # does `import torchdevice` before `import torch`. An explicit value is respected.
    _os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")

from typing import TYPE_CHECKING, Any

from torchdevice.environment import activation_requested
from torchdevice.errors import (
    DeviceRequestError,
    DeviceRequestTypeError,
    SettingsError,
    TorchDeviceError,
    UnsupportedFeatureError,
)
from torchdevice.host import Host
from torchdevice.reporting import MigrationReport as MigrationReport  # the type report() returns

if TYPE_CHECKING:
    from torchdevice.activation import (
        disable,
        enable,
        is_enabled,
        redirect,
        report,
        reset_report,
        set_cpu_override,
    )

#: Public functions that live in :mod:`torchdevice.activation`, which imports torch. They
#: load on first use (PEP 562), so importing the package — as pytest does for the plugin
#: of every run — costs nothing until torchdevice is actually asked for.
_ACTIVATION_API = frozenset(
    {"disable", "enable", "is_enabled", "redirect", "report", "reset_report", "set_cpu_override"}
)


def __getattr__(name: str) -> Any:
    if name in _ACTIVATION_API:
        from torchdevice import activation  # noqa: PLC0415 - deferred on purpose

        value = getattr(activation, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torchdevice' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext torchdevice`` in IPython or Jupyter: redirect the kernel, and the
    ``%torchdevice`` magic (:mod:`torchdevice.notebook`; docs/notebooks.md)."""
    from torchdevice import notebook  # noqa: PLC0415 - IPython asks for it by this name

    notebook.load_ipython_extension(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext torchdevice``: torch as it was (:func:`disable`)."""
    from torchdevice import notebook  # noqa: PLC0415 - IPython asks for it by this name

    notebook.unload_ipython_extension(ipython)


__all__ = [
    "DeviceRequestError",
    "DeviceRequestTypeError",
    "Host",
    "SettingsError",
    "TorchDeviceError",
    "UnsupportedFeatureError",
    "__version__",
    "disable",
    "enable",
    "is_enabled",
    "redirect",
    "report",
    "reset_report",
    "set_cpu_override",
]

__version__ = "0.1.0"


def _imported_by_a_tool() -> bool:
    """Whether torchdevice is being imported by its own command or pytest plugin.

    ``python -m torchdevice`` imports the package with ``sys.argv[0] == "-m"``; the
    console script is named ``torchdevice``; pytest imports the plugin while loading
    ``pytest11`` entry points. Each reports a bad environment as a usage error itself
    (one line, no traceback), so the package defers the error to them.
    """
    argv0 = _sys.argv[0] if _sys.argv else ""
    if argv0 == "-m" or _os.path.basename(argv0) in ("torchdevice", "torchdevice.exe"):
        return True
    frame: _FrameType | None = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "load_setuptools_entrypoints":  # pluggy, for pytest
            return True
        frame = frame.f_back
    return False


#: A bad activation variable found at import, kept for the tool that imported us to report.
_activation_error: SettingsError | None = None
try:
    _requested = activation_requested()
except SettingsError as _error:
    if not _imported_by_a_tool():
        raise
    _activation_error, _requested = _error, False

if _requested:
    from torchdevice.activation import enable_for as _enable_for
    from torchdevice.announce import from_environment as _from_environment
    from torchdevice.program import of_main as _of_main

    # The program is __main__: the code that imports torch here may be any library's.
    # Enabled with one line on stderr in the run's first process.
    _from_environment(lambda: _enable_for(_of_main, {}))
