"""The redirection policy: a pure function from a device request to a decision.

``decide(request, host, state)`` reads no torch state and does no I/O: given the same
request, host and state it always returns the same :class:`Decision`, so the modes can
cache it and the tests can sweep every cell of the redirection table (docs/policy.md) on
any machine. The modes only *apply* decisions; the ``cpu:-1`` toggle is returned as a
flag on the decision and applied by the caller, which keeps this module free of mutable
state.

The table (rows: request, columns: host)::

    request            MPS host          CUDA host               CPU-only host
    none (factories)   mps:0             cuda (current)          cpu:0
    "cpu", "cpu:n"     mps:0             cuda (current)          cpu:0
    "cpu:-1"           cpu:0, toggles the CPU override, on every host
    "mps", "mps:n"     mps:0             cuda (current)          cpu:0
    "cuda", "cuda:n"   mps:0             unchanged, index kept   cpu:0

While the CPU override is on (or with ``keep_cpu``), explicit CPU requests stay on the CPU.
Device types the table does not govern (``meta``, ``xla``, ...) pass through unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from torchdevice.errors import DeviceRequestError, DeviceRequestTypeError
from torchdevice.host import HOST_KINDS, Host

__all__ = [
    "Action",
    "BackendDecision",
    "Decision",
    "DeviceLike",
    "DeviceSpec",
    "PolicyState",
    "Standing",
    "decide",
    "draws_on_generator",
    "has_float64",
    "is_inplace",
    "parse_request",
    "pins",
    "resolve_backend",
    "stands_for",
]

#: Device types ``torch.device`` accepts, in the order torch 2.13's error message lists them.
_TORCH_DEVICE_ORDER = (
    "cpu",
    "cuda",
    "ipu",
    "xpu",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "hip",
    "ve",
    "fpga",
    "maia",
    "xla",
    "lazy",
    "vulkan",
    "mps",
    "meta",
    "hpu",
    "mtia",
    "privateuseone",
)
TORCH_DEVICE_TYPES = frozenset(_TORCH_DEVICE_ORDER)
#: Device types the redirection table governs; every other type passes through.
GOVERNED_TYPES = frozenset(HOST_KINDS)

_DEVICE_STRING = re.compile(r"(?P<type>[a-zA-Z_][a-zA-Z0-9_]*)(?::(?P<index>0|-1|[1-9][0-9]*))?")

#: ``to-cpu``: a CUDA or MPS request on a CPU-only host. Not called "fallback", which is
#: the word for an op rerun on the CPU (:mod:`torchdevice.redirecting.fallback`).
Action = Literal["unchanged", "redirect", "to-cpu", "default", "override"]
#: What a tensor means to the code that made it: host memory, or an accelerator's.
Standing = Literal["host", "device"]


@runtime_checkable
class DeviceLike(Protocol):
    """Anything shaped like ``torch.device``: the policy never imports torch."""

    @property
    def type(self) -> str: ...

    @property
    def index(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A device as the policy reasons about it: a type and an optional index."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What, besides the request and the host, a decision depends on.

    ``cpu_override`` is the state the ``cpu:-1`` request toggles; ``keep_cpu`` is the
    option that keeps every explicit CPU request on the CPU.
    """

    cpu_override: bool = False
    keep_cpu: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes, and why.

    ``requested`` is the parsed request (``None`` for a factory called without a device);
    ``toggle_override`` asks the caller to flip :attr:`PolicyState.cpu_override`;
    ``standing`` is what the request stands for in the code's own terms
    (:func:`stands_for` of ``requested``), decided here with the rest so that the runtime
    and the transfers never ask the policy a second time.
    """

    device: DeviceSpec
    requested: DeviceSpec | None
    action: Action
    reason: str
    toggle_override: bool = False
    standing: Standing | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "standing", stands_for(self.requested))

    @property
    def moved(self) -> bool:
        """True when the device differs from what the code asked for (worth a log line)."""
        return self.action in ("redirect", "to-cpu")


_CPU = DeviceSpec("cpu", 0)
_MPS = DeviceSpec("mps", 0)
_CUDA_CURRENT = DeviceSpec("cuda", None)


def stands_for(requested: DeviceSpec | None) -> Standing | None:
    """What a request asks for in the code's own terms: the host or the device.

    ``"cpu"`` (``"cpu:-1"`` too) and no device at all (factories create on the CPU
    natively) ask for the host; ``"cuda"`` and ``"mps"`` for the device. Types the
    policy does not govern (``meta``...) give ``None``: they keep torch's own semantics.
    """
    if requested is None or requested.type == "cpu":
        return "host"
    if requested.type in ("cuda", "mps"):
        return "device"
    return None


def parse_request(request: object, extra_types: frozenset[str] = frozenset()) -> DeviceSpec | None:
    """Parse a device request the way ``torch.device`` would, plus ``"cpu:-1"``.

    ``None`` means no device was given. An ``int`` is a CUDA index, as PyTorch reads it.
    ``extra_types`` admits backend names registered at run time (a renamed PrivateUse1).
    Raises :class:`DeviceRequestError` (a ``RuntimeError``) for what torch rejects with a
    ``RuntimeError`` and :class:`DeviceRequestTypeError` (a ``TypeError``) for wrong types.
    """
    if request is None:
        return None
    if isinstance(request, str):
        return _parse_string(request, extra_types)
    if isinstance(request, bool):  # bool is an int, but torch.device(True) is a TypeError
        raise DeviceRequestTypeError(
            f"device request {request!r} is a bool; expected a device string, torch.device or int",
            request,
        )
    if isinstance(request, int):
        if request < 0:
            raise DeviceRequestError(
                f"Device index must not be negative (device request {request!r})", request
            )
        return DeviceSpec("cuda", request)
    if isinstance(request, DeviceLike):
        device_type, index = request.type, request.index
        if device_type in ("cpu", "mps") and index is None:
            index = 0
        return DeviceSpec(device_type, index)
    raise DeviceRequestTypeError(
        f"device request {request!r} of type {type(request).__name__} is not a device; "
        "expected a device string ('cuda', 'cuda:1', 'mps', 'cpu'), a torch.device or an int",
        request,
    )


def _parse_string(request: str, extra_types: frozenset[str]) -> DeviceSpec:
    if not request:
        raise DeviceRequestError("Device string must not be empty", request)
    match = _DEVICE_STRING.fullmatch(request)
    if match is None:
        raise DeviceRequestError(f"Invalid device string: {request!r}", request)
    device_type = match["type"]
    if device_type not in TORCH_DEVICE_TYPES and device_type not in extra_types:
        known = ", ".join((*_TORCH_DEVICE_ORDER, *sorted(extra_types)))
        raise DeviceRequestError(
            f"Expected one of {known} device type at start of device string: {request}",
            request,
        )
    raw_index = match["index"]
    index = None if raw_index is None else int(raw_index)
    if index == -1 and device_type != "cpu":
        # Only "cpu:-1" has a meaning (the override); torch rejects every other -1.
        raise DeviceRequestError(f"Invalid device string: {request!r}", request)
    if device_type in ("cpu", "mps") and index is None:
        index = 0
    return DeviceSpec(device_type, index)


def decide(
    request: object,
    host: Host,
    state: PolicyState = PolicyState(),  # frozen, so a shared default is safe
    extra_types: frozenset[str] = frozenset(),
) -> Decision:
    """Decide where ``request`` goes on ``host`` given ``state``.

    Pure: no torch, no I/O, no mutation. Raises the errors of :func:`parse_request`, and
    :class:`DeviceRequestError` for an MPS index other than 0 (on every host) or, on a
    CUDA host, a CUDA index past its device count (torch's "invalid device ordinal"; on
    an MPS or CPU-only host every ``cuda:n`` has a device to go to).
    """
    spec = parse_request(request, extra_types)
    accelerator = host.accelerator

    if spec is None:
        if accelerator is None:
            return Decision(_CPU, None, "default", "no accelerator on this host: CPU")
        target = _MPS if accelerator == "mps" else _CUDA_CURRENT
        return Decision(target, None, "default", f"factories default to {accelerator} on this host")

    if spec.type not in GOVERNED_TYPES:
        return Decision(spec, spec, "unchanged", f"{spec.type!r} is not governed by the policy")

    if spec.type == "cpu":
        if spec.index == -1:
            return Decision(
                _CPU,
                spec,
                "override",
                "'cpu:-1' requests a real CPU and toggles the CPU override",
                toggle_override=True,
            )
        if accelerator is None:
            return Decision(_CPU, spec, "unchanged", "CPU-only host")
        if state.cpu_override:
            return Decision(_CPU, spec, "unchanged", "CPU override is on ('cpu:-1')")
        if state.keep_cpu:
            return Decision(_CPU, spec, "unchanged", "keep_cpu: explicit CPU requests stay")
        target = _MPS if accelerator == "mps" else _CUDA_CURRENT
        return Decision(target, spec, "redirect", f"CPU request sent to the {accelerator} device")

    if spec.type == "mps":
        if spec.index not in (None, 0):
            raise DeviceRequestError(
                f"Invalid device index {spec.index} for 'mps': MPS has a single device "
                f"(device request {request!r})",
                request,
            )
        if accelerator == "mps":
            return Decision(_MPS, spec, "unchanged", "MPS host")
        if accelerator == "cuda":
            return Decision(_CUDA_CURRENT, spec, "redirect", "MPS request sent to CUDA")
        return Decision(_CPU, spec, "to-cpu", "MPS request on a CPU-only host: CPU")

    # spec.type == "cuda"
    if accelerator == "cuda":
        if spec.index is not None and spec.index >= host.cuda_device_count:
            raise DeviceRequestError(
                f"CUDA error: invalid device ordinal: device request {request!r} names index "
                f"{spec.index}, but this host has {host.cuda_device_count} CUDA device(s)",
                request,
            )
        return Decision(spec, spec, "unchanged", "CUDA host")
    if accelerator == "mps":
        return Decision(_MPS, spec, "redirect", "CUDA request sent to MPS (every cuda:n is mps:0)")
    return Decision(_CPU, spec, "to-cpu", "CUDA request on a CPU-only host: CPU")


# -- rules beside the table: pure, applied by the intercepts --------------------------------
def has_float64(host: Host) -> bool:
    """The dtype rule: MPS has no float64.

    On an MPS host a float64 asked of the device is float32 there (logged and reported
    as a ``dtype`` event); every other host keeps float64.
    """
    return host.kind != "mps"


def pins(host: Host, device_type: str | None) -> bool:
    """The pin-memory rule: whether ``pin_memory=True`` can mean anything.

    Pinned host memory exists only with CUDA, and only host (CPU) tensors are pinned
    (``None``: a factory whose device is not known yet). Elsewhere the request is dropped:
    an ordinary copy is what a pinned one would be.
    """
    return host.kind == "cuda" and device_type in (None, "cpu")


def draws_on_generator(generator_device: str, target_device: str) -> bool:
    """The generator rule: whether a call must draw on its generator's device first.

    A generator draws only on its own device. A call whose tensor (or, for a device-less
    factory, whose landing place) is elsewhere draws there — the numbers a native run
    draws — and the result moves to where the call's tensors live.
    """
    return generator_device != target_device


def is_inplace(func: object) -> bool:
    """Whether ``func`` writes its result into its first argument: torch's naming rule,
    a trailing underscore (``add_``, ``uniform_``), dunder methods (``__add__``) aside.

    The one definition: the CPU fallback writes the CPU result back into the original
    tensors, and the generator rule draws into the original tensor, for these."""
    name = getattr(func, "__name__", "")
    return isinstance(name, str) and name.endswith("_") and not name.endswith("__")


#: The collective backends that need CUDA; off CUDA hosts gloo stands in for them.
_CUDA_ONLY_BACKENDS = frozenset({"nccl"})


@dataclass(frozen=True, slots=True)
class BackendDecision:
    """What a requested ``torch.distributed`` backend resolves to on a host, and why.

    ``requested`` and ``backend`` are the strings as torch reads them (lower case);
    ``moved`` says whether they differ (worth a log line and a report entry).
    """

    requested: str
    backend: str
    reason: str

    @property
    def moved(self) -> bool:
        """True when the backend used is not the one the code asked for."""
        return self.backend != self.requested


def resolve_backend(requested: str, host: Host) -> BackendDecision:
    """The backend rule: which collective backend ``requested`` means on ``host``.

    NCCL runs only on CUDA devices, so off CUDA hosts ``"nccl"`` is ``"gloo"`` (which
    takes CPU tensors, and device tensors staged through CPU memory). A
    ``"cuda:nccl,cpu:gloo"`` string names one backend per device type: off CUDA hosts no
    tensor is a CUDA tensor, so its ``cuda`` part goes and each ``nccl`` becomes
    ``"gloo"``; when one backend is left for every device, it is named alone (``"gloo"``).
    Every other backend (``"gloo"``, ``"mpi"``, a plugin) and every CUDA host keep what
    was asked. Pure: no torch, no I/O; case-insensitive, as torch's ``Backend`` is.
    """
    text = requested.lower()
    if host.kind == "cuda":
        return BackendDecision(text, text, "CUDA host: NCCL runs")
    if ":" not in text:
        if text in _CUDA_ONLY_BACKENDS:
            return BackendDecision(text, "gloo", f"NCCL needs CUDA; {host.kind} host: gloo")
        return BackendDecision(text, text, f"{text!r} runs on a {host.kind} host")
    pairs: dict[str, str] = {}
    changed = False
    for part in text.split(","):
        device, sep, backend = part.partition(":")
        if not sep or not backend.strip() or ":" in backend:
            # Malformed: torch's own parser raises the error torch raises.
            return BackendDecision(text, text, "not a device:backend string")
        device, backend = device.strip(), backend.strip()
        if device == "cuda" or backend in _CUDA_ONLY_BACKENDS:
            changed = True
        if device == "cuda":
            continue  # no CUDA tensor exists off CUDA hosts
        pairs[device] = "gloo" if backend in _CUDA_ONLY_BACKENDS else backend
    if not changed:
        return BackendDecision(text, text, f"{text!r} runs on a {host.kind} host")
    if not pairs:
        pairs["cpu"] = "gloo"
    names = set(pairs.values())
    resolved = (
        names.pop()
        if len(names) == 1 and "cpu" in pairs
        else ",".join(f"{device}:{backend}" for device, backend in pairs.items())
    )
    return BackendDecision(text, resolved, f"NCCL needs CUDA; {host.kind} host: gloo")
