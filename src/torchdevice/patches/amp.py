"""Automatic mixed precision for a foreign accelerator, rewritten to the real device.

``torch.autocast("cuda")`` (and ``torch.amp.autocast``, ``torch.cuda.amp.autocast``) never
reaches a function mode, and an autocast for a device type no tensor lives on is silently a
no-op: the model would run in float32 while the code believes it runs in float16. So while
redirecting, the constructors of autocast and ``GradScaler`` take the device type through
the policy: ``"cuda"`` becomes ``"mps"`` or ``"cpu"``, ``"mps"`` becomes ``"cuda"`` or
``"cpu"``. A ``dtype`` the code did not give is the real device's autocast default
(bfloat16 on the CPU). ``"cpu"`` is never rewritten: torch itself builds CPU autocast
contexts (``torch.utils.checkpoint``) that must keep meaning the CPU.

The patch is on ``__init__`` of the real classes, so ``isinstance`` and torch.compile's
recognition of autocast are untouched; it is removed exactly on disable (by the ledger).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.amp.autocast_mode
import torch.amp.grad_scaler

from torchdevice import ledger
from torchdevice.runtime import active

__all__ = ["GROUP", "install", "installed", "places"]

_AUTOCAST = torch.amp.autocast_mode.autocast
_SCALER = torch.amp.grad_scaler.GradScaler
_ORIGINAL_AUTOCAST_INIT = _AUTOCAST.__dict__["__init__"]
_ORIGINAL_SCALER_INIT = _SCALER.__dict__["__init__"]
_REWRITTEN = ("cuda", "mps")


def real_device_type(device_type: Any, api: str) -> Any:
    """The device type an autocast/GradScaler for ``device_type`` must really use."""
    rt = active()
    if rt is None or not isinstance(device_type, str) or device_type not in _REWRITTEN:
        return device_type
    _, device = rt.place(device_type, api)
    # The device's own type: an extra backend's on a simulated host ("simgpu" standing for
    # "mps", for "mps" requests too, which it leaves in place), whose autocast rules are
    # registered under it.
    return device.type


@functools.wraps(_ORIGINAL_AUTOCAST_INIT)
def _autocast_init(
    self: Any,
    device_type: str,
    dtype: torch.dtype | None = None,
    enabled: bool = True,
    cache_enabled: bool | None = None,
) -> None:
    _ORIGINAL_AUTOCAST_INIT(
        self, real_device_type(device_type, "torch.autocast"), dtype, enabled, cache_enabled
    )


@functools.wraps(_ORIGINAL_SCALER_INIT)
def _scaler_init(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
    _ORIGINAL_SCALER_INIT(self, real_device_type(device, "torch.amp.GradScaler"), *args, **kwargs)


#: The ledger group of the rewrite.
GROUP = "autocast rewrite"


def install() -> None:
    """Rewrite autocast/GradScaler device types for the active runtime (idempotent).

    ``disable()`` puts the very same constructors back through the ledger.
    """
    if ledger.has(GROUP):
        return
    ledger.set_attr(GROUP, _AUTOCAST, "__init__", _autocast_init)
    ledger.set_attr(GROUP, _SCALER, "__init__", _scaler_init)


def installed() -> bool:
    """Whether the rewrite is in place."""
    return _AUTOCAST.__dict__["__init__"] is _autocast_init


def places() -> tuple[ledger.Place, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    return (ledger.attr_place(_AUTOCAST, "__init__"), ledger.attr_place(_SCALER, "__init__"))
