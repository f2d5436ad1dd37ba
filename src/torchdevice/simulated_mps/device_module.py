"""``torch.<name>`` for the simulated device: the device module PyTorch and user code call.

Why a module of its own: PyTorch asks a registered device type's module (``torch._register_
device_module``) for availability, the device count, the current device, seeding and memory
counters, as it asks ``torch.mps`` and ``torch.cuda``; and the kernels borrow its generators.
It answers for one device, ``<name>:0``, whose memory is the CPU's and whose kernels run
synchronously; the memory counters and generators are the C++ half's
(:mod:`torchdevice.simulated_mps.native`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from torchdevice.simulated_mps import native

__all__ = ["DeviceModule"]


class DeviceModule:
    """``torch.<name>``: the functions PyTorch and user code call on a device module.

    The generators are the C++ half's device generators (``torch.Generator(device=name)``
    builds one, :attr:`default_generator` is the device's default): the CPU's Mersenne
    Twister labelled as the device's, so random ops on the device draw from a stream separate
    from the CPU's, as on a real device, and ``torch.manual_seed`` seeds it (through
    ``manual_seed_all``). A kernel lends a generator's state to a CPU generator for the CPU
    kernel it runs (:meth:`_lent`), and takes the advanced state back.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        ops = getattr(torch.ops, native.NAMESPACE)
        self._ops = ops
        self.default_generator: torch.Generator = ops.default_generator()
        self._rng_lock = threading.RLock()

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def _lazy_init(self) -> None:
        """Nothing to initialise: the memory is the CPU's."""

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: torch.device | str | int) -> None:
        if torch.device(self.name, 0) != _as_device(device, self.name):
            raise RuntimeError(f"{self.name} has one device, {self.name}:0")

    @contextmanager
    def device(self, device: torch.device | str | int | None) -> Iterator[None]:
        """Make ``device`` current for a block: there is one device, so only check it."""
        if device is not None:
            self.set_device(device)
        yield

    def synchronize(self, device: torch.device | str | int | None = None) -> None:
        """Kernels run synchronously on the CPU: there is never anything to wait for."""

    def empty_cache(self) -> None:
        """Memory goes back to the CPU allocator as soon as the last tensor using it dies."""

    def memory_allocated(self, device: torch.device | str | int | None = None) -> int:
        """Bytes held by the device's storages now (the C++ allocator's count)."""
        return int(self._ops.memory_allocated())

    def max_memory_allocated(self, device: torch.device | str | int | None = None) -> int:
        """The peak of :meth:`memory_allocated` since the start or the last reset."""
        return int(self._ops.max_memory_allocated())

    def memory_reserved(self, device: torch.device | str | int | None = None) -> int:
        """No cache: what is reserved is what is allocated."""
        return self.memory_allocated(device)

    def max_memory_reserved(self, device: torch.device | str | int | None = None) -> int:
        return self.max_memory_allocated(device)

    def reset_peak_memory_stats(self, device: torch.device | str | int | None = None) -> None:
        self._ops.reset_peak_memory_stats()

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    def manual_seed(self, seed: int) -> None:
        self.default_generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def seed(self) -> None:
        self.default_generator.seed()

    def seed_all(self) -> None:
        self.seed()

    def initial_seed(self) -> int:
        return self.default_generator.initial_seed()

    def get_rng_state(self, device: torch.device | str | int | None = None) -> torch.Tensor:
        return self.default_generator.get_state()

    def set_rng_state(
        self, new_state: torch.Tensor, device: torch.device | str | int | None = None
    ) -> None:
        self.default_generator.set_state(new_state)

    @contextmanager
    def _lent(self, generator: torch.Generator) -> Iterator[torch.Generator]:
        """A CPU generator holding ``generator``'s state for one CPU kernel; the state it
        reaches goes back to ``generator`` (CPU kernels only take CPU generators)."""
        with self._rng_lock:
            cpu = torch.Generator()
            cpu.set_state(generator.get_state())
            try:
                yield cpu
            finally:
                generator.set_state(cpu.get_state())

    @contextmanager
    def _global_cpu_generator_at(self, state: torch.Tensor) -> Iterator[None]:
        """The CPU default generator at ``state`` (a device generator's, saved earlier) for
        one CPU computation that replays draws already made; nothing advances."""
        cpu = torch.default_generator
        with self._rng_lock:
            saved = cpu.get_state()
            cpu.set_state(state)
            try:
                yield
            finally:
                cpu.set_state(saved)

    @contextmanager
    def _as_global_cpu_generator(self) -> Iterator[None]:
        """Lend this device's RNG state to the CPU default generator for one op.

        For the few random kernels without a generator argument (``native_dropout``): they
        draw from the CPU default generator, which must not advance on behalf of the device.
        """
        cpu = torch.default_generator
        with self._rng_lock:
            saved = cpu.get_state()
            cpu.set_state(self.default_generator.get_state())
            try:
                yield
            finally:
                self.default_generator.set_state(cpu.get_state())
                cpu.set_state(saved)


def _as_device(device: torch.device | str | int, name: str) -> torch.device:
    """A device argument as ``torch.device`` (an int is an index on this device)."""
    if isinstance(device, int):
        return torch.device(name, device)
    device = torch.device(device)
    return torch.device(device.type, 0 if device.index is None else device.index)
