"""The dispatcher-level net: allocations on a device this build of torch lacks land where
the policy says, whoever asked for them.

The function mode sees calls made from Python while it is on the thread's stack. Some
device requests never pass there: TorchScript runs ops through the dispatcher directly
(``torch.zeros(3, device="cuda")`` in a ``@torch.jit.script`` function), code may switch
function modes off (``torch._C.DisableTorchFunction``), and ``torch.ops.aten`` overloads
and C++ extensions allocate below it. Natively those fail on a build without the device
(``NotImplementedError: Could not run 'aten::empty.memory_format' with arguments from the
'CUDA' backend``).

Every factory ends in an allocation: ``zeros/ones/full/arange/eye/linspace/rand*/
scalar_tensor`` and ``Tensor.new_*`` reach ``aten::empty.memory_format``; ``*_like``
reaches ``aten::empty_strided``. This module registers a Python kernel for both on the
dispatch key of each device type the build has no kernel for (CUDA on CPU and macOS
builds; MPS on CUDA and CPU builds), which places the allocation on the runtime's one path
(:meth:`~torchdevice.redirecting.runtime.Runtime.place`, with its float64 rule), marks what it
stands for (:mod:`torchdevice.redirecting.standing`) and reports it at the user's line. The
fill, arange or random draw that follows runs on the real device the tensor is on.

It costs nothing elsewhere: a kernel on the CUDA key runs only for a dispatch that was
going to the CUDA key, which on such a build only fails. Registered on ``enable()``,
destroyed (``Library._destroy``) through the ledger on ``disable()``.

What it does not cover (docs/limitations.md): requests that need the device's C++
``DeviceGuard`` before any kernel runs, which no Python kernel can provide: ``Tensor.to``,
``.cuda()``, ``torch.tensor/as_tensor(..., device=)``, ``Tensor.new_tensor``,
``torch.range``, ``torch.sparse_coo_tensor``; ops without a composite path through
``empty`` (``tril_indices``, ``triu_indices``, quantized allocation); and ``device=0``,
which torch's argument parser resolves against the (absent) current accelerator. Under
the function mode all of these are rewritten before they get there; the net is for what
the mode cannot see.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any, Final

import torch

from torchdevice import ledger
from torchdevice.redirecting import callsite
from torchdevice.redirecting.runtime import active
from torchdevice.redirecting.standing import mark_placed

__all__ = ["GROUP", "OPS", "dispatch_keys", "install", "installed", "spots"]

#: Ledger group of the net's registrations.
GROUP: Final = "dispatcher net"
#: The allocation overloads every factory reaches.
OPS: Final = ("empty.memory_format", "empty_strided")
#: Device types the net may stand in for: those the policy redirects.
_DEVICE_TYPES: Final = ("CUDA", "MPS")


def dispatch_keys() -> tuple[str, ...]:
    """The dispatch keys this build has no allocation kernel for (the net's keys)."""
    return tuple(
        key
        for key in _DEVICE_TYPES
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", key) for op in OPS)
    )


def installed() -> bool:
    """Whether the net's kernels are registered now."""
    return ledger.has(GROUP)


def install() -> None:
    """Register the net's kernels on every key of :func:`dispatch_keys` (idempotent).

    The registrations live as long as the ``Library`` object: the ledger keeps it and
    destroys it on undo, after which the dispatcher answers as it did before.
    """
    if installed():
        return
    missing = dispatch_keys()
    if not missing:
        return
    library = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    try:
        for key in missing:
            library.impl("empty.memory_format", _empty, key)  # type: ignore[no-untyped-call]
            library.impl("empty_strided", _empty_strided, key)  # type: ignore[no-untyped-call]
    except BaseException:
        library._destroy()  # type: ignore[no-untyped-call]
        raise
    ledger.hook(GROUP, f"aten allocation kernels for {', '.join(missing)}", library._destroy)


def _allocation(
    op: str, device: torch.device | None, pin_memory: bool | None, dtype: torch.dtype | None
) -> tuple[torch.device, bool | None, torch.dtype | None, bool]:
    """The real device for ``device``, the pin flag and dtype that can hold there, and
    whether to mark the result (``False`` while torch compiles), from
    :meth:`Runtime.place <torchdevice.redirecting.runtime.Runtime.place>`.

    Counted in the report at the first user frame above the kernel: the dispatcher calls
    the kernel from C++, so the Python frame above it made the torch call (or called
    the TorchScript function that did).
    """
    rt = active()
    if rt is None or device is None:  # a call in flight as disable() ran: torch's error
        raise NotImplementedError(_refusal(op, device))
    kernel = sys._getframe(1)  # the allocation kernel; its caller is above the dispatcher
    api = f"aten::{op}"
    # A device the policy keeps (the refusal below) is an unchanged decision: no row.
    _, target, standing = rt.place(device, api, True, None, lambda: _user_frame(kernel.f_back))
    if target.type == device.type:  # the policy keeps it here: this build cannot
        raise NotImplementedError(_refusal(op, device))
    if pin_memory and not rt.pins(target.type):
        pin_memory = False
    if rt.float64_device is not None:
        dtype = rt.narrow_float64(api, target, dtype)
    return target, pin_memory, dtype, standing is not None


def _user_frame(frame: FrameType | None) -> FrameType | None:
    """The user's frame at or above ``frame``, past the code FX generates for a graph
    (``<eval_with_key>``: a graph compiled by ``torch.compile`` runs there), whose caller
    is the line that called the compiled function."""
    found = callsite.first_user(frame)
    while found is not None and found.f_code.co_filename.startswith(_GENERATED):
        found = callsite.first_user(found.f_back)
    return found


_GENERATED: Final = "<eval_with_key>"


def _refusal(op: str, device: torch.device | None) -> str:
    backend = "CUDA" if device is None else device.type.upper()
    return (
        f"Could not run 'aten::{op}' with arguments from the '{backend}' backend: this "
        f"build of PyTorch has no {backend} kernels and torchdevice is not redirecting"
    )


def _empty(
    size: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> Any:
    """``aten::empty.memory_format`` on a device the build lacks: allocate on the target."""
    target, pin_memory, dtype, eager = _allocation("empty.memory_format", device, pin_memory, dtype)
    with torch._C.DisableTorchFunction():  # placed already: no mode may place it again
        result = torch.empty(
            size,
            dtype=dtype,
            layout=layout,
            device=target,
            pin_memory=pin_memory,
            memory_format=memory_format,
        )
    return mark_placed(result, "device") if eager else result


def _empty_strided(
    size: Sequence[int],
    stride: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> Any:
    """``aten::empty_strided`` on a device the build lacks: allocate on the target."""
    target, pin_memory, dtype, eager = _allocation("empty_strided", device, pin_memory, dtype)
    with torch._C.DisableTorchFunction():
        result = torch.empty_strided(
            size, stride, dtype=dtype, layout=layout, device=target, pin_memory=pin_memory
        )
    return mark_placed(result, "device") if eager else result


def spots() -> tuple[ledger.Spot, ...]:
    """What :func:`install` changes, for the pristine check: the kernels on the keys this
    build lacks (described as the ledger does, so asked before the net is installed)."""
    missing = dispatch_keys()

    def read() -> object:
        return tuple(
            torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", key)
            for key in _DEVICE_TYPES
            for op in OPS
        )

    return (ledger.Spot(f"aten allocation kernels for {', '.join(missing)}", read),)
