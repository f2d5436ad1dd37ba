"""``torch.cuda.FloatTensor`` and the other legacy typed-tensor classes, on the real device.

Old CUDA code builds tensors with ``torch.cuda.FloatTensor(3, 3)`` or
``torch.cuda.LongTensor([1, 2])``, converts with ``t.type(torch.cuda.FloatTensor)`` and
checks ``isinstance(t, torch.cuda.FloatTensor)``. Off CUDA the real classes raise "not
compiled with CUDA". These stand-ins build the tensor with the CPU legacy constructor
(same argument forms) and move it where the policy sends ``"cuda"``; ``isinstance`` is true
for a tensor of the class's dtype on that device. ``t.type(cls)`` is handled by the
``Tensor.type`` intercept, which reads the class's ``torch.cuda`` name.
"""

from __future__ import annotations

from typing import Any

import torch

from torchdevice.facade import real_device

__all__ = ["LEGACY_DTYPES", "LegacyTensorType", "legacy_types"]

#: The legacy ``torch.cuda.*Tensor`` names and their dtypes (torch 2.13's list).
LEGACY_DTYPES: dict[str, torch.dtype] = {
    "DoubleTensor": torch.float64,
    "FloatTensor": torch.float32,
    "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16,
    "ByteTensor": torch.uint8,
    "CharTensor": torch.int8,
    "ShortTensor": torch.int16,
    "IntTensor": torch.int32,
    "LongTensor": torch.int64,
    "BoolTensor": torch.bool,
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
