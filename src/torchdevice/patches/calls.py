"""Wrappers for the device-taking calls that never reach a function mode.

``torch.load`` does its device work in Python below the function-mode layer (restore
locations), ``torch.Generator`` is a C type whose constructor is not overridable, and
``torch.nested.nested_tensor``/``as_nested_tensor`` (Python functions over non-overridable
C functions) and the deprecated ``torch.range`` never dispatch to a function mode.
``Module.cuda``/``Module.cpu`` do reach it, once per tensor; they are wrapped so the report
names the one line the user wrote. All are replaced on enable and put back exactly on
disable. Code that bound them before enabling
(``from torch import load``) keeps the originals: a documented limit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.serialization

from torchdevice import ledger
from torchdevice.redirecting import runtime as runtime_module
from torchdevice.redirecting.compiling import is_compiling
from torchdevice.redirecting.policy import Standing
from torchdevice.redirecting.runtime import Runtime, active
from torchdevice.redirecting.standing import device_object, host_memory

__all__ = ["GROUP", "REPLACEMENTS", "install", "installed"]

_ORIGINAL_LOAD = torch.load
_ORIGINAL_GENERATOR = torch.Generator


def _restore(rt: Runtime, storage: Any, location: str) -> Any:
    """Restore one storage saved at ``location`` to the device the policy picks for it."""
    _, device, _ = rt.place(location, "torch.load")
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


class _HostStateGenerator(_ORIGINAL_GENERATOR):
    """A generator whose ``set_state`` takes a state the code holds in host memory.

    Generator states are host (CPU) byte tensors on every device. On an accelerator host a
    state the code brought to the host (Accelerate broadcasts it, then ``state.cpu()``)
    lives on the accelerator, which the C++ ``set_state`` refuses: it gets the host copy
    (:func:`~torchdevice.redirecting.standing.host_memory`). Pickles and copies are plain generators
    (torch reduces every generator to ``torch._C.Generator``).
    """

    def set_state(self, new_state: torch.Tensor) -> Any:
        return super().set_state(host_memory(new_state))


class Generator(_ORIGINAL_GENERATOR, metaclass=_GeneratorMeta):
    """``torch.Generator`` whose ``device=`` goes through the policy.

    Returns a genuine ``torch._C.Generator``, of the subclass that reads host states
    where they live (:class:`_HostStateGenerator`) on accelerator hosts; this class only
    exists while enabled. A generator made without a device stays on the CPU, as natively:
    factories follow their generator's device.
    """

    def __new__(cls, device: Any = None) -> Any:
        # The slot itself, not active(): one Python call less on a hot path (a DataLoader
        # dataset that seeds a generator per item), as the entry-points tier reads it.
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return _ORIGINAL_GENERATOR() if device is None else _ORIGINAL_GENERATOR(device)
        made = _ORIGINAL_GENERATOR if rt.default_device is None else _HostStateGenerator
        if device is None:
            return made()
        return made(device=rt.place(device, "torch.Generator")[1])


_ORIGINAL_SET_RNG_STATE = torch.random.set_rng_state


@functools.wraps(_ORIGINAL_SET_RNG_STATE)
def set_rng_state(new_state: torch.Tensor) -> None:
    """``torch.set_rng_state`` of a state the code holds in host memory (see
    :class:`_HostStateGenerator`)."""
    _ORIGINAL_SET_RNG_STATE(host_memory(new_state))


_ORIGINAL_SET_DEFAULT_DEVICE = torch.set_default_device


def set_default_device(device: Any) -> None:
    """``torch.set_default_device`` whose device goes through the policy.

    The ``DeviceContext`` mode it installs can sit below the function mode, where
    factories reach it with no ``device=`` for the mode to rewrite; given the placed
    device, it hands them one that exists (``triu_indices`` has no kernel the net covers).
    """
    rt = active()
    if rt is None or device is None:
        _ORIGINAL_SET_DEFAULT_DEVICE(device)
        return
    _ORIGINAL_SET_DEFAULT_DEVICE(rt.place(device, "torch.set_default_device")[1])


_ORIGINAL_MODULE_CUDA = torch.nn.Module.cuda
_ORIGINAL_MODULE_CPU = torch.nn.Module.cpu


def _module_transfer(module: Any, request: object, api: str, standing: Standing) -> Any:
    """``Module.cuda``/``Module.cpu`` where the policy moves them: one report row.

    Natively each is ``_apply`` of ``Tensor.cuda``/``Tensor.cpu`` on every parameter and
    buffer, which the report would count once per tensor under ``Tensor.cuda``. Here the
    call is placed once, at the user's line, under the module's own name, and the tensors
    then move with ``Module.to`` to a device object standing for the same side (device or
    host), which the policy leaves where it is: same parameters, same copy semantics.
    Returns ``None`` where nothing moves, for the caller to run the original.
    """
    rt = active()
    if rt is None or is_compiling():
        return None
    decision, device, _ = rt.place(request, api, method=api.rsplit(".", 1)[-1])
    if not decision.moved:
        return None
    return module.to(device_object(device, standing, distinct=True))


@functools.wraps(_ORIGINAL_MODULE_CUDA)
def module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    """``Module.cuda`` reported once, as ``Module.cuda``, at the user's line."""
    if (
        device is None
        or isinstance(device, int)
        or (isinstance(device, (str, torch.device)) and str(device).startswith("cuda"))
    ):
        moved = _module_transfer(
            self, "cuda" if device is None else device, "Module.cuda", "device"
        )
        if moved is not None:
            return moved  # type: ignore[no-any-return]
    return _ORIGINAL_MODULE_CUDA(self, device)


