"""``torch.compile``'s default backend on the simulated accelerator: dynamo and AOTAutograd
over the device's own kernels, said out loud.

Why: inductor generates code per device type and has no code generator for the simulated
device. MPS has its own (Metal); the honest stand-in here would be the CPU's generated C++
over the device's memory. That was tried (the CPU's scheduling and wrappers registered for
the device): simple graphs compiled and matched eager, but inductor's scheduler assumes C++
kernels run on device type ``"cpu"`` (``node.is_cpu()`` in
``Scheduler._try_reindex_pointwise_for_reduction``, torch 2.13), so a graph that fuses a
reduction with pointwise ops fails. Failing every default ``torch.compile`` would stop the
CUDA-first code this host exists to check, and compiling some graphs unsoundly would be
worse. So a graph whose tensors are on the simulated device goes to ``aot_eager`` instead:
dynamo captures it with the same guards and graph breaks, AOTAutograd builds its forward
and backward graphs, and the device's kernels (MPS's op set) run them. Results equal eager
results. What this host therefore does not check is inductor's code generation (which on a
Mac is MPS's own, not the CPU's anyway). Graphs with no tensor on the device still go to
inductor. The switch is logged once per process (``WARNING``, logger
``torchdevice.simulated_mps``) and documented in ``docs/simulated-mps.md``.

The hook is ``torch._TorchCompileInductorWrapper.__call__``: ``torch.compile`` builds that
wrapper for ``backend="inductor"`` (the default), and it is the one place that sees the
captured graph before inductor does. Installed by :func:`install` only when the simulated
accelerator registers; a real MPS or CUDA process never has it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

__all__ = ["install", "on_device"]

logger = logging.getLogger("torchdevice.simulated_mps")

_MARK = "_torchdevice_simulated_device"
_warned = threading.Event()


def on_device(graph: torch.fx.GraphModule, inputs: Sequence[Any], device_type: str) -> bool:
    """Whether a captured graph touches ``device_type``: an input on it, or a value the
    graph makes there (dynamo records each node's example value in ``node.meta``)."""
    for value in tree_leaves(list(inputs)):
        if isinstance(value, torch.Tensor) and value.device.type == device_type:
            return True
    for node in graph.graph.nodes:
        example = node.meta.get("example_value", node.meta.get("val"))
        for value in tree_leaves(example):
            if isinstance(value, torch.Tensor) and value.device.type == device_type:
                return True
    return False


def install(device_type: str) -> None:
    """Send the default backend's graphs on ``device_type`` to ``aot_eager`` (idempotent)."""
    wrapper = torch._TorchCompileInductorWrapper
    original: Callable[..., Any] = wrapper.__call__
    if getattr(original, _MARK, None) == device_type:
        return

    @functools.wraps(original)
    def __call__(
        self: Any,
        model_: torch.fx.GraphModule,
        inputs_: Sequence[Any],
        *,
        config_patches: dict[str, Any] | None = None,
    ) -> Callable[..., Any]:
        if not on_device(model_, inputs_, device_type):
            compiled: Callable[..., Any] = original(
                self, model_, inputs_, config_patches=config_patches
            )
            return compiled
        if not _warned.is_set():
            _warned.set()
            logger.warning(
                "torch.compile: inductor has no code generator for the simulated MPS device "
                "(%s); graphs on it are compiled with backend='aot_eager' (dynamo and "
                "AOTAutograd, the device's own kernels), so inductor's code generation is "
                "not exercised on this host",
                device_type,
            )
        from torch._dynamo.backends.debugging import aot_eager  # noqa: PLC0415 - heavy

        eager: Callable[..., Any] = aot_eager(model_, list(inputs_))
        return eager

    setattr(__call__, _MARK, device_type)
    wrapper.__call__ = __call__  # type: ignore[method-assign]
