"""Test helpers for code that runs on accelerators, usable on machines that have none.

:func:`register` adds a *simulated accelerator* to PyTorch: a real device type (``simgpu`` by
default) whose tensors hold real data in CPU memory and whose op set is MPS's in the installed
torch (read from the wheel's ``native_functions.yaml`` by :mod:`torchdevice.testing.mps_ops`),
so that redirect-to-accelerator and CPU-fallback paths run honestly in CPU-only CI. Its C++
half (allocator, device guard, generator, pinned memory, hooks) is compiled on first use and
cached (:mod:`torchdevice.testing.native`). Users choose it as ``host="simulated-mps"``. See
:mod:`torchdevice.testing.simulated` for what it implements and how.

This package is not imported by ``import torchdevice``: registering a backend is
process-global and permanent, so only code that asks for it gets it. Importing it announces
the simulated device to the host probe (:mod:`torchdevice.extra_backends`), the one seam
between the core and this package: the core never calls into it by name.
"""

from __future__ import annotations

from torchdevice import extra_backends
from torchdevice.host import SIMULATED_MPS
from torchdevice.testing.simulated import (
    DEFAULT_NAME,
    is_registered,
    missing_ops,
    register,
    registered_name,
    registered_overloads,
    registered_sparse_overloads,
    supported_ops,
    supported_sparse_ops,
)

__all__ = [
    "DEFAULT_NAME",
    "is_registered",
    "missing_ops",
    "register",
    "registered_name",
    "registered_overloads",
    "registered_sparse_overloads",
    "supported_ops",
    "supported_sparse_ops",
]


def _start() -> str:
    """The simulated device's type, registering it in this process if need be (a device
    already registered under another name is reused)."""
    return registered_name() or register()


extra_backends.announce(
    extra_backends.ExtraBackend(
        choice=SIMULATED_MPS, stands_for="mps", start=_start, device_type=registered_name
    )
)
