"""What the simulated device does with an op it has no kernel for: what MPS does.

Why a module of its own: this is the half of the device that the CPU fallback of torchdevice is
tested against. MPS registers one boxed fallback for every op of every namespace
(``TORCH_LIBRARY_IMPL(_, MPS, m)`` in ``aten/src/ATen/mps/MPSFallback.mm``): with
``PYTORCH_ENABLE_MPS_FALLBACK`` unset it raises its own ``NotImplementedError``
(``mps_error_fallback``), with it set it warns once per operator and reruns the op on the CPU
(``mps_cpu_fallback``). :func:`missing_kernel` is that fallback for this device, chosen the
same way (the variable is read when the device registers, as MPS reads it at torch's import).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any, Final, NoReturn

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from torchdevice.simulated_mps.dispatch import below_python, operator_name
from torchdevice.simulated_mps.mps_ops import not_implemented_message

__all__ = ["missing_kernel"]


#: The values of ``PYTORCH_ENABLE_MPS_FALLBACK`` that switch MPS's CPU fallback on
#: (``c10::utils::check_env``'s true words).
_TRUE_WORDS: Final = frozenset({"1", "on", "yes", "true", "y"})


def _cpu_fallback_enabled() -> bool:
    """Whether ``PYTORCH_ENABLE_MPS_FALLBACK`` asks for MPS's CPU fallback."""
    return os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "").strip().lower() in _TRUE_WORDS


def missing_kernel(name: str) -> Callable[..., Any]:
    """The boxed fallback: every op without a kernel on the device raises MPS's error, or,
    with ``PYTORCH_ENABLE_MPS_FALLBACK`` set when the device registers, runs on the CPU
    (:func:`_cpu_fallback`), as MPS registers ``mps_fallback`` instead of
    ``mps_error_fallback`` when the variable is set at torch's import."""
    if _cpu_fallback_enabled():
        warned: set[str] = set()

        def fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
            return _cpu_fallback(name, warned, op, args, kwargs)

        return fallback

    def missing(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(not_implemented_message(operator_name(op), name))

    return missing


def _cpu_fallback(
    name: str,
    warned: set[str],
    op: torch._ops.OpOverload,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run ``op`` on the CPU for the device, as ``at::native::cpu_fallback`` does for MPS.

    MPS's warning first, once per operator (torchdevice counts it in the report from its
    text); then every device tensor of the arguments is copied to the CPU, the CPU kernel
    runs, the arguments the op writes (``out=``, in-place) get the CPU values copied back,
    and the results come back on the device (an argument the op returned is that argument).
    """
    operator = operator_name(op)
    if operator not in warned:
        warned.add(operator)
        warnings.warn(
            f"The operator '{operator}' is not currently supported on the {name} backend and "
            "will fall back to run on the CPU. This may have performance implications.",
            UserWarning,
            stacklevel=2,
        )
    flat, spec = tree_flatten((args, kwargs))
    device = next(
        (t.device for t in flat if isinstance(t, torch.Tensor) and t.device.type == name), None
    )
    with below_python():
        cpu_flat = [
            t.cpu() if isinstance(t, torch.Tensor) and t.device.type == name else t for t in flat
        ]
        cpu_args, cpu_kwargs = tree_unflatten(cpu_flat, spec)
        out = op(*cpu_args, **cpu_kwargs)
        written: dict[int, torch.Tensor] = {}
        for position, argument in enumerate(op._schema.arguments):
            alias = argument.alias_info
            if alias is None or not alias.is_write:
                continue
            if position < len(args):
                given, computed = args[position], cpu_args[position]
            else:
                given, computed = kwargs.get(argument.name), cpu_kwargs.get(argument.name)
            pairs = (
                zip(given, computed, strict=True)
                if isinstance(given, (list, tuple))
                else [(given, computed)]
            )
            for original, value in pairs:
                if isinstance(original, torch.Tensor):
                    if original is not value:
                        original.copy_(value)
                    written[id(value)] = original

        def back(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            original = written.get(id(value))
            if original is not None:
                return original
            return value if device is None else value.to(device)

        return tree_map(back, out)
