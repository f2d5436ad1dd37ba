"""The device that foreign-accelerator requests really land on, as the facades ask it.

The ``torch.cuda`` facade (on MPS and CPU hosts) and the ``torch.mps`` facade (on CUDA and
CPU hosts) answer every question from the device tensors really live on. This module is
that device, one small class per kind, each a thin layer over the public API that knows
the answer: ``torch.mps``/``torch.backends.mps`` on Apple GPUs, the real ``torch.cuda``
on NVIDIA GPUs, psutil, the C heap and the host clock on a CPU-only host.

Nothing here touches a device at import: the real modules are captured as objects (their
import never initialises a device) and asked only when a facade function is called.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import sys
import types
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import psutil
import torch

from torchdevice.host import HOST_KINDS
from torchdevice.redirecting.runtime import Runtime, active

__all__ = [
    "CpuDevice",
    "CudaDevice",
    "ModuleDevice",
    "MpsDevice",
    "RealDevice",
    "checked",
    "current",
    "runtime",
]

#: The real modules, captured before any facade can stand in for them.
REAL_CUDA: types.ModuleType = sys.modules["torch.cuda"]
REAL_MPS: types.ModuleType = sys.modules["torch.mps"]
REAL_BACKENDS_MPS: types.ModuleType = sys.modules["torch.backends.mps"]


def runtime() -> Runtime:
    """The current activation's runtime; a clear error if the caller outlived it."""
    rt = active()
    if rt is None:
        raise RuntimeError(
            "a torchdevice facade object (kept from torch.cuda or torch.mps while redirecting) "
            "was used after torchdevice.disable(); look it up again from torch after enabling"
        )
    return rt


class RealDevice(ABC):
    """What the facades need from the device requests really land on."""

    #: ``torch.device`` type of the device (``"cpu"``, ``"mps"`` or ``"cuda"``).
    type: str

    @property
    def torch_device(self) -> torch.device:
        """The device as torch names it (index 0: every redirected index lands there)."""
        with torch._C.DisableTorchFunction():  # no mode rewrites our own device object
            return torch.device(self.type) if self.type == "cpu" else torch.device(self.type, 0)

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for all work queued on the device."""

    @abstractmethod
    def generator(self) -> torch.Generator:
        """The device's default random generator."""

    def manual_seed(self, seed: int) -> None:
        """Seed the device's default generator."""
        self.generator().manual_seed(seed)

    def seed(self) -> None:
        """Seed the device's default generator non-deterministically."""
        self.generator().seed()

    def in_bad_fork(self) -> bool:
        """Whether this process is a fork child that must not touch the device."""
        return False

    @abstractmethod
    def allocated_bytes(self) -> int:
        """Bytes of memory handed out for live allocations right now."""

    @abstractmethod
    def reserved_bytes(self) -> int:
        """Bytes held from the system by the allocator (>= allocated)."""

    @abstractmethod
    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes, as ``cudaMemGetInfo`` answers."""

    @abstractmethod
    def empty_cache(self) -> None:
        """Give cached, unused memory back to the system where the allocator caches."""

    @abstractmethod
    def total_memory(self) -> int:
        """Bytes of memory the device can use."""

    @abstractmethod
    def processor_count(self) -> int:
        """Parallel processors (CPU cores, GPU cores or SMs)."""

    @abstractmethod
    def bf16_supported(self, including_emulation: bool) -> bool:
        """Whether bfloat16 arithmetic runs on the device."""

    @abstractmethod
    def new_native_event(self, enable_timing: bool) -> Any | None:
        """A backend event object, or ``None`` where the host clock times the device."""


class CpuDevice(RealDevice):
    """A CPU-only host: memory from the C heap and psutil, time from the host clock.

    The CPU runs each op to completion before returning, so synchronising is a no-op and
    an event recorded by the host clock marks exactly the work issued before it.
    """

    type = "cpu"

    def synchronize(self) -> None:
        """Nothing is queued: CPU ops have finished when they return."""

    def generator(self) -> torch.Generator:
        """``torch.default_generator``, which CPU tensors draw from."""
        return torch.default_generator

    def allocated_bytes(self) -> int:
        """Bytes the C heap has handed out and not freed (CPU tensors live there).

        glibc's ``mallinfo2()`` (in-use arena bytes + mmapped blocks): exact for every
        allocation of the process, torch's CPU allocator included; it costs ~0.6 us and
        nothing per op. Elsewhere (musl, macOS) the process RSS from psutil.
        """
        info = _mallinfo2()
        if info is None:
            return int(psutil.Process().memory_info().rss)
        return int(info.uordblks + info.hblkhd)

    def reserved_bytes(self) -> int:
        """Bytes the C heap holds from the system (arena + mmapped blocks)."""
        info = _mallinfo2()
        if info is None:
            return int(psutil.Process().memory_info().rss)
        return int(info.arena + info.hblkhd)

    def mem_get_info(self) -> tuple[int, int]:
        """``(available, total)`` system memory from psutil."""
        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    def empty_cache(self) -> None:
        """Return free heap pages to the system (glibc ``malloc_trim``), as CUDA's does."""
        trim = _libc_function("malloc_trim")
        if trim is not None:
            trim(0)

    def total_memory(self) -> int:
        """Physical memory, from psutil."""
        return int(psutil.virtual_memory().total)

    def processor_count(self) -> int:
        """Logical CPUs, from psutil."""
        return int(psutil.cpu_count(logical=True) or os.cpu_count() or 1)

    def bf16_supported(self, including_emulation: bool) -> bool:
        """bfloat16 runs on every CPU; natively where AVX512-BF16 or AMX is present."""
        if including_emulation:
            return True
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())

    def new_native_event(self, enable_timing: bool) -> None:
        """The CPU has no event objects: the host clock times it (see facade.streams)."""
        return None


