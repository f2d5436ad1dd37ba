"""Wrappers for the device-taking calls that never reach a function mode.

``torch.load`` does its device work in Python below the function-mode layer (restore
locations), ``torch.Generator`` is a C type whose constructor is not overridable, and
``torch.nested.nested_tensor``/``as_nested_tensor`` (Python functions over non-overridable
C functions) and the deprecated ``torch.range`` never dispatch to a function mode. All are
replaced on enable and put back exactly on disable. Code that bound them before enabling
(``from torch import load``) keeps the originals: a documented limit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.serialization

from torchdevice import ledger
from torchdevice.runtime import Runtime, active

__all__ = ["GROUP", "install", "installed"]

_ORIGINAL_LOAD = torch.load
_ORIGINAL_GENERATOR = torch.Generator


def _restore(rt: Runtime, storage: Any, location: str) -> Any:
    """Restore one storage saved at ``location`` to the device the policy picks for it."""
    _, device = rt.place(location, "torch.load")
    if device.type == "cpu":
        return storage
    return torch.serialization.default_restore_location(storage, str(device))  # type: ignore[no-untyped-call]


def _map_location(rt: Runtime, map_location: Any) -> Any:
    """Translate any form of ``map_location`` into one that only names real devices."""
    if map_location is None:
        return lambda storage, location: _restore(rt, storage, location)
    if isinstance(map_location, (str, torch.device, int)) and not isinstance(map_location, bool):
        return rt.place(map_location, "torch.load")[1]
    if isinstance(map_location, dict):
        table = {str(k): v for k, v in map_location.items()}

        def mapped(storage: Any, location: str) -> Any:
            target = table.get(location, location)
            return _restore(rt, storage, str(target))

        return mapped
    if callable(map_location):
        user = map_location

        def wrapped(storage: Any, location: str) -> Any:
            result = user(storage, location)
            return _restore(rt, storage, location) if result is None else result

        return wrapped
    return map_location  # let torch.load reject it


@functools.wraps(_ORIGINAL_LOAD)
def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``torch.load`` with ``map_location`` sent through the policy."""
    rt = active()
    if rt is not None:
        map_location = _map_location(rt, map_location)
    return _ORIGINAL_LOAD(f, map_location, *args, **kwargs)


def _with_device_kwarg(original: Callable[..., Any], api: str) -> Callable[..., Any]:
    """Wrap a function whose ``device=`` never reaches the function mode."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt = active()
        request = kwargs.get("device")
        if rt is not None and request is not None:
            kwargs["device"] = rt.place(request, api)[1]
        return original(*args, **kwargs)

    return wrapper


_ORIGINAL_NESTED = torch.nested.nested_tensor
_ORIGINAL_AS_NESTED = torch.nested.as_nested_tensor
nested_tensor = _with_device_kwarg(_ORIGINAL_NESTED, "torch.nested.nested_tensor")
as_nested_tensor = _with_device_kwarg(_ORIGINAL_AS_NESTED, "torch.nested.as_nested_tensor")
_ORIGINAL_RANGE = torch.range
range_ = _with_device_kwarg(_ORIGINAL_RANGE, "torch.range")


class _GeneratorMeta(type(_ORIGINAL_GENERATOR)):  # type: ignore[misc]
    """Keeps ``isinstance(g, torch.Generator)`` true for every real generator."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _ORIGINAL_GENERATOR)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _ORIGINAL_GENERATOR)


class Generator(_ORIGINAL_GENERATOR, metaclass=_GeneratorMeta):
    """``torch.Generator`` whose ``device=`` goes through the policy.

    Returns a genuine ``torch._C.Generator``; this class only exists while enabled. A
    generator made without a device stays on the CPU, as natively: factories follow
    their generator's device.
    """

    def __new__(cls, device: Any = None) -> Any:
        rt = active()
        if device is None:
            return _ORIGINAL_GENERATOR()
        if rt is None:
            return _ORIGINAL_GENERATOR(device)
        return _ORIGINAL_GENERATOR(device=rt.place(device, "torch.Generator")[1])


_REPLACEMENTS: tuple[tuple[Any, str, Any, Any], ...] = (
    (torch, "load", _ORIGINAL_LOAD, load),
    (torch.serialization, "load", _ORIGINAL_LOAD, load),
    (torch, "Generator", _ORIGINAL_GENERATOR, Generator),
    (torch.nested, "nested_tensor", _ORIGINAL_NESTED, nested_tensor),
    (torch.nested, "as_nested_tensor", _ORIGINAL_AS_NESTED, as_nested_tensor),
    (torch, "range", _ORIGINAL_RANGE, range_),
)


#: The ledger group of these wrappers.
GROUP = "torch wrappers"


def install() -> None:
    """Put the wrappers in place (idempotent); they ask :func:`~torchdevice.runtime.active`
    for the activation at each call. ``disable()`` takes them out through the ledger."""
    if ledger.has(GROUP):
        return
    for owner, name, _original, replacement in _REPLACEMENTS:
        ledger.set_attr(GROUP, owner, name, replacement)


def installed() -> bool:
    """Whether the wrappers are in place."""
    return torch.load is load