@functools.wraps(_ORIGINAL_MODULE_CPU)
def module_cpu(self: torch.nn.Module) -> torch.nn.Module:
    """``Module.cpu`` reported once, as ``Module.cpu``, at the user's line."""
    moved = _module_transfer(self, "cpu", "Module.cpu", "host")
    return _ORIGINAL_MODULE_CPU(self) if moved is None else moved


_ORIGINAL_REBUILD = torch._utils._rebuild_tensor


@functools.wraps(_ORIGINAL_REBUILD)
def rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any) -> torch.Tensor:
    """``torch._utils._rebuild_tensor`` with no function mode: the tensor goes where its
    storage already is.

    Torch rebuilds unpickled tensors (``torch.load``, a ``DataLoader`` worker's batch in
    shared memory) as ``torch.empty(device=<the storage's device>).set_(storage)``. On an
    accelerator host a host storage's ``"cpu"`` would be redirected and ``set_`` would
    refuse the storage ("the devices must match"). ``torch.load``'s own placement happens
    before, through ``map_location`` (:func:`load`).
    """
    with torch._C.DisableTorchFunction():
        return _ORIGINAL_REBUILD(storage, storage_offset, size, stride)  # type: ignore[no-untyped-call,no-any-return]


#: (owner, attribute, replacement): what :func:`install` puts in place.
REPLACEMENTS: tuple[tuple[Any, str, Any], ...] = (
    (torch, "load", load),
    (torch.serialization, "load", load),
    (torch, "Generator", Generator),
    (torch.nested, "nested_tensor", nested_tensor),
    (torch.nested, "as_nested_tensor", as_nested_tensor),
    (torch, "range", range_),
    (torch.nn.Module, "cuda", module_cuda),
    (torch.nn.Module, "cpu", module_cpu),
    (torch._utils, "_rebuild_tensor", rebuild_tensor),
    (torch, "set_default_device", set_default_device),
    (torch, "set_rng_state", set_rng_state),
    (torch.random, "set_rng_state", set_rng_state),
)


#: The ledger group of these wrappers.
GROUP = "torch wrappers"


def install() -> None:
    """Put the wrappers in place (idempotent); they ask
    :func:`~torchdevice.redirecting.runtime.active` for the activation at each call.
    ``disable()`` takes them out through the ledger."""
    if ledger.has(GROUP):
        return
    for owner, name, replacement in REPLACEMENTS:
        ledger.set_attr(GROUP, owner, name, replacement)


def installed() -> bool:
    """Whether the wrappers are in place."""
    return torch.load is load
