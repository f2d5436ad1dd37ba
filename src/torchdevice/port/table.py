"""The one table of device-API rewrites: what each ``torch.cuda``/``torch.mps`` call becomes.

The report's advice (:func:`torchdevice.reporting.guide.advice`, in the text and the JSON report)
and the patch (:mod:`torchdevice.port.patch`) both read :data:`DEVICE_API`, so what the
report tells a user to write is what ``torchdevice port`` writes. Every form is code that
runs natively, without torchdevice, on a CUDA host, on a Mac (MPS) and on a CPU-only host:
``torch.accelerator``'s memory statistics, device index, synchronization and streams raise
"Cannot access accelerator device when none is available" on a CPU-only host, so those
calls are guarded by ``torch.accelerator.is_available()`` with a neutral value (0 bytes
allocated, device index 0), and events and streams go through small helpers the patch
defines once per file (:data:`HELPERS`): ``torch.Event``/``torch.Stream`` where there is
an accelerator, a host stand-in timed with ``time.perf_counter`` where there is none.
Only what has no honest device-agnostic form (device properties, a compute capability,
CUDA's allocator summary, per-device RNG state) is left as a comment saying why.

Pure data and string functions: no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "BACKENDS_MPS_API",
    "DEVICE_API",
    "DEVICE_EXPRESSION",
    "GUARD",
    "HELPERS",
    "HELPER_NEEDS",
    "LEGACY_TYPE_DTYPES",
    "SINCE",
    "Rewrite",
    "device_type_of",
    "helper_closure",
    "rewrite_for",
]

#: The one device a ported file uses: the accelerator this host has, else the CPU.
DEVICE_EXPRESSION: Final = (
    'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
)

#: The legacy typed-tensor classes (``torch.cuda.HalfTensor``...) and the dtype each stands
#: for, by name (torch 2.13's list): the facade's stand-ins are built from it, and
#: ``torch.set_default_tensor_type(torch.cuda.HalfTensor)`` is ported to
#: ``torch.set_default_dtype(torch.float16)`` and ``torch.set_default_device(device)``.
LEGACY_TYPE_DTYPES: Final[dict[str, str]] = {
    "DoubleTensor": "float64",
    "FloatTensor": "float32",
    "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16",
    "ByteTensor": "uint8",
    "CharTensor": "int8",
    "ShortTensor": "int16",
    "IntTensor": "int32",
    "LongTensor": "int64",
    "BoolTensor": "bool",
}

#: The test every guarded rewrite makes.
GUARD: Final = "torch.accelerator.is_available()"

#: How a call is rewritten (see :meth:`Rewrite.code`).
Form = Literal["call", "guarded", "statement", "context", "expression", "helper", "keep", "none"]


def device_type_of(api: str) -> str:
    """The device type a device-module API is written for: ``cuda`` for ``torch.cuda.X``,
    ``mps`` for ``torch.mps.X`` and ``torch.backends.mps.X``."""
    return "mps" if api.startswith("torch.backends.mps.") else api.split(".")[1]


@dataclass(frozen=True)
class Rewrite:
    """What one device-module call becomes.

    ``form`` says how ``target`` is used: ``call`` calls it with the same arguments;
    ``guarded`` calls it where there is an accelerator and is ``neutral`` elsewhere;
    ``statement`` is a call made for its effect, done only where there is an accelerator;
    ``context`` passes its index only where there is an accelerator (``None`` is a no-op
    device context); ``expression`` is ``target`` with ``{args}`` and ``{device}`` filled
    in; ``helper`` calls a helper of :data:`HELPERS` that the patch defines; ``keep`` is
    left as it is, since it runs everywhere (with a comment saying why); ``none`` has no
    device-agnostic form. ``why`` is what the advice adds, and the comment the patch
    leaves for ``none`` and where ``comment`` is set; ``example`` the arguments the advice
    shows.
    """

    form: Form
    target: str = ""
    neutral: str = "None"
    why: str = ""
    example: str = ""
    comment: bool = False

    def code(self, args: str | None = None, device: str = "device") -> str:
        """The replacement of a call whose argument text is ``args`` (one line)."""
        args = self.example if args is None else args
        if self.form in {"call", "helper"}:
            return f"{self.target}({args})"
        if self.form == "guarded":
            return f"({self.target}({args}) if {GUARD} else {self.neutral})"
        if self.form == "statement":
            return f"if {GUARD}: {self.target}({args})"
        if self.form == "context":
            return f"{self.target}(({args}) if {GUARD} else None)"
        if self.form == "expression":
            return self.target.format(args=args, device=device)
        return ""

    def advice(self, api: str, device: str = "device") -> str:
        """The report's one-line advice for a call of ``api`` whose source it cannot read
        (the same code as the patch, with :attr:`example` for the call's arguments)."""
        if self.form == "none":
            return (
                f"no device-agnostic equivalent of `{api}`: {self.why}; keep it behind "
                f'`if {device}.type == "{device_type_of(api)}":`'
            )
        if self.form == "keep":
            return f"no change: {self.why}"
        text = f"`{self.code(device=device)}`"
        return f"{text} ({self.why})" if self.why else text


_EVENT_WHY = "torch.Event where there is an accelerator, time.perf_counter timing on the CPU"
_STREAM_WHY = "torch.Stream where there is an accelerator, a no-op stand-in on the CPU"

#: Device-module calls (``torch.cuda.X``, ``torch.mps.X``) by the name after the module.
DEVICE_API: Final[dict[str, Rewrite]] = {
    "is_available": Rewrite("call", "torch.accelerator.is_available"),
    "device_count": Rewrite("call", "torch.accelerator.device_count"),
    "current_device": Rewrite("guarded", "torch.accelerator.current_device_index", "0"),
    "set_device": Rewrite("statement", "torch.accelerator.set_device_index", example="index"),
    "device": Rewrite("context", "torch.accelerator.device_index", example="index"),
    "synchronize": Rewrite("statement", "torch.accelerator.synchronize"),
    "memory_allocated": Rewrite("guarded", "torch.accelerator.memory_allocated", "0"),
    "max_memory_allocated": Rewrite("guarded", "torch.accelerator.max_memory_allocated", "0"),
    "memory_reserved": Rewrite("guarded", "torch.accelerator.memory_reserved", "0"),
    "max_memory_reserved": Rewrite("guarded", "torch.accelerator.max_memory_reserved", "0"),
    "memory_stats": Rewrite("guarded", "torch.accelerator.memory_stats", "{}"),
    "mem_get_info": Rewrite("guarded", "torch.accelerator.get_memory_info", "(0, 0)"),
    "current_allocated_memory": Rewrite("guarded", "torch.accelerator.memory_allocated", "0"),
    "driver_allocated_memory": Rewrite("guarded", "torch.accelerator.memory_reserved", "0"),
    "empty_cache": Rewrite("statement", "torch.accelerator.empty_cache"),
    "reset_peak_memory_stats": Rewrite("statement", "torch.accelerator.reset_peak_memory_stats"),
    "reset_accumulated_memory_stats": Rewrite(
        "statement", "torch.accelerator.reset_accumulated_memory_stats"
    ),
    "manual_seed": Rewrite("call", "torch.manual_seed", why="seeds every device", example="seed"),
    "manual_seed_all": Rewrite(
        "call", "torch.manual_seed", why="seeds every device", example="seed"
    ),
    "seed": Rewrite("call", "torch.seed"),
    "seed_all": Rewrite("call", "torch.seed"),
    "initial_seed": Rewrite("call", "torch.initial_seed"),
    "Event": Rewrite("helper", "_device_event", why=_EVENT_WHY, example="enable_timing=True"),
    "Stream": Rewrite("helper", "_device_stream", why=_STREAM_WHY),
    "current_stream": Rewrite("helper", "_current_stream", why=_STREAM_WHY),
    "default_stream": Rewrite("helper", "_current_stream", why=_STREAM_WHY),
    "set_stream": Rewrite("statement", "torch.accelerator.set_stream", example="stream"),
    "stream": Rewrite(
        "expression", "{args}", why="a stream is its own context manager", example="stream"
    ),
    "get_device_name": Rewrite(
        "expression",
        "str({device})",
        example="0",
        comment=True,
        why="device names have no device-agnostic API: this shows the device",
    ),
    "get_device_properties": Rewrite(
        "none",
        why="device properties (multi_processor_count, major/minor, name) have no "
        "device-agnostic API; `.total_memory` is torch.accelerator.get_memory_info()[1]",
    ),
    "get_device_capability": Rewrite(
        "none",
        why="a compute capability is CUDA's notion (torch.accelerator's "
        "get_device_capability() returns the supported dtypes instead)",
    ),
    "is_bf16_supported": Rewrite("none", why="bfloat16 support has no device-agnostic query"),
    "memory_summary": Rewrite(
        "none", why="memory_summary() is CUDA's allocator report; there is no device-agnostic one"
    ),
    "get_rng_state": Rewrite(
        "none",
        why="per-device RNG state: the device module's get_rng_state where it has "
        "one (the CPU's is torch.get_rng_state)",
    ),
    "set_rng_state": Rewrite(
        "none",
        why="per-device RNG state: the device module's set_rng_state where it has "
        "one (the CPU's is torch.set_rng_state)",
    ),
}

#: ``torch.backends.mps.X`` calls, which MPS-first code makes, by the name after the module.
BACKENDS_MPS_API: Final[dict[str, Rewrite]] = {
    "is_available": Rewrite("call", "torch.accelerator.is_available"),
    "is_built": Rewrite(
        "keep",
        why="whether this torch was built with MPS is a question about the build, and "
        "it answers everywhere (False off a Mac)",
    ),
    "get_name": Rewrite(
        "expression",
        "str({device})",
        comment=True,
        why="device names have no device-agnostic API: this shows the device",
    ),
    "get_core_count": Rewrite("none", why="the Apple GPU's core count has no device-agnostic API"),
}

_UNKNOWN = Rewrite("none", why="torchdevice knows no device-agnostic form")


def rewrite_for(api: str) -> Rewrite:
    """The rewrite of ``api`` (``torch.cuda.synchronize``, ``torch.backends.mps.get_name``;
    an unknown one has none)."""
    table = BACKENDS_MPS_API if api.startswith("torch.backends.mps.") else DEVICE_API
    return table.get(api.rsplit(".", 1)[-1], _UNKNOWN)


#: The torch release that brought each API the patch writes (``(major, minor)``), from
#: PyTorch's release history: ``torch.accelerator`` came in 2.6 (with
#: ``current_device_index``/``set_device_index``); ``current_accelerator(check_available=)``
#: in 2.7; the ``device_index`` context in 2.8; the memory statistics and ``empty_cache`` in
#: 2.9; ``get_memory_info`` in 2.10. The patch's first line states the newest it uses.
SINCE: Final[dict[str, tuple[int, int]]] = {
    **dict.fromkeys(
        (
            "torch.accelerator.is_available",
            "torch.accelerator.device_count",
            "torch.accelerator.current_device_index",
            "torch.accelerator.set_device_index",
            "torch.accelerator.synchronize",
            "torch.accelerator.current_stream",
            "torch.accelerator.set_stream",
            "torch.distributed.get_default_backend_for_device",
        ),
        (2, 6),
    ),
    "torch.accelerator.current_accelerator": (2, 7),
    "torch.accelerator.device_index": (2, 8),
    **dict.fromkeys(
        (
            "torch.accelerator.memory_allocated",
            "torch.accelerator.max_memory_allocated",
            "torch.accelerator.memory_reserved",
            "torch.accelerator.max_memory_reserved",
            "torch.accelerator.memory_stats",
            "torch.accelerator.empty_cache",
            "torch.accelerator.reset_peak_memory_stats",
            "torch.accelerator.reset_accumulated_memory_stats",
        ),
        (2, 9),
    ),
    "torch.accelerator.get_memory_info": (2, 10),
}


#: Helpers the patch defines once per file, after the device binding: name -> source.
#: Each uses only torch and the standard library, so the ported file needs nothing else.
HELPERS: Final[dict[str, str]] = {
    "_HostEvent": '''\
class _HostEvent:
    """torch.Event's interface on a host without an accelerator, timed by the host clock."""

    def __init__(self) -> None:
        self._at = 0.0

    def record(self, stream=None) -> None:
        self._at = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def elapsed_time(self, end: "_HostEvent") -> float:
        return (end._at - self._at) * 1000.0
''',
    "_device_event": '''\
def _device_event(enable_timing=False, blocking=False, interprocess=False):
    """A torch.Event where there is an accelerator; a host-clock stand-in on the CPU."""
    if torch.accelerator.is_available():
        return torch.Event(
            enable_timing=enable_timing, blocking=blocking, interprocess=interprocess
        )
    return _HostEvent()
''',
    "_HostStream": '''\
class _HostStream:
    """torch.Stream's interface on a host without an accelerator: work is already done."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None):
        event = event if event is not None else _HostEvent()
        event.record()
        return event

    def __enter__(self) -> "_HostStream":
        return self

    def __exit__(self, *exc_info) -> None:
        return None
''',
    "_device_stream": '''\
def _device_stream(*args, **kwargs):
    """A torch.Stream where there is an accelerator; a no-op stand-in on the CPU."""
    return torch.Stream(*args, **kwargs) if torch.accelerator.is_available() else _HostStream()
''',
    "_current_stream": '''\
def _current_stream(*args, **kwargs):
    """The accelerator's current stream; a no-op stand-in on the CPU."""
    if torch.accelerator.is_available():
        return torch.accelerator.current_stream(*args, **kwargs)
    return _HostStream()
''',
}

#: What each helper needs defined before it (in :data:`HELPERS`' order) and imported.
HELPER_NEEDS: Final[dict[str, tuple[str, ...]]] = {
    "_HostEvent": ("import time",),
    "_device_event": ("_HostEvent",),
    "_HostStream": ("_HostEvent",),
    "_device_stream": ("_HostStream",),
    "_current_stream": ("_HostStream",),
}


def helper_closure(names: set[str]) -> tuple[list[str], list[str]]:
    """The helpers ``names`` need, in definition order, and the imports they need."""
    wanted: set[str] = set()
    imports: list[str] = []

    def add(name: str) -> None:
        if name.startswith("import "):
            if name not in imports:
                imports.append(name)
            return
        if name in wanted:
            return
        wanted.add(name)
        for need in HELPER_NEEDS.get(name, ()):
            add(need)

    for name in sorted(names):
        add(name)
    return [name for name in HELPERS if name in wanted], imports
