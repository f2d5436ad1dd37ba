"""The facades' calls in the migration report: ``torch.cuda.synchronize()`` is a line to port.

A call of ``torch.cuda.X`` (or ``torch.mps.X``) that the facade answers is a line the user
would change by hand (``torch.accelerator.synchronize()``...), as much as a ``"cuda"``
device argument is. Each facade's public functions, and its ``Event``/``Stream`` classes,
are wrapped when the facade is built (its ``Event``/``Stream`` classes count themselves:
:func:`count_call`) so that a call is counted at the caller's line, as a ``device-api``
event named after the module the user called.

Only calls made *directly* by code outside torch are counted: torch asking
``torch.cuda.is_available()`` inside ``DataLoader`` or ``torch.amp`` is no line of the
user's (the call that reached torch is reported where it was redirected, if it was).
Library code (Transformers...) is counted at the library's line, which the report lists
apart from the user's own files.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

from torchdevice.redirecting import callsite
from torchdevice.redirecting import runtime as runtime_module
from torchdevice.redirecting.compiling import compiler, is_tracing

__all__ = ["count_call", "reported_namespace"]

_internal = callsite.internal_cache


def _count(api: str, depth: int) -> None:
    """Count a call of ``api`` made by the frame ``depth`` frames above this one.

    On the path of every facade call (``torch.cuda.is_current_stream_capturing()`` runs
    once per token in Transformers' ``generate``): the compile check is read as
    :mod:`torchdevice.redirecting.compiling` inlines it, and the caller's code is looked up in the
    call-site cache before asking :func:`~torchdevice.redirecting.callsite.is_internal`.
    """
    if is_tracing() or compiler._is_compiling_flag:
        return
    rt = runtime_module._active
    if rt is None:
        return
    frame = sys._getframe(depth)
    internal = _internal.get(id(frame.f_code))
    if internal is None:
        internal = callsite.is_internal(frame.f_code)
    if not internal:
        rt.note_device_api(api, frame)


def _function(api: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        _count(api, 2)  # _count <- call <- the caller
        return func(*args, **kwargs)

    return call


def count_call(api: str) -> None:
    """Count a construction of a facade class (``torch.cuda.Event``), from its
    ``__init__``/``__new__``: classes are counted in place rather than wrapped, so every
    instance the facade makes stays an instance of the class the user sees."""
    _count(api, 3)  # _count <- count_call <- __init__ <- the caller


def reported_namespace(
    prefix: str, namespace: Mapping[str, Any], shared: dict[int, Any] | None = None
) -> dict[str, Any]:
    """``namespace`` (a facade module's) with its public functions counted.

    ``prefix`` is the module the user calls (``torch.cuda``): the report names
    ``torch.cuda.synchronize``. Submodules, private names and other objects are kept as
    they are. ``shared`` maps objects already wrapped (by id) to their wrapper, so that an
    object a module and its submodule both hold stays one object
    (``torch.cuda.memory.memory_allocated is torch.cuda.memory_allocated``, as natively).
    """
    shared = {} if shared is None else shared
    result = dict(namespace)
    for name, value in namespace.items():
        if name.startswith("_"):
            continue
        wrapper = shared.get(id(value))
        if wrapper is None:
            if not isinstance(value, types.FunctionType):
                continue
            wrapper = _function(f"{prefix}.{name}", value)
            shared[id(value)] = wrapper
        result[name] = wrapper
    return result
