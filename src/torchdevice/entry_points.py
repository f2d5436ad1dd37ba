"""The entry-points tier: wrappers on exactly the functions that take a device, no mode.

An experiment, left out of ``enable()``'s options (docs/limitations.md says why: it
cannot see ``torch.device(...)``, so ``torch.device(0)``, ``"cpu:-1"`` objects and their
report rows behave as natively). :func:`enable` switches it on for measurement
(``benchmarks/workloads.py``) and tests.

The default tier pushes a ``TorchFunctionMode``: every torch call, an attribute read such
as ``p.grad`` included, then goes through a Python handler (~1.3 µs on the machine the
benchmarks were written on), whether or not it takes a device; PyTorch sets that floor
(pytorch/pytorch#92701). This tier leaves every
call that cannot take a device native and wraps, at their public names, the functions of
the mode's own table (:func:`torchdevice.intercepts.build_table`, built from torch's
``_device_constructors()``, the ``*_like`` and ``Tensor.new_*`` factories, the ``Tensor``
and ``Module`` transfer methods and ``_parse_to``). Each wrapper calls the mode's handler
for its function with the same runtime: one policy, one decision cache, one report, two
ways in. The wrappers of :mod:`torchdevice.patches` (``load``, ``Generator``,
``Module.cuda``...), the facades, autocast and distributed are installed as for the mode,
and the dispatcher net (:mod:`torchdevice.net`) catches what no wrapper sees (TorchScript,
names bound before ``enable()``).

The handlers were written to run inside the mode's ``__torch_function__``, where torch
has switched the mode off, so the torch calls they make themselves (``_move``'s
``tensor.to(device)``) are native. Here a thread-local flag plays that part: while a
handler runs on a thread, the wrappers on that thread call the original directly.

What this tier does not do (docs/limitations.md lists each difference from the mode):
``torch.device("cpu:-1")`` (``torch.device`` is a C type that cannot be replaced), the
report row of a ``torch.device(...)`` construction, the CPU fallback of ops the accelerator
cannot run (which the mode catches on every call), and calls through names bound before
``enable()`` other than allocations (``from torch import zeros`` with ``device="cpu"``).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType, ModuleType
from typing import Any, Final

import torch

from torchdevice import callsite, ledger
from torchdevice import runtime as runtime_module
from torchdevice.compiling import _compiler, is_tracing
from torchdevice.intercepts import Handler, explicit_factory, factory, tensor_to
from torchdevice.runtime import Runtime
from torchdevice.transfers import mark_placed, requested

__all__ = ["GROUP", "LEFT_OUT", "enable", "install", "installed", "targets"]

#: Ledger group of the wrappers.
GROUP: Final = "entry-point wrappers"

#: Functions of the mode's table that this tier cannot wrap, and why.
LEFT_OUT: Mapping[str, str] = {
    "torch.device": "a C type that cannot be subclassed or replaced without breaking "
    "isinstance/type checks: device objects are placed where they are used (.to(), "
    "factories), not where they are made, and torch.device('cpu:-1') raises as natively",
    "torch.nested.nested_tensor": "a Python function over C functions that torchdevice."
    "patches wraps already (for the mode too: it never reaches a function mode)",
}

_is_tracing = is_tracing


class _Handling(threading.local):
    """Per thread: whether a handler is running (its own torch calls go straight through)."""

    busy = False


_handling = _Handling()


def _wrapper(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """``original`` sending its calls through ``handler`` while an activation is on.

    The hot path outside a handler: one global read, one thread-local read, the compile
    check, then the handler (which caches the decision per device argument in the
    runtime and counts the call site).
    """

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return original(*args, **kwargs)
        if _is_tracing():  # dynamo: no thread-local state in the graph
            return handler(rt, original, args, kwargs)
        if _handling.busy:
            return original(*args, **kwargs)
        _handling.busy = True
        try:
            return handler(rt, original, args, kwargs)
        finally:
            _handling.busy = False

    functools.update_wrapper(wrapper, original)  # name, docstring; __wrapped__ = original
    return wrapper


#: Factories whose data argument has copy rules of its own: the handler's full path.
_DATA_FACTORIES = frozenset({torch.tensor, torch.as_tensor, torch.asarray})


def _factory_wrapper(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """A factory (``factory``/``explicit_factory`` handler) with its common call inlined.

    A device-less call on a host whose factories stay put (a CPU-only host) is native but
    for the wrapper's call. A call with a string or int ``device=`` whose decision is cached
    is placed here: the device swapped in, the call site counted (``Recorder.hit`` at the
    caller's frame: one frame read when the caller is user code) and the result's storage
    marked for the copy semantics (:mod:`torchdevice.transfers`), as the mode's ``_apply``
    does. Everything else (the float64 and pinning rules, device objects, a first
    request, dynamo) takes the handler.
    """

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt: Runtime | None = runtime_module._active
        if rt is None:
            return original(*args, **kwargs)
        request = kwargs.get("device")
        if request is None:
            if rt.default_device is None and not kwargs.get("pin_memory"):
                return original(*args, **kwargs)
        elif not (
            rt.float64_device is not None or _is_tracing() or _compiler._is_compiling_flag
            or _handling.busy or "pin_memory" in kwargs
        ):  # fmt: skip
            try:
                resolved = rt.decisions.get((type(request), request))
            except TypeError:  # unhashable: the handler lets the policy raise
                resolved = None
            if resolved is not None:
                decision, device, kind, wanted = resolved
                kwargs["device"] = device
                result = original(*args, **kwargs)
                if type(request) is torch.device:  # as the mode's _apply: no row for a
                    # device object (the mode reports it where it is made; not seen here)
                    return mark_placed(result, requested(request, wanted))
                if kind is not None:
                    frame: FrameType | None = sys._getframe(1)
                    if callsite.internal_cache.get(id(frame.f_code)) is not False:  # type: ignore[union-attr]
                        frame = callsite.first_user(frame)
                    rt.recorder.hit(frame, original, decision, kind)
                return mark_placed(result, wanted)
        return _handled(rt, original, handler, args, kwargs)

    functools.update_wrapper(wrapper, original)
    return wrapper


def _handled(
    rt: Runtime, original: Callable[..., Any], handler: Handler,
    args: tuple[Any, ...], kwargs: dict[str, Any],
) -> Any:  # fmt: skip
    """The handler's full path, with the wrappers off on this thread while it runs."""
    if _is_tracing():
        return handler(rt, original, args, kwargs)
    if _handling.busy:
        return original(*args, **kwargs)
    _handling.busy = True
    try:
        return handler(rt, original, args, kwargs)
    finally:
        _handling.busy = False


def _is_device_arg(value: object) -> bool:
    """Whether a positional argument of ``.to()`` is a device (not a dtype or tensor)."""
    return isinstance(value, (str, torch.device, int)) and not isinstance(value, bool)


def _to_wrapper(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """``Tensor.to``: a call that names no device (``.to(dtype)``, ``.to(other)``) is
    native where no dtype rule applies (every host but MPS); the rest takes the handler."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rt: Runtime | None = runtime_module._active
        if (
            rt is None
            or (rt.float64_device is None and "device" not in kwargs
                and (len(args) < 2 or not _is_device_arg(args[1])))
        ):  # fmt: skip
            return original(*args, **kwargs)
        return _handled(rt, original, handler, args, kwargs)

    functools.update_wrapper(wrapper, original)
    return wrapper


def _make(original: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    """The wrapper for ``original``: the inlined factory path where it applies."""
    if handler in (factory, explicit_factory) and original not in _DATA_FACTORIES:
        return _factory_wrapper(original, handler)
    if handler is tensor_to:
        return _to_wrapper(original, handler)
    return _wrapper(original, handler)


def _owners() -> Iterator[ModuleType | type]:
    """Where the table's functions are found by their public names."""
    yield torch
    yield torch.fft
    yield torch.Tensor
    yield torch._C.TensorBase
    yield torch._C._nn


def targets(table: Mapping[Callable[..., Any], Handler]) -> list[tuple[Any, str, Handler]]:
    """``(owner, name, handler)`` for each function of ``table`` at each public name.

    ``torch.Tensor`` methods are set on ``torch.Tensor`` (shadowing ``TensorBase``'s), so
    undoing removes them again. A function found nowhere is left out (:data:`LEFT_OUT`).
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
            if handler is None or value is torch.device:
                continue
            key = (id(target_owner), name)
            if key not in seen:
                seen.add(key)
                found.append((target_owner, name, handler))
    return found


def _rebuild_tensor(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch._utils._rebuild_tensor`` with the wrappers off: an unpickled tensor goes
    where its storage is (its ``torch.empty(device=storage.device)`` is torch's own)."""

    @functools.wraps(original)
    def rebuild(*args: Any, **kwargs: Any) -> Any:
        was, _handling.busy = _handling.busy, True
        try:
            return original(*args, **kwargs)
        finally:
            _handling.busy = was

    return rebuild


def install(table: Mapping[Callable[..., Any], Handler]) -> None:
    """Put a wrapper on every function of ``table`` at its public names (idempotent).

    The wrappers read the active runtime at each call; ``disable()`` takes them out
    through the ledger, newest first, after which torch's attributes are its own again.
    """
    if installed():
        return
    for owner, name, handler in targets(table):
        ledger.set_attr(GROUP, owner, name, _make(getattr(owner, name), handler))
    ledger.set_attr(GROUP, torch._utils, "_rebuild_tensor",
                    _rebuild_tensor(torch._utils._rebuild_tensor))  # fmt: skip


def enable(**options: Any) -> None:
    """``torchdevice.enable(**options)`` through this tier instead of the function mode.

    ``torchdevice.disable()`` undoes it; a plain ``torchdevice.enable()`` switches back to
    the mode. Child processes are redirected by the mode (the environment carries no tier).
    """
    from torchdevice import activation  # noqa: PLC0415 - activation imports this module

    with activation._lock:
        activation._next_tier = "entry-points"
        activation.enable(**options)


def installed() -> bool:
    """Whether the wrappers are in place."""
    return ledger.has(GROUP)
