"""The ``torch.mps`` facade: MPS-first code on CUDA and CPU-only hosts.

The other direction of the ``torch.cuda`` facade. Installed at ``sys.modules["torch.mps"]``
and ``torch.mps`` (with ``torch.mps.event`` and ``torch.mps.profiler``), and
``torch.backends.mps``, on every host without a real MPS backend. The answers come from
the device "mps" requests really land on: the CUDA GPU (through the real ``torch.cuda``),
the CPU, or the simulated MPS device, where MPS is there for every program, as on a Mac.

Whether MPS is available depends on the program, as it does on the machines code is
written for (:func:`is_available`): a program that names CUDA hears what a CUDA machine
says (no MPS), so CUDA-first code that prefers MPS when present (Accelerate's
``default_device``, ``"mps" if mps.is_available() else "cuda"``) keeps its CUDA path;
a program written for MPS alone hears yes, and takes its MPS path. Which program it is,
is read from the program itself (:mod:`torchdevice.program`), never from the library
that asks. The Metal profiler is a
no-op (no Metal device can be traced); Metal shaders and GPU captures raise
:class:`~torchdevice.errors.UnsupportedFeatureError`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from torchdevice import ledger
from torchdevice.facade import (
    call_counts,
    device_only,
    devices,
    memory,
    modules,
    real_device,
    streams,
)
from torchdevice.facade.call_counts import reported_namespace
from torchdevice.facade.modules import FacadeModule
from torchdevice.facade.streams import Event as _Event

__all__ = ["GROUP", "Event", "install", "installed", "spots", "written_for"]

REAL_MPS = real_device.REAL_MPS
REAL_BACKENDS_MPS = real_device.REAL_BACKENDS_MPS


def written_for() -> str:
    """``"cuda"`` or ``"mps"``: what the program is written for (the ``written_for`` setting,
    read from the program itself when unset: :mod:`torchdevice.program`), the accelerator
    a CPU-only host stands for. The same answer to every asker, whichever asks first."""
    return "mps" if real_device.runtime().settings.written_for == "mps" else "cuda"


def is_available() -> bool:
    """Whether "mps" is there, as the machine the program is written for would say.

    False with the facades hidden (``cuda_available``), and for CUDA code (a CUDA machine
    has no MPS: :func:`written_for`); true for MPS code, whose "mps" requests land on a
    real device, and for every program on the simulated MPS host, as on a Mac. Torch's
    inductor gets the real answer (see :func:`devices.asked_by_compiler`).
    """
    if devices.asked_by_compiler():
        return bool(REAL_MPS.is_available())
    if _stands_for_a_mac():
        return True
    return devices.advertised() and written_for() == "mps"


def is_built() -> bool:
    """As :func:`is_available`: MPS-first code checks both before using "mps" (a CUDA
    build of torch says False)."""
    if _stands_for_a_mac():
        return True
    return devices.advertised() and written_for() == "mps"


def _stands_for_a_mac() -> bool:
    """Whether the host is an MPS host (the simulated one: on a real Mac this facade is not
    in place). A Mac says MPS is there to every program, CUDA code included."""
    return real_device.runtime().host.kind == "mps"


def device_count() -> int:
    """One device, as on an Apple GPU (0 when the facade hides it)."""
    return 1 if devices.advertised() else 0


def get_name() -> str:
    """The real device's name."""
    return real_device.runtime().host.device_name(0)


def get_core_count() -> int:
    """The real device's processor count (SMs on CUDA, logical CPUs on a CPU)."""
    return real_device.current().processor_count()


# Synchronize and the RNG delegate to the torch.cuda facade's: one real device answers both.
# They stay functions of their own: dynamo keeps one trace rule per function object, and
# its rules for torch.cuda's and torch.mps's differ.
def synchronize() -> None:
    """Wait for all work on the real device."""
    streams.synchronize()


def get_rng_state(device: Any = "mps") -> torch.Tensor:
    """The real device generator's state."""
    return devices.get_rng_state(device)


def set_rng_state(new_state: torch.Tensor, device: Any = "mps") -> None:
    """Restore the real device generator's state."""
    devices.set_rng_state(new_state, device)


def manual_seed(seed: int) -> None:
    """Seed the real device's generator (never through ``torch.manual_seed``: it calls us)."""
    devices.manual_seed(seed)


def seed() -> None:
    """Seed the real device's generator non-deterministically."""
    devices.seed()


def _is_in_bad_fork() -> bool:
    """Whether this fork child must not touch the real device.

    ``torch.manual_seed`` asks before seeding "mps": a ``DataLoader`` worker forked from a
    process that used CUDA must not initialize CUDA to seed it.
    """
    return real_device.current().in_bad_fork()


def _get_default_mps_generator() -> torch.Generator:
    """The generator "mps" tensors really draw from."""
    return devices.generator()


def empty_cache() -> None:
    """Release cached memory on the real device."""
    memory.empty_cache()


