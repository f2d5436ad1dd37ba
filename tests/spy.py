"""A function mode that stands in for hardware this machine lacks.

Entered *before* torchdevice (so it sits under torchdevice's mode), it sees every call
exactly as torchdevice passes it on to torch, records the devices, and runs calls aimed at
an MPS or CUDA device on the ``meta`` device instead, so redirects to an accelerator can be
checked on a CPU-only machine without faking the policy.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

ABSENT = ("mps", "cuda")


def _swap(value: Any, seen: list[torch.device]) -> Any:
    if isinstance(value, torch.device) and value.type in ABSENT:
        seen.append(value)
        return torch.device("meta")
    if isinstance(value, str) and value.split(":")[0] in ABSENT:
        seen.append(torch.device(value))
        return torch.device("meta")
    return value


class DeviceSpy(TorchFunctionMode):
    """Records accelerator devices passed to torch and runs those calls on ``meta``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, torch.device]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        seen: list[torch.device] = []
        if func is torch.device or func is torch._C._nn._parse_to:
            return func(*args, **kwargs)  # parsing a device allocates nothing: let it be
        args = tuple(_swap(a, seen) for a in args)
        kwargs = {k: _swap(v, seen) for k, v in kwargs.items()}
        name = getattr(func, "__name__", repr(func))
        self.calls.extend((name, device) for device in seen)
        return func(*args, **kwargs)

    def devices(self, name: str) -> list[str]:
        """Devices recorded for calls to ``name``, as strings."""
        return [str(device) for fname, device in self.calls if fname == name]
