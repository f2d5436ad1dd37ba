"""The function mode back on the stack while autograd runs the program's own code.

``loss.backward()``, ``torch.autograd.backward`` and ``torch.autograd.grad`` are torch
functions, so the mode handles them, and torch takes a mode off the thread's stack while its
``__torch_function__`` runs. Autograd then starts the engine, which copies the thread's
torch-function state (the stack included) to the threads that run the graph, so the
program's tensor hooks, module backward hooks, custom ``autograd.Function.backward`` and the
forwards that ``torch.utils.checkpoint`` recomputes ran with no mode at all: a hook's
``grad.to("cuda")`` reached a build without CUDA ("PyTorch is not linked with support for
cuda devices"), found by the sweep of public programs (docs/sweep.md).

The engine is entered through one Python function, ``torch.autograd.graph._engine_run_backward``,
which ``torch.autograd.backward`` and ``grad`` call by their module's global name. Wrapping
that name puts the mode back on the calling thread for the engine's run and takes it off
again after, so every thread of the run sees what the rest of the program sees. Torch has no
public hook at that point; the name is a ledger change, undone by ``disable()``. The
entry-points tier has no mode to lose and installs nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.autograd
from torch.overrides import _pop_mode

from torchdevice import ledger

__all__ = ["GROUP", "install", "spots"]

#: Ledger group of the wrapper.
GROUP = "backward"

_stack_len = torch._C._len_torch_function_stack


def install(enter_thread: Callable[[], None]) -> None:
    """Wrap the engine's way in (``_engine_run_backward``; idempotent); ``enter_thread``
    pushes the active mode on the calling thread unless it is there already (the
    activation's, read at each call)."""
    if ledger.has(GROUP):
        return
    original = vars(torch.autograd)["_engine_run_backward"]  # the name backward/grad call

    def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
        depth = _stack_len()
        enter_thread()
        if _stack_len() == depth:  # on the stack already, or nothing to enter
            return original(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            _pop_mode()  # type: ignore[no-untyped-call]

    ledger.set_attr(GROUP, torch.autograd, "_engine_run_backward", _engine_run_backward)


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    return (ledger.attr_spot(torch.autograd, "_engine_run_backward"),)
