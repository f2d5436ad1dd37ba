"""``torch.cuda`` streams, events and ``synchronize`` on the device tensors really live on.

On an Apple GPU these are the backend's own objects: ``torch.Stream("mps")`` and
``torch.mps.Event``. A CPU runs every op to completion, in program order, on the calling
thread, so there the CPU is one stream: waiting, querying and synchronising have nothing
to wait for (honestly: the work is already done), and an event records the host clock at
the moment it is recorded, which is exactly when the work issued before it finished.
``elapsed_time`` between two such events is the wall time of the work between them.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

import torch

from torchdevice.errors import UnsupportedFeatureError
from torchdevice.facade import call_counts, memory, real_device

__all__ = [
    "Event",
    "ExternalStream",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
    "synchronize",
]


def synchronize(device: Any = None) -> None:
    """Wait for all work on the real device (``torch.mps.synchronize``; nothing on a CPU)."""
    real_device.checked(device)
    real = real_device.current()
    real.synchronize()
    memory.tracker(real).sample()


class Event:
    """``torch.cuda.Event`` on the real device: a native event or the host clock.

    ``interprocess=True`` (IPC handles) is CUDA-only and raises
    :class:`~torchdevice.errors.UnsupportedFeatureError`.
    """

    #: The call the report counts for each event made (none for an API that is already
    #: device-agnostic, such as ``torch.Event``).
    counted_as: str | None = "torch.cuda.Event"

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
    ) -> None:
        if self.counted_as is not None:
            call_counts.count_call(self.counted_as)
        if interprocess:
            raise UnsupportedFeatureError(
                "torch.cuda.Event(interprocess=True) (CUDA IPC event handles)",
                "Synchronise processes with torch.multiprocessing queues or "
                "torch.distributed barriers instead.",
            )
        self.enable_timing = bool(enable_timing)
        self.blocking = bool(blocking)
        self._real = real_device.current()
        self._native = self._real.new_native_event(self.enable_timing)
        self._recorded_ns: int | None = None

    @property
    def device(self) -> torch.device:
        """The device the event belongs to (the real one)."""
        return self._real.torch_device

    def record(self, stream: Stream | None = None) -> None:
        """Mark the point reached by the work issued so far."""
        if self._native is not None:
            self._native.record()
        self._recorded_ns = time.perf_counter_ns()
        memory.tracker(self._real).sample()

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work wait for this event (a CPU's later work always does)."""
        if self._native is not None:
            self._native.wait()

    def query(self) -> bool:
        """Whether the recorded work has finished (always, on a CPU)."""
        if self._native is not None:
            return bool(self._native.query())
        return True

    def synchronize(self) -> None:
        """Block until the recorded work has finished."""
        if self._native is not None:
            self._native.synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event``, both recorded with timing."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._recorded_ns is None or end_event._recorded_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if self._native is not None and end_event._native is not None:
            return float(self._native.elapsed_time(end_event._native))
        return (end_event._recorded_ns - self._recorded_ns) / 1e6

    def ipc_handle(self) -> bytes:
        """CUDA IPC: not available off CUDA."""
        raise UnsupportedFeatureError(
            "torch.cuda.Event.ipc_handle (CUDA IPC)",
            "Synchronise processes with torch.multiprocessing queues instead.",
        )

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> Event:
        """CUDA IPC: not available off CUDA."""
        raise UnsupportedFeatureError(
            "torch.cuda.Event.from_ipc_handle (CUDA IPC)",
            "Synchronise processes with torch.multiprocessing queues instead.",
        )

    def __repr__(self) -> str:
        state = "recorded" if self._recorded_ns is not None else "unrecorded"
        return f"<torch.cuda.Event on {self._real.type} (torchdevice), {state}>"


