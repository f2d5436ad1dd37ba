"""``torch.cuda`` memory statistics answered by the device tensors really live on.

Current values come from the real allocator (:mod:`torchdevice.facade.real_device`): Metal's on
MPS hosts, the C heap's (glibc ``mallinfo2``) on CPU-only hosts, so a 64 MiB tensor shows
as 64 MiB more allocated and goes away when it is freed. Nothing is counted per op.

Peaks: allocators other than CUDA's keep no resettable peak, so the tracker keeps its own.
Every facade call that reads memory, synchronises or records an event samples the current
values. On Linux CPU hosts it also reads the kernel's resident high-water mark (``VmHWM``,
reset through ``/proc/self/clear_refs`` by :func:`reset_peak_memory_stats`): memory that
was written between two samples raised it, so a peak freed before anyone asked still
shows (estimated as the allocated bytes at the reset plus the resident growth since then).
Resetting that mark is process-wide: ``getrusage``'s ``ru_maxrss`` restarts from there too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchdevice.facade import real_device
from torchdevice.facade.real_device import RealDevice

__all__ = [
    "MemoryTracker",
    "empty_cache",
    "get_per_process_memory_fraction",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
    "tracker",
]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _resident() -> tuple[int, int] | None:
    """``(VmRSS, VmHWM)`` in bytes from ``/proc/self/status``; ``None`` off Linux."""
    rss = hwm = None
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None if rss is None or hwm is None else (rss, hwm)


def _reset_resident_peak() -> bool:
    """Reset the kernel's resident high-water mark to the current RSS (Linux >= 4.0)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class _Baseline:
    """Where peaks are measured from: the values at the last reset."""

    allocated: int
    reserved: int
    rss: int | None
    hwm: int | None
    hwm_reset: bool


class MemoryTracker:
    """Current and peak memory of one real device (one tracker per device, process-wide)."""

    def __init__(self, device: RealDevice) -> None:
        self.device = device
        self._lock = threading.Lock()
        self._baseline: _Baseline | None = None
        self._peak_allocated = 0
        self._peak_reserved = 0
        self.fraction = 1.0

    def _new_baseline(self, reset_resident: bool) -> _Baseline:
        allocated, reserved = self.device.allocated_bytes(), self.device.reserved_bytes()
        resident = _resident() if self.device.type == "cpu" else None
        hwm_reset = False
        if resident is not None and reset_resident:
            hwm_reset = _reset_resident_peak()
            resident = _resident() or resident
        rss, hwm = resident if resident is not None else (None, None)
        return _Baseline(allocated, reserved, rss, hwm, hwm_reset)

    def sample(self) -> tuple[int, int]:
        """Read ``(allocated, reserved)`` now and fold them into the peaks."""
        allocated, reserved = self.device.allocated_bytes(), self.device.reserved_bytes()
        with self._lock:
            if self._baseline is None:
                self._baseline = self._new_baseline(reset_resident=False)
            self._peak_allocated = max(self._peak_allocated, allocated)
            self._peak_reserved = max(self._peak_reserved, reserved)
        return allocated, reserved

    def _resident_growth(self, base: _Baseline) -> int | None:
        """How far resident memory rose above the baseline since it was taken, if known."""
        if base.rss is None or base.hwm is None:
            return None
        now = _resident()
        if now is None:
            return None
        hwm = now[1]
        if not base.hwm_reset and hwm <= base.hwm:
            return None  # the mark still holds an older peak: nothing new can be read
        return max(0, hwm - base.rss)

    def peaks(self) -> tuple[int, int]:
        """``(peak allocated, peak reserved)`` since the last reset (or first use)."""
        self.sample()
        with self._lock:
            base = self._baseline
            assert base is not None
            peak_allocated, peak_reserved = self._peak_allocated, self._peak_reserved
        growth = self._resident_growth(base)
        if growth is not None:
            peak_allocated = max(peak_allocated, base.allocated + growth)
            peak_reserved = max(peak_reserved, base.reserved + growth, peak_allocated)
            with self._lock:  # kept, so a peak never reads lower later (RSS counts lag)
                if self._baseline is base:
                    self._peak_allocated = max(self._peak_allocated, peak_allocated)
                    self._peak_reserved = max(self._peak_reserved, peak_reserved)
        return peak_allocated, peak_reserved

    def reset_peaks(self) -> None:
        """Start measuring peaks from now."""
        with self._lock:
            self._baseline = base = self._new_baseline(reset_resident=True)
            self._peak_allocated, self._peak_reserved = base.allocated, base.reserved


_trackers: dict[str, MemoryTracker] = {}
_trackers_lock = threading.Lock()


def tracker(device: RealDevice | None = None) -> MemoryTracker:
    """The tracker of ``device`` (default: the current activation's real device)."""
    device = real_device.current() if device is None else device
    with _trackers_lock:
        found = _trackers.get(device.type)
        if found is None:
            found = _trackers[device.type] = MemoryTracker(device)
    return found


def _tracker_for(device: Any) -> MemoryTracker:
    """Check a ``device=`` argument against the policy, then the current tracker."""
    real_device.checked(device)
    return tracker()