class MpsDevice(RealDevice):
    """An Apple GPU, through ``torch.mps`` and ``torch.backends.mps`` (thin, unverified here)."""

    type = "mps"

    def synchronize(self) -> None:
        """``torch.mps.synchronize()``."""
        REAL_MPS.synchronize()

    def generator(self) -> torch.Generator:
        """The MPS default generator."""
        return REAL_MPS._get_default_mps_generator()  # type: ignore[no-any-return]

    def allocated_bytes(self) -> int:
        """``torch.mps.current_allocated_memory()``."""
        return int(REAL_MPS.current_allocated_memory())

    def reserved_bytes(self) -> int:
        """``torch.mps.driver_allocated_memory()`` (what Metal holds for the process)."""
        return int(REAL_MPS.driver_allocated_memory())

    def mem_get_info(self) -> tuple[int, int]:
        """``(recommended max - driver allocated, recommended max)``."""
        total = self.total_memory()
        return max(0, total - self.reserved_bytes()), total

    def empty_cache(self) -> None:
        """``torch.mps.empty_cache()``."""
        REAL_MPS.empty_cache()

    def total_memory(self) -> int:
        """Metal's recommended working-set size (unified memory the GPU may use)."""
        return int(REAL_MPS.recommended_max_memory())

    def processor_count(self) -> int:
        """GPU cores (``torch.backends.mps.get_core_count()``)."""
        count = getattr(REAL_BACKENDS_MPS, "get_core_count", None)
        return int(count()) if count is not None else int(psutil.cpu_count(logical=True) or 1)

    def bf16_supported(self, including_emulation: bool) -> bool:
        """bfloat16 on MPS needs macOS 14."""
        return bool(REAL_BACKENDS_MPS.is_macos_or_newer(14, 0))

    def new_native_event(self, enable_timing: bool) -> Any:
        """A ``torch.mps.Event``."""
        return REAL_MPS.Event(enable_timing=enable_timing)


class CudaDevice(RealDevice):
    """An NVIDIA GPU through the real ``torch.cuda`` (for the ``torch.mps`` facade)."""

    type = "cuda"

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``."""
        REAL_CUDA.synchronize()

    def generator(self) -> torch.Generator:
        """The current CUDA device's default generator."""
        return REAL_CUDA.default_generators[REAL_CUDA.current_device()]  # type: ignore[no-any-return]

    def manual_seed(self, seed: int) -> None:
        """``torch.cuda.manual_seed``: queued until CUDA initializes, as natively.

        Reading the generator would initialize CUDA, which a forked child of a process
        that used CUDA (a ``DataLoader`` worker seeding itself through
        ``torch.manual_seed``) must never do.
        """
        REAL_CUDA.manual_seed(seed)

    def seed(self) -> None:
        """``torch.cuda.seed``: queued until CUDA initializes, as natively."""
        REAL_CUDA.seed()

    def in_bad_fork(self) -> bool:
        """``torch.cuda._is_in_bad_fork()``: forked after CUDA was initialized."""
        return bool(REAL_CUDA._is_in_bad_fork())

    def allocated_bytes(self) -> int:
        """``torch.cuda.memory_allocated()``."""
        return int(REAL_CUDA.memory_allocated())

    def reserved_bytes(self) -> int:
        """``torch.cuda.memory_reserved()``."""
        return int(REAL_CUDA.memory_reserved())

    def mem_get_info(self) -> tuple[int, int]:
        """``torch.cuda.mem_get_info()``."""
        free, total = REAL_CUDA.mem_get_info()
        return int(free), int(total)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``."""
        REAL_CUDA.empty_cache()

    def total_memory(self) -> int:
        """The current GPU's memory."""
        return int(REAL_CUDA.get_device_properties(REAL_CUDA.current_device()).total_memory)

    def processor_count(self) -> int:
        """The current GPU's streaming multiprocessors."""
        props = REAL_CUDA.get_device_properties(REAL_CUDA.current_device())
        return int(props.multi_processor_count)

    def bf16_supported(self, including_emulation: bool) -> bool:
        """``torch.cuda.is_bf16_supported()``."""
        return bool(REAL_CUDA.is_bf16_supported(including_emulation))

    def new_native_event(self, enable_timing: bool) -> Any:
        """A real ``torch.cuda.Event``."""
        return REAL_CUDA.Event(enable_timing=enable_timing)