def set_per_process_memory_fraction(fraction: float) -> None:
    """Cap the process's share of memory (enforced on CUDA, recorded on a CPU)."""
    if real_device.current().type == "cuda":
        real_device.REAL_CUDA.set_per_process_memory_fraction(float(fraction))
    memory.set_per_process_memory_fraction(fraction)


def current_allocated_memory() -> int:
    """Bytes allocated for tensors on the real device now."""
    return memory.tracker().sample()[0]


def driver_allocated_memory() -> int:
    """Bytes the real device's allocator holds from the system."""
    return memory.tracker().sample()[1]


def recommended_max_memory() -> int:
    """The memory the real device can use (GPU memory, or physical memory)."""
    return real_device.current().total_memory()


class Event(_Event):
    """``torch.mps.Event``: a real event of the device "mps" requests land on."""

    def __init__(self, enable_timing: bool = False) -> None:
        call_counts.count_call("torch.mps.Event")
        super().__init__(enable_timing=enable_timing)

    def __repr__(self) -> str:
        return super().__repr__().replace("torch.cuda.Event", "torch.mps.Event")


def is_metal_capture_enabled() -> bool:
    """No Metal device: captures are never enabled."""
    return False


def is_capturing_metal() -> bool:
    """No Metal device: nothing is being captured."""
    return False


def start(mode: str = "interval", wait_until_completed: bool = False) -> None:
    """``torch.mps.profiler.start``: no Metal device to trace; a no-op."""


def stop() -> None:
    """``torch.mps.profiler.stop``: a no-op."""


@contextmanager
def profile(mode: str = "interval", wait_until_completed: bool = False) -> Iterator[None]:
    """``with torch.mps.profiler.profile():``: a no-op (use ``torch.profiler`` for traces)."""
    yield


def _build() -> tuple[FacadeModule, FacadeModule, FacadeModule, FacadeModule]:
    event = FacadeModule("torch.mps.event", REAL_MPS.event, {"Event": Event})
    profiler = FacadeModule(
        "torch.mps.profiler",
        REAL_MPS.profiler,
        {
            "start": start,
            "stop": stop,
            "profile": profile,
            "is_metal_capture_enabled": is_metal_capture_enabled,
            "is_capturing_metal": is_capturing_metal,
            "metal_capture": device_only.unsupported("torch.mps.profiler.metal_capture"),
        },
    )
    names = (
        "is_available",
        "device_count",
        "synchronize",
        "get_rng_state",
        "set_rng_state",
        "manual_seed",
        "seed",
        "empty_cache",
        "set_per_process_memory_fraction",
        "current_allocated_memory",
        "driver_allocated_memory",
        "recommended_max_memory",
        "_get_default_mps_generator",
        "_is_in_bad_fork",
    )
    namespace: dict[str, Any] = {name: globals()[name] for name in names}
    namespace.update(
        Event=Event,
        event=event,
        profiler=profiler,
        compile_shader=device_only.unsupported("torch.mps.compile_shader"),
        load_metallib=device_only.unsupported("torch.mps.load_metallib"),
    )
    wrapped: dict[int, Any] = {}
    mps = FacadeModule("torch.mps", REAL_MPS, reported_namespace("torch.mps", namespace, wrapped))
    # torch.mps.event.Event is torch.mps.Event, as natively: the same counted class.
    event.__dict__.update(reported_namespace("torch.mps.event", {"Event": Event}, wrapped))
    backends = FacadeModule(
        "torch.backends.mps",
        REAL_BACKENDS_MPS,
        reported_namespace(
            "torch.backends.mps",
            {
                "is_available": is_available,
                "is_built": is_built,
                "get_name": get_name,
                "get_core_count": get_core_count,
            },
        ),
    )
    return mps, event, profiler, backends


#: The ledger group of the ``torch.mps`` facade.
GROUP = "mps facade"


def install() -> tuple[FacadeModule, ...]:
    """Put the ``torch.mps`` and ``torch.backends.mps`` facades in place (idempotent).

    Returns the facade modules it put in place (none if they already were). They leave
    through the ledger: ``disable()``, or ``ledger.undo(GROUP)`` on an MPS host.
    """
    if ledger.has(GROUP):
        return ()
    mps, event, profiler, backends = placed = _build()
    modules.install_module(GROUP, "torch.mps", mps, torch, "mps")
    modules.install_module(GROUP, "torch.mps.event", event)
    modules.install_module(GROUP, "torch.mps.profiler", profiler)
    modules.install_module(GROUP, "torch.backends.mps", backends, torch.backends, "mps")
    return placed


def installed() -> bool:
    """Whether ``torch.mps`` is the facade now."""
    return isinstance(torch.mps, FacadeModule)


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    return (
        ledger.attr_spot(torch, "mps"),
        ledger.item_spot(sys.modules, "torch.mps"),
        ledger.item_spot(sys.modules, "torch.mps.event"),
        ledger.item_spot(sys.modules, "torch.mps.profiler"),
        ledger.attr_spot(torch.backends, "mps"),
        ledger.item_spot(sys.modules, "torch.backends.mps"),
    )
