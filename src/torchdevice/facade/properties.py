"""``torch.cuda.get_device_properties`` answered by the device tensors really live on.

CUDA code reads these fields to size batches and pick kernels. Each is the real device's
value where it has one; where a CUDA concept has no counterpart the value is the one that
makes CUDA-first code take its most conservative path, and it is listed here:

============================  ======================================  ====================
field                          CPU-only host                            MPS host
============================  ======================================  ====================
name                           CPU model (``/proc/cpuinfo``)            chip name
major, minor                   0, 0: no CUDA compute capability; every capability check
                               reads it as "older than any CUDA GPU"
total_memory                   physical memory (psutil)                 Metal's recommended
                                                                        working set
multi_processor_count          logical CPUs (psutil)                    GPU cores
is_integrated                  True: host memory                        True: unified memory
max_threads_per_multi_         hardware threads per core                 0 (not exposed)
processor
L2_cache_size                  per-core L2 (sysfs)                       0 (not exposed)
warp_size                      1: no SIMT warps                          32 (SIMD group)
clock_rate                     max CPU clock in kHz (psutil)             0 (not exposed)
regs_per_multiprocessor,       0: no such resource is exposed
shared_memory_*, memory_*,
pci_*
gcnArchName                    "" (not an AMD GPU)
uuid                           None (no CUDA UUID)
============================  ======================================  ====================
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import psutil

from torchdevice.facade.real_device import RealDevice, l2_cache_bytes

__all__ = ["DeviceProperties", "properties_of"]


class DeviceProperties(NamedTuple):
    """The fields of CUDA's ``_CudaDeviceProperties``, filled from the real device.

    A named tuple so that torch.compile treats it as a constant, as it does CUDA's.
    """

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    is_integrated: int
    is_multi_gpu_board: int
    max_threads_per_multi_processor: int
    L2_cache_size: int
    warp_size: int
    clock_rate: int
    regs_per_multiprocessor: int = 0
    shared_memory_per_block: int = 0
    shared_memory_per_block_optin: int = 0
    shared_memory_per_multiprocessor: int = 0
    memory_clock_rate: int = 0
    memory_bus_width: int = 0
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0
    gcnArchName: str = ""
    uuid: None = None
    #: Which device really answers (``"cpu"``/``"mps"``): not a CUDA field.
    real_type: str = "cpu"

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in ("name", "major", "minor", "multi_processor_count", "is_integrated")
        )
        return (
            f"_CudaDeviceProperties({shown}, "
            f"total_memory={self.total_memory // 2**20}MB, L2_cache_size="
            f"{self.L2_cache_size // 2**20}MB) [torchdevice: {self.real_type}]"
        )


@functools.cache
def _cpu_static() -> tuple[int, int, int]:
    """``(threads per core, L2 bytes, max clock kHz)``: fixed for the process's life."""
    logical = psutil.cpu_count(logical=True) or 1
    physical = psutil.cpu_count(logical=False) or logical
    freq = psutil.cpu_freq()
    clock_khz = int(freq.max * 1000) if freq is not None and freq.max else 0
    return max(1, logical // physical), l2_cache_bytes(), clock_khz


def properties_of(device: RealDevice, name: str) -> DeviceProperties:
    """The properties of ``device``, reported under the host's device ``name``."""
    if device.type == "cpu":
        threads, l2, clock = _cpu_static()
        warp_size = 1
    else:
        threads, l2, clock = 0, 0, 0
        warp_size = 32
    return DeviceProperties(
        name=name,
        major=0,
        minor=0,
        total_memory=device.total_memory(),
        multi_processor_count=device.processor_count(),
        is_integrated=1,
        is_multi_gpu_board=0,
        max_threads_per_multi_processor=threads,
        L2_cache_size=l2,
        warp_size=warp_size,
        clock_rate=clock,
        real_type=device.type,
    )
