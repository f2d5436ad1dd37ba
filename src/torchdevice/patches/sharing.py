"""Tensors of an accelerator without IPC cross process boundaries as CPU shared memory.

Why: PyTorch sends a tensor to another process (a DataLoader worker's batch, a dataset handed
to spawn workers, a ``multiprocessing`` queue) by sharing its memory: CPU tensors through
shared memory, CUDA tensors through CUDA IPC. An MPS tensor has neither, and
``torch.multiprocessing`` raises ``_share_fd_: only available on CPU`` for it, in the
queue's feeder thread, where the error is printed and the receiver waits for ever: the
DataLoader hangs. CUDA-first code sends CUDA tensors between processes freely, and
redirected to MPS (or the simulated MPS device) those are accelerator tensors.

So on hosts whose accelerator is not CUDA, a tensor on the accelerator travels by value (its
bytes, in the pickle) and is rebuilt on the same device in the receiving process (which
torchdevice redirects too: the environment carries the host). By value, not as a CPU copy in
shared memory: such a copy is a temporary, and the file descriptor a spawn child inherits
would be closed before the child starts. Unlike CUDA IPC, the two processes then hold
separate copies: writes in the receiver are not seen by the sender. DataLoader batches,
datasets handed to workers and results of pool tasks do not rely on that.

Code that does rely on it says so: it puts the tensor in shared memory first
(``share_memory_()``, ``Module.share_memory()``: a no-op on CUDA, whose memory IPC shares
anyway) and then hands it to other processes that write into it, as Hogwild training does
(pytorch/examples' ``mnist_hogwild --cuda``). A copy there would train in the children and
leave the parent's model untouched, silently; so a tensor put in shared memory on such a device
is marked, and sending it raises :class:`~torchdevice.errors.UnsupportedFeatureError` (a Mac's
own torch refuses every MPS tensor there, with ``_share_fd_: only available on CPU``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

from torchdevice import ledger
from torchdevice.errors import UnsupportedFeatureError

__all__ = ["GROUP", "install", "spots"]

#: Ledger group of the reductions installed here.
GROUP = "accelerator tensor sharing"

_Reducer = Callable[[torch.Tensor], Any]

#: The attribute that marks a device tensor its program put in shared memory.
_SHARED = "_torchdevice_share_memory"


def install(device_type: str | None) -> None:
    """Send tensors on ``device_type`` through CPU shared memory (nothing for CUDA, the CPU
    or ``None``: they share natively). Replaces what an earlier call installed."""
    ledger.undo(GROUP)
    if device_type in (None, "cpu", "cuda"):
        return
    reducers: dict[type, _Reducer] = ForkingPickler._extra_reducers  # type: ignore[attr-defined]  # multiprocessing's own registry
    for cls in (torch.Tensor, torch.nn.Parameter):
        original = reducers.get(cls)
        if original is None:  # pragma: no cover - torch.multiprocessing registers both
            continue
        reducers[cls] = _through_the_host(original, device_type)
        ledger.hook(GROUP, f"ForkingPickler reducer of {cls.__name__}", _restore(cls, original))
    share = _marking(torch.Tensor.share_memory_, device_type)
    ledger.set_attr(GROUP, torch.Tensor, "share_memory_", share)


def _marking(original: Callable[[torch.Tensor], torch.Tensor], device_type: str) -> Any:
    """``Tensor.share_memory_`` that marks tensors on ``device_type``: their program expects
    other processes' writes to come back, which a copy cannot do."""

    @functools.wraps(original)
    def share_memory_(self: torch.Tensor) -> torch.Tensor:
        result = original(self)
        if self.device.type == device_type:
            setattr(self, _SHARED, True)
        return result

    return share_memory_


def _restore(cls: type, original: _Reducer) -> Callable[[], None]:
    def restore() -> None:
        ForkingPickler._extra_reducers[cls] = original  # type: ignore[attr-defined]  # see install

    return restore


def _through_the_host(original: _Reducer, device_type: str) -> _Reducer:
    """``original`` for every tensor but those on ``device_type``, which go as CPU copies."""

    def reduce(tensor: torch.Tensor) -> Any:
        if tensor.device.type != device_type:
            return original(tensor)
        if getattr(tensor, _SHARED, False):
            raise UnsupportedFeatureError(
                "Sharing device memory between processes (CUDA IPC: a tensor put in shared "
                "memory with share_memory_() or Module.share_memory(), then sent to another "
                "process)",
                f"The {device_type} device has no IPC: the other process would get a copy, and "
                "what it writes there (Hogwild training) would never reach this one. Keep the "
                "shared model and its inputs on the CPU (device 'cpu:-1' under torchdevice), "
                "or train with DistributedDataParallel.",
            )
        if tensor.requires_grad and not tensor.is_leaf:  # as torch's own reduce_tensor
            raise RuntimeError(
                "Cowardly refusing to serialize non-leaf tensor which requires_grad, since "
                "autograd does not support crossing process boundaries.  If you just want to "
                "transfer the data, call detach() on the tensor before serializing (e.g., "
                "putting it on the queue)."
            )
        with torch._C.DisableTorchFunction():  # a genuine CPU copy, not a redirected one
            host = tensor.detach().to("cpu").contiguous()
            data = host.reshape(-1).view(torch.uint8).numpy().tobytes()
        return _rebuild, (
            type(tensor),
            data,
            host.dtype,
            tuple(host.shape),
            str(tensor.device),
            tensor.requires_grad,
        )

    return reduce


def _rebuild(
    cls: type,
    data: bytes,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    device: str,
    requires_grad: bool,
) -> torch.Tensor:
    """The tensor on ``device`` again, in the receiving process."""
    with torch._C.DisableTorchFunction():
        if data:
            host = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
        else:
            host = torch.empty(shape, dtype=dtype)
        tensor = host.to(device)
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    reducers = tuple(_reducer_spot(cls) for cls in (torch.Tensor, torch.nn.Parameter))
    return (*reducers, ledger.attr_spot(torch.Tensor, "share_memory_"))


def _reducer_spot(cls: type) -> ledger.Spot:
    def read() -> object:
        return ForkingPickler._extra_reducers.get(cls)  # type: ignore[attr-defined]  # see install

    return ledger.Spot(f"ForkingPickler reducer of {cls.__name__}", read)