# -- the torch.cuda memory API -------------------------------------------------------------
def memory_allocated(device: Any = None) -> int:
    """Bytes allocated on the real device now (see the module docstring for sources)."""
    return _tracker_for(device).sample()[0]


def max_memory_allocated(device: Any = None) -> int:
    """Peak allocated bytes since the last :func:`reset_peak_memory_stats`."""
    return _tracker_for(device).peaks()[0]


def memory_reserved(device: Any = None) -> int:
    """Bytes the real device's allocator holds from the system now."""
    return _tracker_for(device).sample()[1]


def max_memory_reserved(device: Any = None) -> int:
    """Peak reserved bytes since the last :func:`reset_peak_memory_stats`."""
    return _tracker_for(device).peaks()[1]


def memory_cached(device: Any = None) -> int:
    """Deprecated CUDA alias of :func:`memory_reserved`."""
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    """Deprecated CUDA alias of :func:`max_memory_reserved`."""
    return max_memory_reserved(device)


def reset_peak_memory_stats(device: Any = None) -> None:
    """Measure peaks from now on."""
    _tracker_for(device).reset_peaks()


def reset_max_memory_allocated(device: Any = None) -> None:
    """Deprecated CUDA alias of :func:`reset_peak_memory_stats`."""
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    """Deprecated CUDA alias of :func:`reset_peak_memory_stats`."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """CUDA's cumulative counters are not kept here (no allocation is counted): nothing."""
    _tracker_for(device)


def empty_cache() -> None:
    """Give cached memory back to the system (``torch.mps.empty_cache`` / ``malloc_trim``)."""
    device = real_device.current()
    device.empty_cache()
    tracker(device).sample()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of the real device (psutil's available/total on the CPU)."""
    return _tracker_for(device).device.mem_get_info()


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Cap the process's share of device memory.

    MPS enforces it (``torch.mps.set_per_process_memory_fraction``); the C heap of a CPU
    host has no cap, so there it is only recorded, for
    :func:`get_per_process_memory_fraction` to answer.
    """
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    memory = _tracker_for(device)
    if memory.device.type == "mps":
        real_device.REAL_MPS.set_per_process_memory_fraction(float(fraction))
    memory.fraction = float(fraction)


def get_per_process_memory_fraction(device: Any = None) -> float:
    """The fraction last set (1.0 by default)."""
    return _tracker_for(device).fraction


def memory_stats(device: Any = None) -> dict[str, Any]:
    """The CUDA statistics keys this host can answer truly, flat as CUDA's are.

    ``allocated_bytes`` and ``reserved_bytes`` (each ``.all.current`` and ``.all.peak``).
    ``active_bytes`` and ``requested_bytes`` are properties of CUDA's caching allocator
    (blocks in use, sizes asked for before rounding) that no other device reports, and
    CUDA's cumulative counters (``.allocated``, ``.freed``, ``num_alloc_retries``...) need
    a count of every allocation, which is not kept: they are absent rather than made up.
    """
    memory = _tracker_for(device)
    allocated, reserved = memory.sample()
    peak_allocated, peak_reserved = memory.peaks()
    stats: dict[str, Any] = {}
    for key, current, peak in (
        ("allocated_bytes", allocated, peak_allocated),
        ("reserved_bytes", reserved, peak_reserved),
    ):
        stats[f"{key}.all.current"] = current
        stats[f"{key}.all.peak"] = peak
    return dict(sorted(stats.items()))


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    """:func:`memory_stats` nested on the dots, as CUDA's is."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        node = nested
        *path, leaf = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


_SOURCES = {
    "cpu": "the C heap (glibc mallinfo2), psutil; peaks also from the kernel's VmHWM",
    "mps": "torch.mps current/driver allocated memory; peaks sampled at facade calls",
    "cuda": "the real torch.cuda allocator",
}


def _mib(count: int) -> str:
    return f"{count / 2**20:10.1f} MiB"


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A human-readable table of the statistics, in the spirit of CUDA's."""
    memory = _tracker_for(device)
    stats = memory_stats(device)
    rt = real_device.runtime()
    free, total = memory.device.mem_get_info()
    width = 75
    lines = [
        "=" * width,
        f" torchdevice memory summary: CUDA requests run on {memory.device.type}"
        f" ({rt.host.device_name(0)})",
        "-" * width,
        f" {'Metric':<28}{'Current':>22}{'Peak':>22}",
        "-" * width,
    ]
    for key, label in (
        ("allocated_bytes", "Allocated memory"),
        ("reserved_bytes", "Reserved memory"),
    ):
        current, peak = stats[f"{key}.all.current"], stats[f"{key}.all.peak"]
        lines.append(f" {label:<28}{_mib(current):>22}{_mib(peak):>22}")
    lines.append(f" {'Free / total device memory':<28}{_mib(free):>22}{_mib(total):>22}")
    if not abbreviated:
        kind = memory.device.type
        source = _SOURCES.get(kind, f"torch.{kind} (a registered backend), else the C heap")
        lines += ["-" * width, f" Source: {source}"]
    lines.append("=" * width)
    return "\n".join(lines) + "\n"
