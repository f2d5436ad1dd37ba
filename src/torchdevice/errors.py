"""Errors torchdevice raises.

Each error is also the builtin PyTorch itself would raise for the same mistake, so code
that already catches ``RuntimeError``/``TypeError``/``ValueError`` around device handling
keeps working, and code that wants to tell torchdevice's errors apart can catch
:class:`TorchDeviceError`.
"""

from __future__ import annotations

__all__ = [
    "DeviceRequestError",
    "DeviceRequestTypeError",
    "SettingsError",
    "TorchDeviceError",
    "UnsupportedFeatureError",
]


class TorchDeviceError(Exception):
    """Base class of every error torchdevice raises on purpose.

    Each concrete error also derives from the builtin PyTorch raises for the same mistake
    (``RuntimeError``, ``TypeError``, ``ValueError``), so ``except TorchDeviceError`` finds
    torchdevice's errors and code written for torch's builtins keeps catching them.
    """


class DeviceRequestError(TorchDeviceError, RuntimeError):
    """A device request torch would reject too (a malformed string, ``mps:1``, on a CUDA
    host a CUDA index past its device count).

    ``request`` holds the request exactly as the caller passed it.
    """

    def __init__(self, message: str, request: object) -> None:
        super().__init__(message)
        self.request = request


class DeviceRequestTypeError(TorchDeviceError, TypeError):
    """A device request of a type torch does not accept as a device (a float, a list...)."""

    def __init__(self, message: str, request: object) -> None:
        super().__init__(message)
        self.request = request


class UnsupportedFeatureError(TorchDeviceError, RuntimeError):
    """A CUDA-only feature that cannot run on the device the host really has.

    Raised instead of a stub returning made-up values: ``feature`` names it, and the
    message says what to do instead.
    """

    def __init__(self, feature: str, alternative: str) -> None:
        super().__init__(
            f"{feature} is a CUDA-only feature and cannot run on this host under torchdevice. "
            f"{alternative}"
        )
        self.feature = feature


class SettingsError(TorchDeviceError, ValueError):
    """An option or environment variable has a value torchdevice cannot use.

    The message names where the value came from (an argument or an environment variable).
    """
