"""The ``torch.accelerator`` facade on a CPU-only host: the accelerator the code is written for.

On a CPU-only host torch's own ``torch.accelerator`` says there is none, while the
``torch.cuda`` facade says CUDA is there: two stories. Torch itself reads the first one:
``DataLoader(pin_memory=True)`` warns "no accelerator is found" and drops pinning, which
on the machine the code is written for it keeps. This facade tells the same story as the
other facades: the accelerator is CUDA (MPS for a program written for MPS, see
:func:`torchdevice.facade.mps.written_for`), one device, index 0, answered by the CPU.
``current_accelerator()`` returns ``torch.device("cuda")``, which torchdevice places like
any device object (docs/policy.md); with the facades hidden (``cuda_available=False``)
there is no accelerator, as natively.

``torch.Event`` follows the same story: natively it is made for the current accelerator,
and a CPU-only build answers "cpu backend doesn't support events", so code ported to
``torch.Event`` behind ``torch.accelerator.is_available()`` (what ``torchdevice port``
writes) would fail under the redirect that says an accelerator is there. While the facade
is in, ``torch.Event()`` for the accelerator is the facade's event on the real device
(:class:`AcceleratorEvent`); an explicit ``device="cpu"`` is torch's own, as natively.

Only CPU-only hosts get it: on MPS and CUDA hosts (and the simulated accelerator) torch's
answer is already the device requests land on.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from torchdevice import ledger
from torchdevice.facade import devices, memory, modules, mps, streams
from torchdevice.facade.modules import FacadeModule
from torchdevice.redirecting.compiling import is_compiling

__all__ = ["GROUP", "AcceleratorEvent", "current_accelerator", "install", "is_available", "spots"]

REAL_ACCELERATOR = torch.accelerator
#: Torch's own ``torch.Event`` (a C type), put back on disable.
REAL_EVENT = torch.Event

#: The ledger group of the ``torch.accelerator`` facade.
GROUP = "accelerator facade"


#: The answers, made at import: outside any function mode (no report row), and nothing
#: for dynamo to trace when compiled code asks.
with torch._C.DisableTorchFunction():
    _DEVICES = {"cuda": torch.device("cuda"), "mps": torch.device("mps")}


def current_accelerator(check_available: bool = False) -> torch.device | None:
    """``torch.device("cuda")`` (``"mps"`` for MPS code) while the facades advertise it."""
    if not devices.advertised():
        return None
    return _DEVICES[mps.written_for()]


def is_available() -> bool:
    """Whether the facades advertise an accelerator (``cuda_available``)."""
    return devices.advertised()


def device_count() -> int:
    """One device (0 when the facades hide it)."""
    return devices.device_count()


def current_device_index() -> int:
    """Always 0: every accelerator index lands on the one CPU."""
    return 0


def set_device_index(device: Any) -> None:
    """Accept any index the policy accepts (``DataLoader``'s pin thread sets it)."""
    devices.set_device(device)


@contextmanager
def device_index(device: Any) -> Iterator[None]:
    """``with torch.accelerator.device_index(i):``: checked, nothing to switch."""
    if device is not None:
        devices.set_device(device)
    yield


def synchronize(device: Any = None) -> None:
    """Wait for the real device: nothing is queued on a CPU."""
    streams.synchronize(device)


class AcceleratorEvent(streams.Event):
    """``torch.Event(device=None, *, enable_timing, blocking, interprocess)`` for the
    accelerator the facade tells of: the facade's event on the real device, counted as
    nothing to port (``torch.Event`` is the device-agnostic API)."""

    counted_as = None

    def __new__(cls, device: Any = None, **kwargs: Any) -> Any:
        """Torch's own event for an explicit CPU device, as natively."""
        if device is not None and torch.device(device).type == "cpu":
            return REAL_EVENT(device, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        device: Any = None,
        *,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
    ) -> None:
        super().__init__(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _real_while_compiling(name: str, answer: Callable[..., Any]) -> Callable[..., Any]:
    """``answer``, but torch's own while dynamo traces: compiled code keeps the graph it
    has natively on this host (dynamo asks ``torch.accelerator`` to track streams)."""

    @functools.wraps(answer)
    def call(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():
            return getattr(REAL_ACCELERATOR, name)(*args, **kwargs)
        return answer(*args, **kwargs)

    return call


def _build() -> FacadeModule:
    namespace: dict[str, Any] = {
        "current_accelerator": current_accelerator,
        "is_available": is_available,
        "device_count": device_count,
        "current_device_index": current_device_index,
        "current_device_idx": current_device_index,
        "set_device_index": set_device_index,
        "set_device_idx": set_device_index,
        "device_index": device_index,
        "synchronize": synchronize,
        "current_stream": streams.current_stream,
        "set_stream": streams.set_stream,
        "empty_cache": memory.empty_cache,
        "memory_allocated": memory.memory_allocated,
        "max_memory_allocated": memory.max_memory_allocated,
        "memory_reserved": memory.memory_reserved,
        "max_memory_reserved": memory.max_memory_reserved,
        "memory_stats": memory.memory_stats,
        "reset_peak_memory_stats": memory.reset_peak_memory_stats,
        "reset_accumulated_memory_stats": memory.reset_accumulated_memory_stats,
        "get_memory_info": memory.mem_get_info,
    }
    namespace = {name: _real_while_compiling(name, f) for name, f in namespace.items()}
    return FacadeModule("torch.accelerator", REAL_ACCELERATOR, namespace)


def install() -> tuple[FacadeModule, ...]:
    """Put the facade in place (idempotent); returns what it placed. Leaves on disable."""
    if ledger.has(GROUP):
        return ()
    module = _build()
    modules.install_module(GROUP, "torch.accelerator", module, torch, "accelerator")
    ledger.set_attr(GROUP, torch, "Event", AcceleratorEvent)
    return (module,)


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    return (
        ledger.attr_spot(torch, "accelerator"),
        ledger.item_spot(sys.modules, "torch.accelerator"),
        ledger.attr_spot(torch, "Event"),
    )
