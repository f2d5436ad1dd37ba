"""The ``TorchFunctionMode`` that sends every device argument through the policy.

Invariants (enforced by :func:`push` and :func:`remove`):

* at most one :class:`DeviceMode` per activation sits on a thread's function-mode stack;
* the mode holds no state that changes per call: the table and the runtime are replaced
  whole on reconfiguration, so ``torch.compile`` guards on them see one value per
  activation.

The fast path is one dict lookup: a function missing from the table is called as is. On
hosts with an accelerator it also sits in a ``try`` (free until something raises) whose
``except`` hands device-capability errors to :mod:`torchdevice.redirecting.fallback`.

The table is the runtime's (:attr:`Runtime.table <torchdevice.redirecting.runtime.Runtime.table>`,
built here once per runtime); the mode holds it for the fast path while it is live.
Dynamo traces ``__torch_function__`` into every graph compiled under the mode. There the
table is looked up by :func:`~torchdevice.redirecting.compiling.traced_slot`, a constant function,
so that a graph guards on the runtime, not on every key of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack, _pop_mode

from torchdevice.redirecting import callsite
from torchdevice.redirecting.compiling import is_tracing, traced_slot
from torchdevice.redirecting.fallback import (
    CAPABILITY_ERROR_TYPES,
    Fallback,
    Unsupported,
    is_capability_error,
)
from torchdevice.redirecting.intercepts import Handler, build_table
from torchdevice.redirecting.runtime import Runtime

__all__ = ["DeviceMode", "is_on_stack", "push", "remove", "remove_all"]

_EMPTY: Mapping[Callable[..., Any], Handler] = {}


class DeviceMode(TorchFunctionMode):
    """Rewrites the device of every call in its table; passes everything else through."""

    def __init__(self, runtime: Runtime, fallback: Fallback | None = None) -> None:
        super().__init__()
        self.runtime = runtime
        #: The runtime's table while the mode is live; empty once retired.
        self.table: Mapping[Callable[..., Any], Handler] = _EMPTY
        self.fallback: Fallback | None = None
        #: False once retired: compiled graphs guard on it (see ``traced_slot``).
        self.live = True
        self.serve(runtime, fallback)

    def serve(self, runtime: Runtime, fallback: Fallback | None) -> None:
        """Redirect for ``runtime`` (a new activation reuses the mode) with its table,
        built for its host on the first use of the runtime."""
        if not runtime.table:
            runtime.use_table(build_table(runtime.host))
        self.runtime = runtime
        self.table = runtime.table
        self.fallback = fallback

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if is_tracing():  # dynamo: no guard per table key (see traced_slot)
            runtime = self.runtime
            slot = traced_slot(runtime.serial, self.live, func)
            handler = None if slot < 0 else runtime.handlers[slot]
        else:
            handler = self.table.get(func)
        fallback = self.fallback
        if fallback is None:  # no accelerator: nothing to fall back from
            if handler is None:
                return func(*args, **kwargs) if kwargs else func(*args)
            return handler(self.runtime, func, args, kwargs or {})
        if kwargs is None:
            kwargs = {}
        # Straight to the CPU when the call fell back before; not for table functions,
        # whose handler must rewrite the call first (device, float64 rule), and which
        # fall back from the error path below with the rewritten arguments.
        if handler is None and func in fallback.functions and fallback.cached(func, args, kwargs):
            try:
                return fallback.rerun(func, args, kwargs)
            except Unsupported:
                pass
        try:
            if handler is None:
                return func(*args, **kwargs)
            return handler(self.runtime, func, args, kwargs)
        except CAPABILITY_ERROR_TYPES as error:
            if is_capability_error(error):
                try:
                    return fallback.rerun(func, args, kwargs, error)
                except Unsupported:
                    pass
            raise

    def retire(self) -> None:
        """Make the mode a pass-through in every thread where it is still stacked.

        Threads keep their own mode stacks; ``disable()`` can only pop the calling
        thread's, so the others' copies go inert instead. The fallback's cache is emptied:
        it belongs to this activation, not to the next.
        """
        self.table = _EMPTY
        self.live = False
        if self.fallback is not None:
            self.fallback.reset()
        self.fallback = None


# Torch enters torchdevice here (the mode's door): the frame above this one made the call.
callsite.set_door(DeviceMode.__torch_function__.__code__)


def is_on_stack(mode: DeviceMode) -> bool:
    """Whether ``mode`` is on the calling thread's function-mode stack (by identity)."""
    stack = _get_current_function_mode_stack()  # type: ignore[no-untyped-call]
    return any(held is mode for held in stack)


def push(mode: DeviceMode) -> bool:
    """Push ``mode`` on the calling thread's stack unless it is there already."""
    if is_on_stack(mode):
        return False
    mode.__enter__()  # type: ignore[no-untyped-call]
    return True


def remove(mode: DeviceMode) -> bool:
    """Take ``mode`` off the calling thread's stack wherever it sits.

    Modes entered after it (a ``with`` block still open) are put back in their order.
    """
    if not is_on_stack(mode):
        return False
    above = []
    while True:
        top = _pop_mode()  # type: ignore[no-untyped-call]
        if top is mode:
            break
        above.append(top)
    for other in reversed(above):
        other.__enter__()  # restores the modes entered after ours, in order
    return True


def remove_all() -> None:
    """Take every :class:`DeviceMode` off the calling thread's stack (a thread's last act).

    A thread can hold more than one: the inert mode of an earlier activation and the
    current one. Other modes stay, in their order.
    """
    for ours in [m for m in _get_current_function_mode_stack() if isinstance(m, DeviceMode)]:  # type: ignore[no-untyped-call]
        remove(ours)
