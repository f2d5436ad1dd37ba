"""``nn.DataParallel`` off CUDA hosts: as on a machine with one GPU.

CUDA-first code wraps its model in ``nn.DataParallel(model)``. While redirecting, torch
sees ``torch.cuda.is_available()`` and one device, so DataParallel takes its CUDA path:
``device_ids=[0]``, the module moved to ``cuda:0`` (the real device), and in ``forward``
the inputs scattered to that device by ``torch._C._scatter``, which exists in CUDA
builds only (``AttributeError: module 'torch._C' has no attribute '_scatter'``). On a
one-GPU machine that scatter only moves the inputs to the device, and the module runs
once on the whole batch. Here ``torch.nn.parallel.scatter_gather.scatter`` does exactly
that with ``.to`` for one device (for ``DataParallel`` and the functional
``data_parallel`` alike); several ``device_ids`` (``[0, 1]``) given to ``DataParallel``
name the one real device, so the module runs once on it too, logged and reported. On
CUDA hosts, and while not redirecting, torch's own code runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch.nn.parallel import DataParallel, scatter_gather

from torchdevice import ledger
from torchdevice.redirecting.runtime import active

__all__ = ["GROUP", "install", "spots"]

#: The ledger group of these wrappers.
GROUP = "data_parallel"

_ORIGINAL_INIT = DataParallel.__dict__["__init__"]
_ORIGINAL_SCATTER = scatter_gather.scatter
_INIT_SIGNATURE = inspect.signature(_ORIGINAL_INIT)


def _redirected() -> bool:
    rt = active()
    return rt is not None and rt.host.kind != "cuda"


@functools.wraps(_ORIGINAL_INIT)
def _init(self: DataParallel[Any], *args: Any, **kwargs: Any) -> None:
    """torch's constructor; off CUDA hosts, several ``device_ids`` become the first one."""
    rt = active()
    if rt is None or rt.host.kind == "cuda":
        _ORIGINAL_INIT(self, *args, **kwargs)
        return
    bound = _INIT_SIGNATURE.bind(self, *args, **kwargs)
    device_ids = bound.arguments.get("device_ids")
    if device_ids is not None and len(device_ids) > 1:
        bound.arguments["device_ids"] = [device_ids[0]]
        bound.arguments["output_device"] = None  # torch's default: device_ids[0]
        rt.note_event(
            "redirect",
            "torch.nn.DataParallel",
            f"device_ids={list(device_ids)!r}",
            f"device_ids={[device_ids[0]]!r}",
            f"{rt.host.kind} host: one device, the module runs once on the whole batch",
        )
    _ORIGINAL_INIT(*bound.args, **bound.kwargs)
    # torch builds ``torch.device("cuda", device_ids[0])``, which reads as written
    # (docs/policy.md); forward compares the parameters' real device with it.
    self.src_device_obj = rt.place(self.src_device_obj, "torch.nn.DataParallel", report=False)[1]


def _to(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it (tuples, lists, dicts, namedtuples) on ``device``,
    as torch's scatter walks it; other objects as they are."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_to(item, device) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_to(item, device) for item in value)
    if isinstance(value, dict):
        return type(value)((key, _to(item, device)) for key, item in value.items())
    return value


@functools.wraps(_ORIGINAL_SCATTER)
def _scatter(inputs: Any, target_gpus: Sequence[int | torch.device], dim: int = 0) -> Any:
    """torch's scatter for one device, without ``torch._C._scatter``: the one chunk is
    the whole of ``inputs``, moved to the device, in the structure torch returns."""
    if not _redirected() or len(target_gpus) != 1:
        return _ORIGINAL_SCATTER(inputs, target_gpus, dim)
    target = target_gpus[0]
    device = target if isinstance(target, torch.device) else torch.device("cuda", target)
    if isinstance(inputs, torch.Tensor):
        return (inputs.to(device),)
    return [_to(inputs, device)]


_ORIGINAL_FUNCTIONAL = torch.nn.parallel.data_parallel


@functools.wraps(_ORIGINAL_FUNCTIONAL)
def _data_parallel(
    module: torch.nn.Module,
    inputs: Any,
    device_ids: Sequence[int | torch.device] | None = None,
    output_device: int | torch.device | None = None,
    dim: int = 0,
    module_kwargs: Any = None,
) -> Any:
    """torch's functional ``data_parallel``; off CUDA hosts it runs as on a one-GPU
    machine: the module once, on the whole batch, on the device its parameters are on
    (torch's own check compares them with ``torch.device("cuda", 0)`` as written)."""
    rt = active()
    if rt is None or rt.host.kind == "cuda":
        return _ORIGINAL_FUNCTIONAL(module, inputs, device_ids, output_device, dim, module_kwargs)
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    first = next(iter([*module.parameters(), *module.buffers()]), None)
    _, placed, _ = rt.place(
        torch.device("cuda", 0), "torch.nn.parallel.data_parallel", report=False
    )
    device = first.device if first is not None else placed
    return module(*_to(inputs, device), **_to(dict(module_kwargs or {}), device))


def install() -> None:
    """Put the wrappers in place (idempotent); they ask
    :func:`~torchdevice.redirecting.runtime.active` at each call. ``disable()`` takes
    them out (the ledger)."""
    if ledger.has(GROUP):
        return
    ledger.set_attr(GROUP, DataParallel, "__init__", _init)
    # The module global that scatter_kwargs (DataParallel.scatter, data_parallel) calls.
    ledger.set_attr(GROUP, scatter_gather, "scatter", _scatter)
    ledger.set_attr(GROUP, torch.nn.parallel, "data_parallel", _data_parallel)


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    return (
        ledger.attr_spot(DataParallel, "__init__"),
        ledger.attr_spot(scatter_gather, "scatter"),
        ledger.attr_spot(torch.nn.parallel, "data_parallel"),
    )
