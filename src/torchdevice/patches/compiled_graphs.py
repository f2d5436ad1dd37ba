"""A graph inductor compiled under the function mode runs with the mode off the stack, where
nothing in it can need the mode.

Why: dynamo traces the mode's ``__torch_function__`` into every graph compiled under it,
so each device request of the graph was decided at trace time and is a constant of the
code inductor generates. That code still calls back into torch from Python at run time
(``extern_kernels.addmm(..., out=buf)`` once per ``Linear``, ``data_ptr()`` of each
Triton kernel's tensors on a GPU), and torch sends each of those calls through every
function mode on the stack again: the mode's pass-through, a Python call per kernel,
6 per forward of ``benchmarks/compiled.py``'s MLP (``benchmarks/README.md``). None of them
has a device to decide.

So the graphs the default backend compiles (``torch._TorchCompileInductorWrapper``) while
redirecting are run by :func:`_without_mode`: when the mode is the innermost function mode
(dynamo's guards on the mode stack make it the stack the graph was traced with), it is
popped for the call and pushed back after, as dynamo itself restores the mode stack
(``torch._dynamo.utils.set_torch_function_mode_stack``). What the generated code calls
still runs as before: a custom op's Python body, for one, ran inside the mode's
``__torch_function__`` already, where torch had taken the mode off. The one thing the
mode does for these calls is the CPU fallback of a kernel the accelerator lacks
(:mod:`torchdevice.redirecting.fallback`), so on hosts with an accelerator the mode stays.

Other modes on the stack (the program's own) are left as they are, and the entry-points
tier has no mode to take off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Final

import torch

from torchdevice import ledger
from torchdevice.redirecting.mode import DeviceMode

__all__ = ["GROUP", "install", "spots"]

#: The ledger group of the backend's wrapper.
GROUP: Final = "compiled graphs"

_stack_len = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at
_pop = torch._C._pop_torch_function_stack
_push = torch._C._push_on_torch_function_stack


def _without_mode(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` run with torchdevice's mode popped while it is the innermost mode and
    has no fallback (see the module docstring)."""

    @functools.wraps(compiled)
    def run(*args: Any, **kwargs: Any) -> Any:
        depth = _stack_len()
        if depth:
            top = _stack_at(depth - 1)
            if type(top) is DeviceMode and top.fallback is None:
                _pop()
                try:
                    return compiled(*args, **kwargs)
                finally:
                    _push(top)
        return compiled(*args, **kwargs)

    return run


def install() -> None:
    """Wrap the graphs the default backend compiles from now on (idempotent)."""
    if ledger.has(GROUP):
        return
    owner = torch._TorchCompileInductorWrapper
    original: Callable[..., Any] = owner.__call__

    @functools.wraps(original)
    def __call__(
        self: Any,
        model_: torch.fx.GraphModule,
        inputs_: Sequence[Any],
        *args: Any,
        **kwargs: Any,
    ) -> Callable[..., Any]:
        compiled: Callable[..., Any] = original(self, model_, inputs_, *args, **kwargs)
        return _without_mode(compiled)

    ledger.set_attr(GROUP, owner, "__call__", __call__)


def spots() -> tuple[ledger.Spot, ...]:
    """What :func:`install` changes, for the pristine check: described, not read back.
    An accelerator torch does not ship may wrap the same attribute for the rest of the
    process when it registers its compile backend, so its value is no longer native
    torch's after a test that used such a device; the ledger's own check (nothing left
    recorded after ``disable()``) covers this change."""
    spot = ledger.attr_spot(torch._TorchCompileInductorWrapper, "__call__")
    return (ledger.Spot(spot.what, None),)
