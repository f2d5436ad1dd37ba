"""How the simulated device's kernels read an op: its overload, its schema, its arguments.

Why a module of its own: every Python kernel of the device (:mod:`.kernels`, :mod:`.lstm`,
:mod:`.fallback`) asks the same questions of the op it runs (which argument a return writes,
whether it is a view, whether it draws random numbers, where an argument sits) and hands the
CPU kernel its arguments as the CPU expects them (Python numbers that C++ passed as wrapped
numbers become tensors again). The answers come from the op's schema, never from a table.
It also holds the one way the device's CPU work runs: out of sight of torch function and
dispatch modes (:func:`below_python`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import torch
from torch.utils._mode_utils import no_dispatch

__all__ = [
    "CPU",
    "CPU_KEYS",
    "argument_value",
    "below_python",
    "draws_random_numbers",
    "is_view",
    "operator_name",
    "overload",
    "redispatch_to_cpu",
    "rewrap_numbers",
    "with_argument",
    "written_argument",
]

CPU: Final = torch.device("cpu")
#: The dispatch key set that runs an op's CPU kernel (``op.redispatch(CPU_KEYS, ...)``).
CPU_KEYS: Final = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


@contextmanager
def below_python() -> Iterator[None]:
    """Run a kernel's CPU work out of sight of torch function and dispatch modes.

    A ``TorchFunctionMode`` such as torchdevice's own would otherwise see, and redirect, the
    CPU calls that implement the device; fake_tensor's fallback runs under ``no_dispatch`` too.
    """
    with torch._C.DisableTorchFunction(), no_dispatch():
        yield


def redispatch_to_cpu(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """A kernel running the CPU kernel on the device tensors themselves (metadata-only ops).

    ``set_``'s CPU kernel checks that tensor and storage share a device and sets sizes,
    strides and the storage pointer; it never reads or allocates memory when the storage is
    large enough, which is always so for storages of this device.
    """

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(CPU_KEYS, *args, **kwargs)

    return kernel


def overload(qualified: str) -> torch._ops.OpOverload:
    """``aten::set_.source_Storage`` -> the OpOverload (``.default`` when none is named)."""
    packet_name, _, overload_name = qualified.removeprefix("aten::").partition(".")
    op: torch._ops.OpOverload = getattr(
        getattr(torch.ops.aten, packet_name), overload_name or "default"
    )
    return op


def operator_name(op: torch._ops.OpOverload) -> str:
    """``aten::erfinv.out``, as the dispatcher and MPS print it."""
    name: str = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def rewrap_numbers(
    args: tuple[Any, ...], kwargs: dict[str, Any], tensor_arguments: dict[int, str]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Tensor arguments that reached the kernel as Python numbers, as tensors again.

    C++ code calls kernels with *wrapped numbers* (``t % 5`` inside ``take_along_dim``): CPU
    tensors PyTorch hands to a Python kernel as plain numbers, which the CPU op then refuses
    ("Expected a value of type 'Tensor'"). Python cannot mark a tensor as a wrapped number,
    so each becomes a 0-dim tensor whose dtype gives the result a wrapped number gives (see
    :func:`_number_tensor`).
    """
    values = (*args, *kwargs.values())
    if not any(isinstance(value, _NUMBERS) for value in values):
        return args, kwargs
    tensors = [value for value in values if isinstance(value, torch.Tensor)]
    like = tensors[0].dtype if tensors else None
    dimensioned = any(tensor.dim() for tensor in tensors)
    positional = list(args)
    for index, value in enumerate(positional):
        if index in tensor_arguments:
            positional[index] = _number_tensor(value, like, dimensioned)
    named = {
        name: (
            _number_tensor(value, like, dimensioned) if name in tensor_arguments.values() else value
        )
        for name, value in kwargs.items()
    }
    return tuple(positional), named


_NUMBERS: Final = (bool, int, float, complex)


def _kind(dtype: torch.dtype) -> int:
    """The promotion category of ``dtype``: bool 0, integer 1, floating 2, complex 3."""
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 0 if dtype == torch.bool else 1


def _number_tensor(value: Any, like: torch.dtype | None, dimensioned: bool) -> Any:
    """A Python number as a 0-dim CPU tensor that promotes as a wrapped number; else ``value``.

    A wrapped number only decides the result's kind (bool < int < float < complex), never
    its precision. A number of a higher kind than the other operands gives the default
    dtype of its kind. Otherwise the number keeps its full precision (int64, float64,
    complex128) where a dimensioned operand outranks any 0-dim tensor; among 0-dim operands
    only, it takes their dtype (rounded to it: the one case that can differ in the last bit).
    """
    if not isinstance(value, _NUMBERS):
        return value
    kind = next(index for index, t in enumerate(_NUMBERS) if isinstance(value, t))  # bool first
    if like is None or kind > _kind(like):
        default = (torch.bool, torch.int64, torch.get_default_dtype(), _default_complex())[kind]
        return torch.tensor(value, dtype=default)
    if dimensioned:
        return torch.tensor(
            value, dtype=(torch.bool, torch.int64, torch.float64, torch.complex128)[kind]
        )
    return torch.tensor(value, dtype=like)


def _default_complex() -> torch.dtype:
    """The complex dtype matching the default float dtype (``torch.complex64`` by default)."""
    return {torch.float64: torch.complex128, torch.float16: torch.complex32}.get(
        torch.get_default_dtype(), torch.complex64
    )


def draws_random_numbers(op: torch._ops.OpOverload) -> bool:
    """Whether ``op`` draws from a generator (an argument, or the global one for
    ``native_dropout``): its kernel lends the device generator's state to the CPU kernel."""
    schema = op._schema
    return schema.name == "aten::native_dropout" or any(
        argument.name == "generator" for argument in schema.arguments
    )


def is_view(schema: torch._C.FunctionSchema) -> bool:
    """Whether the op returns a view of an input (``Tensor(a)``, aliased and not written)."""
    return any(ret.alias_info is not None and not ret.alias_info.is_write for ret in schema.returns)


def written_argument(schema: torch._C.FunctionSchema, return_index: int) -> int | None:
    """The index of the argument a return writes into (``Tensor(a!)``), or None."""
    alias = schema.returns[return_index].alias_info
    if alias is None or not alias.is_write:
        return None
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.before_set & alias.before_set:
            return index
    return None


def with_argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], argument_names: list[str], name: str, value: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with schema argument ``name`` set to ``value``, where it sits."""
    index = argument_names.index(name)
    if index < len(args):
        return (*args[:index], value, *args[index + 1 :]), kwargs
    return args, {**kwargs, name: value}


def argument_value(
    args: tuple[Any, ...], kwargs: dict[str, Any], argument_names: list[str], index: int
) -> Any:
    """The value of the ``index``-th schema argument, given positionally or by keyword."""
    if index < len(args):
        return args[index]
    return kwargs[argument_names[index]]
