"""The entry-points tier (``enable(intercept="entry-points")``): the mode's table, policy,
runtime, report and undo, reached through wrappers on the device-taking functions instead
of a ``TorchFunctionMode``.

Why a second way in: a function mode is called on every torch call, an attribute read such
as ``p.grad`` included, whether or not it takes a device, and PyTorch sets a floor under
that call (pytorch/pytorch#92701; its size: benchmarks/README.md). No torch mechanism lets an op
without a device skip a mode, so the only way under that floor is not to have one on the
stack. Here every call that cannot take a device is native, and the functions of the mode's
own table (:func:`torchdevice.redirecting.intercepts.build_table`: torch's
``_device_constructors()``, ``*_like``, ``Tensor.new_*``, ``Tensor.to/cuda/cpu/type/pin_memory``,
``_parse_to`` under ``Module.to``, and on accelerator hosts ``Tensor.numpy`` and the random ops that
take a generator) are wrapped at their public names. Each wrapper calls the mode's handler for its
function with the active :class:`~torchdevice.redirecting.runtime.Runtime`: one policy, one decision
cache, one report, one ledger.

``torch.device`` is a C type that cannot be subclassed; it is replaced by a stand-in class
(:class:`device`) whose instances are the genuine C objects: constructing one goes through
the mode's ``torch.device`` handler (``torch.device(0)`` reads as ``cuda:0`` as written,
``"cpu:-1"`` toggles the override), and ``isinstance``/``issubclass`` checks, ``==`` and
hashing of the class answer as for the C type (its metaclass delegates them to it at C
speed). Only ``type(d) is torch.device`` tells them apart (docs/tiers.md).

The handlers were written to run inside the mode's ``__torch_function__``, where torch has
taken the mode off the stack, so the torch calls they make themselves (``_move``'s
``tensor.to(device)``) are native. Here a thread-local flag plays that part: while a handler
runs on a thread, the wrappers on that thread call the original. And as the mode, the
wrappers leave alone what runs under ``torch._C.DisableTorchFunction()``: torchdevice's own
native sections (staging through host memory for ``torch.distributed``, rebuilding
unpickled tensors, the dispatcher net's allocations) rely on it.

The rest of what the mode's activation installs is installed as for the mode
(:data:`torchdevice.patches.INSTALL_ORDER`): ``load``, ``Generator``, ``Module.cuda``, the
facades, autocast, distributed, and the dispatcher net under all of it. What differs from
the mode is one table in docs/tiers.md.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import CodeType, FrameType, ModuleType
from typing import TYPE_CHECKING, Any, Final

import torch
from torch.utils._device import DeviceContext, _device_constructors

from torchdevice import ledger
from torchdevice.host import Host
from torchdevice.logs import logger
from torchdevice.redirecting import callsite
from torchdevice.redirecting import runtime as runtime_module
from torchdevice.redirecting.compiling import compiler, is_tracing
from torchdevice.redirecting.handlers import (
    DATA_FACTORIES,
    device_ctor,
    explicit_factory,
    factory,
    is_device_arg,
)
from torchdevice.redirecting.handlers import tensor_to as tensor_to_handler
from torchdevice.redirecting.intercepts import Handler, build_table
from torchdevice.redirecting.runtime import Runtime
from torchdevice.redirecting.standing import (
    HOST_CPU,
    MARK,
    REMEMBERED,
    mark_placed,
    moved,
    requested,
)

if TYPE_CHECKING:
    from torchdevice.redirecting.policy import Decision, Standing
    from torchdevice.reporting import EventKind

__all__ = [
    "GROUP",
    "LEFT_OUT",
    "REAL_DEVICE",
    "device",
    "install",
    "installed",
    "spots",
    "targets",
    "warn_without_native_fallback",
]

#: Ledger group of the wrappers and of the ``torch.device`` stand-in.
GROUP: Final = "entry-point wrappers"

#: The C type ``torch.device``, bound at import (``torch.device`` is the stand-in while this
#: tier is on).
REAL_DEVICE: Final = torch.device

#: ``Tensor.device``'s C getter: its key in the table on accelerator hosts
#: (:func:`torchdevice.redirecting.handlers.tensor_device`; the mode sees the property as a
#: function).
_DEVICE_GET: Final = torch._C.TensorBase.device.__get__

#: Functions of the mode's table that this tier does not wrap, and why.
LEFT_OUT: Mapping[str, str] = {
    "torch.nested.nested_tensor": "a Python function over C functions that torchdevice."
    "patches wraps already, for the mode too (it never reaches a function mode)",
}

#: True under ``torch._C.DisableTorchFunction()``: what the mode does not see either.
_all_disabled = torch._C._is_torch_function_all_disabled

#: How many function modes are on this thread's stack, and the one at a position.
_stack_len = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at

#: The functions torch's ``DeviceContext`` gives a device to (``with torch.device(...)``,
#: ``torch.set_default_device``): a set, as ``torch.utils._device`` keeps it.
_CONTEXT_CONSTRUCTORS: Final = frozenset(_device_constructors())


def _fills_here() -> bool:
    """Whether a ``DeviceContext`` on the stack is the wrapper's to read: not under
    ``DisableTorchFunction`` (no mode sees the call natively either) nor while dynamo
    traces (it runs the context mode itself, as for the function mode)."""
    return not _all_disabled() and not is_tracing()


def _context_device(kwargs: dict[str, Any]) -> None:
    """Give a constructor called without a device the device of the innermost
    ``DeviceContext`` on this thread's mode stack, as that mode would, before the wrapper
    places the call.

    Why: ``with torch.device("cuda"):`` pushes torch's ``DeviceContext``, a function mode
    that fills in ``device=`` as the call leaves Python, after the wrapper has passed it
    on: natively on this host that device does not exist ("PyTorch is not linked with
    support for cuda devices"). Under the function mode the context fills it in first and
    the mode places it; here the wrapper reads it first, so the request is placed as the
    mode places it (the same device, standing and report). Only called with a mode on the
    stack and where :func:`_fills_here`.
    """
    for position in range(_stack_len() - 1, -1, -1):
        mode = _stack_at(position)
        if isinstance(mode, DeviceContext):
            kwargs["device"] = mode.device
            return


#: The threads (by ``threading.get_ident()``) on which a handler is running: their torch
#: calls go straight through. A set rather than a ``threading.local``: the hot path reads
#: one global and, while no handler runs anywhere, finds it empty.
_busy: set[int] = set()
_get_ident = threading.get_ident


def _handled(
    rt: Runtime,
    original: Callable[..., Any],
    handler: Handler,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The handler's full path: as the mode would call it, the wrappers off on this thread
    while it runs. Under dynamo the handler is traced as the mode's is (no thread-local
    state in a graph)."""
    if is_tracing():
        return handler(rt, original, args, kwargs)
    thread = _get_ident()
    if thread in _busy or _all_disabled():
        return original(*args, **kwargs)
    _busy.add(thread)
    try:
        return handler(rt, original, args, kwargs)
    finally:
        _busy.discard(thread)


def _wrapper(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """``original`` sending its calls through ``handler`` while an activation is on (a
    constructor without a device given the one of a ``DeviceContext``: :func:`_context_device`)."""
    fills = original in _CONTEXT_CONSTRUCTORS

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return original(*args, **kwargs)
        if fills and kwargs.get("device") is None and _stack_len() and _fills_here():
            _context_device(kwargs)
        return _handled(rt, original, handler, args, kwargs)

    functools.update_wrapper(wrapper, original)  # name, docstring; __wrapped__ = original
    return wrapper


def _counted(
    rt: Runtime,
    frame: FrameType,
    original: Callable[..., Any],
    decision: Decision,
    kind: EventKind | None,
) -> Standing | None:
    """A placed call's row and what its result stands for, as ``Runtime.place`` does, for
    a request other than a device object: one count at the user's line (``frame``, the
    wrapper's caller, when that is user code).

    A device object is reported where it was made, so its uses get no row: the wrappers
    read its standing with :func:`~torchdevice.redirecting.standing.requested` without
    calling here, and without ``sys._getframe``, which builds the caller's frame object
    (``generate`` places every mask and position it builds with a device read off a
    tensor, about eight calls a token)."""
    if kind is not None:
        caller: FrameType | None = frame
        if callsite.internal_cache.get(id(frame.f_code)) is not False:
            caller = callsite.first_user(frame)
        rt.recorder.hit(caller, original, decision, kind)
    return decision.standing


def _torch_cpu() -> bool:
    """Whether the caller of the wrapper that asks is torch's own code asking for the CPU
    by name: it stays there, unreported, as ``Runtime.place`` keeps it
    (:func:`~torchdevice.redirecting.callsite.torch_names_cpu`)."""
    return callsite.torch_names_cpu(sys._getframe(2))


def _factory_wrapper(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """A factory (``factory``/``explicit_factory`` handler) with its common calls inlined.

    A device-less call is native where device-less factories stay put (a CPU-only host),
    and placed by ``Runtime.place`` (the request ``None``) where they go to the
    accelerator, unless a rule of the handler's applies (``out=``, a generator, pinning,
    float64 on MPS): then the handler places it. A call whose ``device=`` has
    a cached decision is placed here: the device swapped in, the call site counted at the
    caller's frame (one frame read when the caller is user code), the result's storage
    marked for the copy semantics (:mod:`torchdevice.redirecting.standing`), as the handler does.
    Everything else (a first request, dynamo, a native section) takes the handler.
    """
    places_default = handler is factory
    fills = original in _CONTEXT_CONSTRUCTORS

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return original(*args, **kwargs)
        request = kwargs.get("device")
        if request is None and fills and _stack_len() and _fills_here():
            _context_device(kwargs)  # under ``with torch.device(...)``
            request = kwargs.get("device")
        if request is None:
            default = rt.default_device
            if default is None or not places_default:
                # ``*_like``/``new_*`` stay on their input's device, which on MPS still
                # takes the dtype rule: the handler's (the mode's) path
                if not kwargs.get("pin_memory") and (default is None or rt.float64_device is None):
                    return original(*args, **kwargs)
            elif not (
                rt.float64_device is not None
                or "out" in kwargs
                or "generator" in kwargs
                or "pin_memory" in kwargs
                or is_tracing()  # before the thread-local read: dynamo traces this
                or compiler._is_compiling_flag
                or (_busy and _get_ident() in _busy)
                or _all_disabled()
            ):
                _, kwargs["device"], wanted = rt.place(None, original)  # where they land
                return mark_placed(original(*args, **kwargs), wanted)
        elif (  # Runtime.runs_as_made, inlined (dynamo takes the handler's path)
            type(request) is REAL_DEVICE
            and request == HOST_CPU
            and not is_tracing()
            and rt.default_device is None
            and id(request) not in REMEMBERED
            and "pin_memory" not in kwargs
        ):
            return original(*args, **kwargs)
        elif not (
            rt.float64_device is not None
            or "pin_memory" in kwargs
            or is_tracing()
            or compiler._is_compiling_flag
            or (_busy and _get_ident() in _busy)
            or _all_disabled()
        ):
            kind_of = type(request)
            try:
                resolved = rt.decisions.get((kind_of, request))
            except TypeError:  # unhashable: the handler lets the policy raise
                resolved = None
            if resolved is not None:
                decision, placed, kind = resolved
                if kind is not None and decision.standing == "host" and _torch_cpu():
                    return original(*args, **kwargs)  # torch's own CPU request: stays
                kwargs["device"] = placed
                result = original(*args, **kwargs)
                wanted = (
                    requested(request, decision.standing)
                    if kind_of is REAL_DEVICE
                    else _counted(rt, sys._getframe(1), original, decision, kind)
                )
                # mark_placed's own test first: most results need no mark
                if wanted is not None and result.is_cpu is (wanted != "host"):
                    mark_placed(result, wanted)
                return result
        return _handled(rt, original, handler, args, kwargs)

    functools.update_wrapper(wrapper, original)
    return wrapper


#: The request types ``Tensor.to``'s inlined path takes (``bool`` is not an ``int`` here).
_DEVICE_ARGS = frozenset({str, REAL_DEVICE, int})


def _to_wrapper(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """``Tensor.to``: a call that names no device (``.to(dtype)``, ``.to(other)``) is
    native where no dtype rule applies (every host but MPS). A device given first or as
    ``device=`` (``x.to(other.device)`` and ``x.to(device=..., dtype=...)`` run several times
    per token in ``generate``) with a cached decision is placed here as the handler places
    it: the device swapped in, the call counted at the caller's line (not for a device
    object), the copy semantics (:func:`~torchdevice.redirecting.standing.moved`). The CPU
    read off a CPU tensor (``Runtime.runs_as_made``) needs no decision: torch's call, and
    a copy only of a tensor whose storage is marked as standing for the device. The rest (a
    first request, the dtype rule, dynamo, a native section) takes the handler."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return original(*args, **kwargs)
        if "device" in kwargs:
            request = kwargs["device"]
            positional = False
        elif len(args) > 1 and type(args[1]) in _DEVICE_ARGS:
            request = args[1]
            positional = True
        else:  # .to(dtype), .to(tensor), .to(): no device (a str or int subclass: the handler)
            if rt.float64_device is None and (len(args) < 2 or not is_device_arg(args[1])):
                return original(*args, **kwargs)
            return _handled(rt, original, handler, args, kwargs)
        kind_of = type(request)
        if (  # Runtime.runs_as_made, inlined: the call is torch's, the copy rule ours
            kind_of is REAL_DEVICE
            and request == HOST_CPU
            and not is_tracing()  # dynamo takes the handler's path
            and rt.default_device is None
            and id(request) not in REMEMBERED
        ):
            tensor = args[0]
            result = original(*args, **kwargs)
            if result is not tensor or compiler._is_compiling_flag:
                return result  # a fresh CPU tensor (it stands for the host), or torch's
            try:  # standing_of, inlined: most tensors carry no mark
                marked = getattr(tensor.untyped_storage(), MARK, None)
            except (RuntimeError, NotImplementedError):  # sparse, nested: no plain storage
                return result
            if marked is None or marked == "host" or _all_disabled() or _get_ident() in _busy:
                return result  # where it stands, or a native section: the tensor itself
            return moved(tensor, result, "host")  # stands for the device: a copy
        if (
            request is None
            or rt.float64_device is not None
            or is_tracing()
            or compiler._is_compiling_flag
            or (_busy and _get_ident() in _busy)
            or _all_disabled()
        ):
            return _handled(rt, original, handler, args, kwargs)
        try:
            resolved = rt.decisions.get((kind_of, request))
        except TypeError:  # unhashable: the handler lets the policy raise
            resolved = None
        if resolved is None:  # a first request: the policy, through the handler
            return _handled(rt, original, handler, args, kwargs)
        decision, placed, kind = resolved
        if kind is not None and decision.standing == "host" and _torch_cpu():
            return original(*args, **kwargs)  # torch's own CPU request: stays
        tensor = args[0]
        if positional:
            result = original(tensor, placed, *args[2:], **kwargs)
        else:
            kwargs["device"] = placed
            result = original(*args, **kwargs)
        wanted = (
            requested(request, decision.standing)
            if kind_of is REAL_DEVICE
            else _counted(rt, sys._getframe(1), original, decision, kind)
        )
        return result if wanted is None else moved(tensor, result, wanted)

    functools.update_wrapper(wrapper, original)
    return wrapper


def _make(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """The wrapper for ``original``: the inlined factory path where it applies."""
    if handler in (factory, explicit_factory) and original not in DATA_FACTORIES:
        return _factory_wrapper(original, handler)
    if handler is tensor_to_handler:
        return _to_wrapper(original, handler)
    return _wrapper(original, handler)


class _DeviceClass(type):
    """The metaclass of the ``torch.device`` stand-in: the C type in every check but ``is``.

    ``isinstance``/``issubclass`` are the C type's own bound methods (not descriptors, so
    Python calls them as they are: C speed); ``==`` and ``hash`` make the stand-in and the
    C type one key of a set or dict, so tables built while either was ``torch.device``
    (dynamo's constant types, a ``singledispatch`` registry) find both.
    """

    __instancecheck__ = REAL_DEVICE.__instancecheck__
    __subclasscheck__ = REAL_DEVICE.__subclasscheck__

    def __eq__(cls, other: object) -> bool:
        return other is cls or other is REAL_DEVICE

    def __hash__(cls) -> int:
        return hash(REAL_DEVICE)

    def __getattr__(cls, name: str) -> Any:
        return getattr(REAL_DEVICE, name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return REAL_DEVICE(*args, **kwargs)
        if (
            len(args) == 1
            and not kwargs
            and type(args[0]) is REAL_DEVICE
            and not is_tracing()  # before the cache read: dynamo traces this
            and (REAL_DEVICE, args[0]) in rt.decisions
        ):
            # A device object whose decision is cached: the handler's answer is the
            # object itself, and it reports nothing (torch copies a batch's device in
            # every DataLoader worker: storage._new_shared).
            return args[0]
        return _handled(rt, REAL_DEVICE, device_ctor, args, kwargs)


class device(metaclass=_DeviceClass):
    """``torch.device`` while the entry-points tier is on: calls return genuine
    ``torch.device`` objects, placed by the policy (``torch.device(0)`` is ``cuda:0`` as
    written; ``"cpu:-1"`` toggles the CPU override)."""


device.__module__ = "torch"
device.__qualname__ = device.__name__ = "device"
device.__doc__ = REAL_DEVICE.__doc__


def _doors() -> tuple[CodeType, ...]:
    """The code through which torch calls reach the handlers in this tier: the wrappers'
    (its doors: see :func:`torchdevice.redirecting.callsite.add_door`)."""
    dummy: Handler = factory
    wrappers = (make(len, dummy) for make in (_wrapper, _factory_wrapper, _to_wrapper))
    return (*(wrapper.__code__ for wrapper in wrappers), _DeviceClass.__call__.__code__)


for _code in _doors():
    callsite.add_door(_code)


def _owners() -> Iterator[ModuleType | type]:
    """Where the table's functions are found by their public names."""
    yield torch
    yield torch.fft
    yield torch.linalg
    yield torch.special
    yield torch.nn.functional
    yield torch.nn.init
    yield torch.Tensor
    yield torch._C.TensorBase
    yield torch._C._nn
    yield torch._C._linalg  # type: ignore[attr-defined]
    yield torch._C._special  # type: ignore[attr-defined]


def targets(table: Mapping[Callable[..., Any], Handler]) -> list[tuple[Any, str, Handler]]:
    """``(owner, name, handler)`` for each function of ``table`` at each public name.

    ``torch.Tensor`` methods are set on ``torch.Tensor`` (shadowing ``TensorBase``'s), so
    undoing removes them again. ``torch.device`` is the stand-in's (:class:`device`); a
    function found nowhere is left out (:data:`LEFT_OUT`).
    """
    found: list[tuple[Any, str, Handler]] = []
    seen: set[tuple[int, str]] = set()
    for owner in _owners():
        target_owner = torch.Tensor if owner is torch._C.TensorBase else owner
        for name, value in list(vars(owner).items()):
            try:
                handler = table.get(value)
            except TypeError:  # unhashable attribute
                continue
            if handler is None or value is REAL_DEVICE:
                continue
            key = (id(target_owner), name)
            if key not in seen:
                seen.add(key)
                found.append((target_owner, name, handler))
    getter = table.get(_DEVICE_GET)
    if getter is not None:  # the MPS host's Tensor.device (handlers.tensor_device)
        found.append((torch.Tensor, "device", getter))
    return found


def _device_property(handler: Handler) -> property:
    """``Tensor.device`` through ``handler``, as the mode sees the property (set on
    ``torch.Tensor``, shadowing ``TensorBase``'s getter, while the tier is on)."""
    get = _DEVICE_GET

    def device(self: torch.Tensor) -> torch.device:
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return get(self)
        return _handled(rt, get, handler, (self,), {})  # type: ignore[no-any-return]

    return property(device, doc=torch._C.TensorBase.device.__doc__)


#: The table the wrappers in place serve (the runtime's: it follows the host).
_served: list[Mapping[Callable[..., Any], Handler]] = []


def install(table: Mapping[Callable[..., Any], Handler]) -> None:
    """Put a wrapper on every function of ``table`` at its public names, and the
    stand-in at ``torch.device`` (idempotent; wrappers for another table are replaced).

    The wrappers read the active runtime at each call; ``disable()`` takes them out
    through the ledger, newest first, after which torch's attributes are its own again.
    """
    if installed():
        if _served and _served[0] is table:
            return
        ledger.undo(GROUP)
    builtins = _torchscript_builtins()  # built from torch's own functions, before any wrapper
    replacements: list[tuple[Any, str, Any]] = [
        (
            owner,
            name,
            _device_property(handler)
            if owner is torch.Tensor and name == "device"
            else _make(getattr(owner, name), handler),
        )
        for owner, name, handler in targets(table)
    ]
    replacements.append((torch, "device", device))
    wrapped: list[int] = []
    for owner, name, wrapper in replacements:
        original = getattr(owner, name)
        ledger.set_attr(GROUP, owner, name, wrapper)
        op = builtins.get(id(original))
        if op is not None:  # TorchScript compiles a call of the wrapper as the op itself
            builtins[id(wrapper)] = op
            wrapped.append(id(wrapper))
    ledger.hook(GROUP, "TorchScript's builtins", lambda: _forget(builtins, wrapped))
    _served[:] = [table]


def _torchscript_builtins() -> dict[int, str]:
    """TorchScript's table of builtin functions (id -> ``aten::`` op), built now if it was
    not: built later, while the wrappers are in place, it would hold them instead of
    torch's functions, for good."""
    from torch.jit import _builtins  # noqa: PLC0415 - torch has imported it already

    table: dict[int, str] = _builtins._get_builtin_table()  # type: ignore[no-untyped-call]
    return table


def _forget(builtins: dict[int, str], wrapped: list[int]) -> None:
    """Take the wrappers out of TorchScript's builtins (their ids may be reused)."""
    for key in wrapped:
        builtins.pop(key, None)


def installed() -> bool:
    """Whether the wrappers are in place."""
    return ledger.has(GROUP)


#: What switches PyTorch's MPS fallback on (``c10::utils::check_env``'s true words).
_FALLBACK_ON: Final = frozenset({"1", "on", "yes", "true", "y"})
_warned_fallback: list[bool] = []


def warn_without_native_fallback(runtime: Runtime) -> None:
    """Say once, on an MPS host, that this tier's CPU fallback is PyTorch's own and is off.

    The tier sees no op that takes no device, so an op MPS lacks falls back only through
    ``PYTORCH_ENABLE_MPS_FALLBACK=1``, which PyTorch reads at its import (torchdevice sets
    it on macOS when it is imported first, as the launcher and ``ACTIVATE_TORCH_DEVICE=1``
    import it). Without it such an op raises; the mode would have rerun it on the CPU.
    """
    if runtime.host.kind != "mps" or not runtime.settings.fallback or _warned_fallback:
        return
    if os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "").strip().lower() in _FALLBACK_ON:
        return
    _warned_fallback.append(True)
    logger.warning(
        "torchdevice: the entry-points tier reruns ops MPS lacks on the CPU only through "
        "PyTorch's own fallback, and PYTORCH_ENABLE_MPS_FALLBACK is not set: such ops will "
        "raise. Start with `python -m torchdevice` (or import torchdevice before torch), set "
        "PYTORCH_ENABLE_MPS_FALLBACK=1 before torch is imported, or use intercept='mode'."
    )


def spots() -> tuple[ledger.Spot, ...]:
    """Every attribute :func:`install` may change on some host (an accelerator host wraps
    more), for the pristine check."""
    found = {
        (id(owner), name): ledger.attr_spot(owner, name)
        for host in (Host.cpu(), Host.mps())
        for owner, name, _ in targets(build_table(host))
    }
    return (*found.values(), ledger.attr_spot(torch, "device"))