class Stream(torch.Stream):
    """``torch.cuda.Stream``: a real ``torch.Stream`` of the device tensors live on.

    A CPU has a single stream (the calling thread), so every CPU stream compares equal;
    on MPS it is the backend's stream.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        call_counts.count_call("torch.cuda.Stream")
        real_device.checked(device)
        real = real_device.current()
        return super().__new__(cls, device=real.type, priority=priority)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        """Everything happened in ``__new__`` (``torch.Stream`` is immutable)."""

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """One priority: the CPU and MPS do not prioritise streams."""
        return (0, 0)

    def _is_cpu(self) -> bool:
        return bool(self.device.type == "cpu")

    def query(self) -> bool:
        """Whether all work on the stream has finished (always, on a CPU)."""
        return True if self._is_cpu() else bool(super().query())

    def synchronize(self) -> None:
        """Wait for the stream's work."""
        if not self._is_cpu():
            real_device.current().synchronize()

    def wait_event(self, event: Event) -> None:  # type: ignore[override]
        """Make the stream's later work wait for ``event``."""
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Make this stream's later work wait for ``stream``'s work so far.

        As CUDA does it: an event recorded on ``stream``, waited on here. The event is the
        real device's (:class:`Event`), so on MPS the backend orders the work; a CPU runs
        every op to completion in program order, so its event has nothing outstanding.
        """
        if not isinstance(stream, torch.Stream):
            raise TypeError(
                f"wait_stream(): argument 'stream' must be torch.Stream, not "
                f"{type(stream).__name__}"
            )
        event = Event()
        event.record(stream if isinstance(stream, Stream) else None)
        self.wait_event(event)

    def record_event(self, event: Event | None = None) -> Event:  # type: ignore[override]
        """Record ``event`` (a new one if ``None``) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    @property
    def cuda_stream(self) -> int:
        """The raw ``cudaStream_t``: none exists off CUDA."""
        raise UnsupportedFeatureError(
            "torch.cuda.Stream.cuda_stream (a raw CUDA stream handle)",
            "Pass streams to torch APIs as torch.cuda.Stream objects; raw handles only serve "
            "CUDA libraries, which cannot run on this host.",
        )

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream on {self.device} (torchdevice)>"


class ExternalStream:
    """``torch.cuda.ExternalStream`` wraps a raw CUDA stream pointer: CUDA-only."""

    def __new__(cls, stream_ptr: int, device: Any = None, **kwargs: Any) -> ExternalStream:
        raise UnsupportedFeatureError(
            "torch.cuda.ExternalStream (a stream made by another CUDA library)",
            "Create streams with torch.cuda.Stream() instead.",
        )


_defaults: dict[str, Stream] = {}
_local = threading.local()


def default_stream(device: Any = None) -> Stream:
    """The real device's default stream (one object per device type)."""
    real_device.checked(device)
    kind = real_device.current().type
    found = _defaults.get(kind)
    if found is None:
        found = _defaults.setdefault(kind, Stream())
    return found


def current_stream(device: Any = None) -> Stream:
    """The stream selected on this thread (``with torch.cuda.stream(s)``), else the default."""
    selected: Stream | None = getattr(_local, "stream", None)
    if selected is not None and selected.device.type == real_device.current().type:
        real_device.checked(device)
        return selected
    return default_stream(device)


def set_stream(stream_: Stream | None) -> None:
    """Select ``stream_`` on this thread (``None`` changes nothing, as in CUDA)."""
    if stream_ is not None:
        _local.stream = stream_


class StreamContext:
    """``with torch.cuda.stream(s):`` selects ``s`` on this thread for the block."""

    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream
        self._saved: list[Stream | None] = []

    def __enter__(self) -> StreamContext:
        self._saved.append(getattr(_local, "stream", None))
        if self.stream is not None:
            _local.stream = self.stream
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _local.stream = self._saved.pop()


def stream(stream: Stream | None) -> StreamContext:
    """``torch.cuda.stream(s)``: a context selecting ``s`` (``None``: no change)."""
    return StreamContext(stream)
