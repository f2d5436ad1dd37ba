"""Automatic mixed precision for a foreign accelerator, rewritten to the real device.

``torch.autocast("cuda")`` (and ``torch.amp.autocast``, ``torch.cuda.amp.autocast``) never
reaches a function mode, and an autocast for a device type no tensor lives on is silently a
no-op: the model would run in float32 while the code believes it runs in float16. So while
redirecting, the constructors of autocast and ``GradScaler`` take the device type through
the policy: ``"cuda"`` becomes ``"mps"`` or ``"cpu"``, ``"mps"`` becomes ``"cuda"`` or
``"cpu"``. A ``dtype`` the code did not give is the real device's autocast default
(bfloat16 on the CPU). ``"cpu"`` is never rewritten: torch itself builds CPU autocast
contexts (``torch.utils.checkpoint``) that must keep meaning the CPU.

A ``dtype`` the code gives is judged as the device it stands for judges it, not as the
real device does (``torch/amp/autocast_mode.py``): a CUDA autocast takes any dtype
silently (``torch.autocast("cuda", dtype=torch.float32)``, llm.c's default, runs its
lower-precision ops in float32), where the CPU's and MPS's warn "Autocast only supports
dtypes of torch.bfloat16, torch.float16" and switch off. So a redirected CUDA autocast runs
on the real device in the dtype given, without a warning, and a redirected MPS autocast
warns (in MPS's words) and switches off where MPS does.

The patch is on ``__init__`` of the real classes, so ``isinstance`` and torch.compile's
recognition of autocast are untouched; it is removed exactly on disable (by the ledger).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
import torch.amp.autocast_mode
import torch.amp.grad_scaler

from torchdevice import ledger
from torchdevice.redirecting.runtime import active

__all__ = ["GROUP", "install", "installed", "spots"]

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
    _, device, _ = rt.place(device_type, api)
    # The device's own type: an extra backend's on a simulated host ("simgpu" standing for
    # "mps", for "mps" requests too, which it leaves in place), whose autocast rules are
    # registered under it.
    return device.type


#: The dtypes MPS's autocast takes (``autocast_mode.py``: every device but CUDA and a
#: registered backend); CUDA's takes any.
_MPS_AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


def _accepted_by(device_type: str, dtype: torch.dtype) -> bool:
    """Whether an autocast for ``device_type`` (``"cuda"`` or ``"mps"``) runs in ``dtype``."""
    return device_type == "cuda" or dtype in _MPS_AUTOCAST_DTYPES


@functools.wraps(_ORIGINAL_AUTOCAST_INIT)
def _autocast_init(
    self: Any,
    device_type: str,
    dtype: torch.dtype | None = None,
    enabled: bool = True,
    cache_enabled: bool | None = None,
) -> None:
    real = real_device_type(device_type, "torch.autocast")
    if dtype is None or real == device_type:
        _ORIGINAL_AUTOCAST_INIT(self, real, dtype, enabled, cache_enabled)
        return
    # The real device's default dtype, which it takes silently; then the dtype given, as
    # the written device takes it (see the module's docstring).
    _ORIGINAL_AUTOCAST_INIT(self, real, None, enabled, cache_enabled)
    self.fast_dtype = dtype
    if enabled and not _accepted_by(device_type, dtype):
        name = device_type.upper()
        warnings.warn(
            f"In {name} autocast, but the target dtype is not supported. Disabling autocast.\n"
            f"{name} Autocast only supports dtypes of "
            + ", ".join(map(str, _MPS_AUTOCAST_DTYPES))
            + " currently.",
            stacklevel=2,  # the caller of autocast(), as torch says it
        )
        self._enabled = False


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


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    return (ledger.attr_spot(_AUTOCAST, "__init__"), ledger.attr_spot(_SCALER, "__init__"))
