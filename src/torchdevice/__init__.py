"""torchdevice: run PyTorch code written for one accelerator on the one the host has.

>>> import torchdevice
>>> torchdevice.enable()          # or: with torchdevice.redirect(): ...
>>> torch.zeros(3, device="cuda").device   # on a Mac: mps:0, on a CPU-only box: cpu

``ACTIVATE_TORCH_DEVICE=1`` or ``TORCH_ALLOW_REDIRECTS=true`` enable it at import.
"""

from __future__ import annotations

from torchdevice.activation import (
    disable,
    enable,
    is_enabled,
    redirect,
    report,
    reset_report,
    set_cpu_override,
)
from torchdevice.errors import (
    DeviceRequestError,
    DeviceRequestTypeError,
    SettingsError,
    TorchDeviceError,
    UnsupportedFeatureError,
)
from torchdevice.host import Host
from torchdevice.settings import activation_requested

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

if activation_requested():
    enable()