class ModuleDevice(CpuDevice):
    """A backend registered at run time (``torch._register_device_module``): an extra
    backend (:mod:`torchdevice.extra_backends`), whichever provides it.

    Its device module answers what it implements (``synchronize``, ``default_generator``,
    ``memory_allocated``...); the rest is the host's, which is where such backends keep
    their data. Events use the host clock: these backends run synchronously.
    """

    def __init__(self, device_type: str) -> None:
        self.type = device_type

    def _module(self) -> Any:
        return getattr(torch, self.type)

    def synchronize(self) -> None:
        """The module's ``synchronize`` where it has one."""
        function = getattr(self._module(), "synchronize", None)
        if function is not None:
            function()

    def generator(self) -> torch.Generator:
        """The module's ``default_generator``."""
        generator = getattr(self._module(), "default_generator", None)
        return generator if isinstance(generator, torch.Generator) else torch.default_generator

    def allocated_bytes(self) -> int:
        """The module's ``memory_allocated()``, else the C heap's."""
        function = getattr(self._module(), "memory_allocated", None)
        return int(function()) if function is not None else super().allocated_bytes()

    def reserved_bytes(self) -> int:
        """The module's ``memory_reserved()``, else the C heap's."""
        function = getattr(self._module(), "memory_reserved", None)
        return int(function()) if function is not None else super().reserved_bytes()

    def empty_cache(self) -> None:
        """The module's ``empty_cache`` where it has one."""
        function = getattr(self._module(), "empty_cache", None)
        if function is not None:
            function()


_DEVICES: dict[str, RealDevice] = {"cpu": CpuDevice(), "mps": MpsDevice(), "cuda": CudaDevice()}


def current() -> RealDevice:
    """The device redirected accelerator requests land on in the current activation."""
    host = runtime().host
    device_type = host.device_type
    if device_type is not None and device_type not in HOST_KINDS:
        found = _DEVICES.get(device_type)
        if found is None:
            found = _DEVICES.setdefault(device_type, ModuleDevice(device_type))
        return found
    accelerator = host.accelerator
    return _DEVICES["cpu" if accelerator is None else accelerator]


def checked(device: Any) -> int:
    """The index a facade's ``device=`` argument names on the single target: always 0.

    Raises as torch would for what the policy rejects (malformed strings, an index past
    the count); a negative int is torch's "the current device".
    """
    if device is not None and not (isinstance(device, int) and device < 0):
        runtime().decide(device)
    return 0


# -- the C heap (glibc) -------------------------------------------------------------------
class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (all fields ``size_t``)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None)
    except OSError:  # pragma: no cover - a Linux without a loadable libc
        return None


@functools.cache
def _libc_function(name: str) -> Any | None:
    libc = _libc()
    function = getattr(libc, name, None) if libc is not None else None
    if function is not None and name == "mallinfo2":
        function.restype = _MallInfo2
        function.argtypes = []
    return function


def _mallinfo2() -> _MallInfo2 | None:
    """glibc's heap statistics, or ``None`` where there is no ``mallinfo2`` (glibc < 2.33)."""
    function = _libc_function("mallinfo2")
    return None if function is None else function()


def l2_cache_bytes() -> int:
    """The CPU's per-core L2 cache size from sysfs (0 where the kernel does not say)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    with contextlib.suppress(OSError, ValueError):
        for index in sorted(base.glob("index*")):
            if (index / "level").read_text().strip() == "2":
                size = (index / "size").read_text().strip()
                units = {"K": 1024, "M": 1024**2, "G": 1024**3}
                if size[-1] in units:
                    return int(size[:-1]) * units[size[-1]]
                return int(size)
    return 0
