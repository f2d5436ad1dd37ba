"""``torch.cuda.FloatTensor`` and the other legacy typed-tensor classes, on the real device.

Old CUDA code builds tensors with ``torch.cuda.FloatTensor(3, 3)`` or
``torch.cuda.LongTensor([1, 2])``, converts with ``t.type(torch.cuda.FloatTensor)`` and
checks ``isinstance(t, torch.cuda.FloatTensor)``. Off CUDA the real classes raise "not
compiled with CUDA". These stand-ins build the tensor with the CPU legacy constructor
(same argument forms) and move it where the policy sends ``"cuda"``; ``isinstance`` is true
for a tensor of the class's dtype on that device. ``t.type(cls)`` is handled by the
``Tensor.type`` intercept, which reads the class's ``torch.cuda`` name.

The legacy default type, ``torch.set_default_tensor_type(torch.cuda.HalfTensor)`` (Meta's
Llama reference) or ``("torch.cuda.FloatTensor")`` (older research code), sets two things on
a GPU: the default dtype, and CUDA as where device-less factories and the legacy constructor
``torch.Tensor(...)`` make their tensors. Torch only takes its own classes there, so
:func:`set_default_tensor_type` sets the dtype with the CPU class of the same name (torch's
checks, its deprecation warning) and the device with ``torch.set_default_device``, placed
where the policy sends ``"cuda"``, and reports the line. ``set_default_device`` does not
reach ``torch.Tensor(...)`` (fairscale's parallel layers make their weights with it), so
while such a default is set ``torch.Tensor.__new__`` builds there too
(:func:`_legacy_new`). A CPU class put back (``torch.set_default_tensor_type(torch.FloatTensor)``)
undoes both, as on a GPU. ``torch.FloatTensor(...)`` and the other CPU classes keep making
CPU tensors, as they do on a GPU.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from torchdevice import ledger
from torchdevice.facade import real_device
from torchdevice.port.table import LEGACY_TYPE_DTYPES
from torchdevice.redirecting.runtime import active
from torchdevice.redirecting.standing import mark_placed

__all__ = [
    "DEFAULT_TYPE_GROUP",
    "LEGACY_DTYPES",
    "LegacyTensorType",
    "legacy_types",
    "set_default_tensor_type",
    "spots",
]

#: The legacy ``torch.cuda.*Tensor`` names and their dtypes (the table of
#: :data:`torchdevice.port.table.LEGACY_TYPE_DTYPES`, which the port reads too).
LEGACY_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, dtype) for name, dtype in LEGACY_TYPE_DTYPES.items()
}


class LegacyTensorType(type):
    """Metaclass of the stand-ins: calling builds a tensor, ``isinstance`` checks one."""

    dtype: torch.dtype

    def _target(cls) -> torch.device:
        rt = real_device.runtime()
        return rt.torch_device(rt.decide("cuda").device)

    def __instancecheck__(cls, instance: object) -> bool:
        if not isinstance(instance, torch.Tensor) or instance.dtype != cls.dtype:
            return False
        return bool(instance.device.type == cls._target().type)

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        rt = real_device.runtime()
        _, device, _ = rt.place("cuda", f"torch.cuda.{cls.__name__}")
        cpu_type = getattr(torch, cls.__name__)  # the CPU legacy class of the same name
        with torch._C.DisableTorchFunction():  # the mode must not re-place our own moves
            tensor = cpu_type(*args, **kwargs)
            moved: torch.Tensor = tensor.to(device)
        return moved


def _make(name: str, dtype: torch.dtype) -> LegacyTensorType:
    cls = LegacyTensorType(
        name,
        (),
        {
            "__module__": "torch.cuda",
            "__doc__": f"``torch.cuda.{name}``: a {dtype} tensor on the device CUDA requests "
            "land on.",
            "dtype": dtype,
            "is_cuda": True,
            "is_sparse": False,
        },
    )
    return cls


def legacy_types() -> dict[str, LegacyTensorType]:
    """One stand-in class per legacy name (built fresh: they hold no state)."""
    return {name: _make(name, dtype) for name, dtype in LEGACY_DTYPES.items()}


#: torch's own, bound at import (the facade's install replaces ``torch.set_default_tensor_type``).
_ORIGINAL_SET_DEFAULT_TENSOR_TYPE = torch.set_default_tensor_type
#: ``torch.set_default_device`` as torch defines it: the device given is placed already.
_ORIGINAL_SET_DEFAULT_DEVICE = torch.set_default_device
#: The C constructor behind ``torch.Tensor(...)`` (``torch.Tensor`` inherits it).
_BASE_NEW = torch._C.TensorBase.__new__

#: The ledger group of ``torch.Tensor.__new__`` while a legacy device type is the default.
DEFAULT_TYPE_GROUP = "legacy default tensor type"


def _resolve(t: Any) -> Any:
    """The class ``torch.set_default_tensor_type`` is given, its dotted name read as torch
    reads it (``"torch.cuda.FloatTensor"`` is the facade's stand-in)."""
    if isinstance(t, str):
        return torch._utils._import_dotted_name(t)  # type: ignore[no-untyped-call]
    return t


def set_default_tensor_type(t: type[torch.Tensor] | str, /) -> None:
    """``torch.set_default_tensor_type``, for the ``torch.cuda`` classes too.

    A stand-in class (by itself or by name) sets the dtype of the CPU class of the same
    name, as torch checks it (only floating types; the deprecation warning is torch's),
    and the device where ``"cuda"`` goes, for factories and for ``torch.Tensor(...)``; the
    call is a line of the report (its port: ``set_default_dtype`` + ``set_default_device``).
    Any other class (a CPU one) is torch's to set, and ends a device default set here.
    """
    rt = active()
    cls = _resolve(t)
    if rt is None or not isinstance(cls, LegacyTensorType):
        _ORIGINAL_SET_DEFAULT_TENSOR_TYPE(t)
        if ledger.has(DEFAULT_TYPE_GROUP):  # back to a CPU type: the CPU, as on a GPU
            ledger.undo(DEFAULT_TYPE_GROUP)
            _ORIGINAL_SET_DEFAULT_DEVICE(None)
        return
    _ORIGINAL_SET_DEFAULT_TENSOR_TYPE(getattr(torch, cls.__name__))
    _, device, _ = rt.place("cuda", "torch.set_default_tensor_type")
    _ORIGINAL_SET_DEFAULT_DEVICE(device)
    if not ledger.has(DEFAULT_TYPE_GROUP):
        # Dynamo substitutes its polyfill for the ``torch.Tensor.__new__`` it finds when it
        # is first imported (torch.optim imports it lazily): let it find torch's own.
        importlib.import_module("torch._dynamo")
        ledger.set_attr(DEFAULT_TYPE_GROUP, torch.Tensor, "__new__", staticmethod(_legacy_new))


def _legacy_new(cls: type[torch.Tensor], *args: Any, **kwargs: Any) -> torch.Tensor:
    """``torch.Tensor(...)`` while a ``torch.cuda`` class is the default type: a tensor of
    the default dtype on the device ``"cuda"`` goes to, as the legacy constructor makes it
    on a GPU (its argument forms are torch's: built by torch on the CPU, then moved)."""
    rt = active()
    if rt is None or "device" in kwargs:  # an explicit device: torch's own rules
        return _BASE_NEW(cls, *args, **kwargs)
    device = rt.torch_device(rt.decide("cuda").device)
    with torch._C.DisableTorchFunction():  # the mode must not re-place our own move
        made = _BASE_NEW(torch.Tensor, *args, **kwargs).to(device)
    made = mark_placed(made, "device")
    return made if cls is torch.Tensor else made.as_subclass(cls)


def spots() -> tuple[ledger.Spot, ...]:
    """What a legacy device default changes, for the pristine check."""
    return (ledger.attr_spot(torch.Tensor, "__new__"),)
