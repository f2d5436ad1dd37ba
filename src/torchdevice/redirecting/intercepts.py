"""The table of device-taking torch functions, and how each one's device is rewritten.

The function mode looks a function up here and nothing else: a function missing from the
table leaves through the fast path untouched. The handlers (:mod:`torchdevice.redirecting.handlers`)
receive the current :class:`~torchdevice.redirecting.runtime.Runtime`, the function and its
arguments, and call the function with the device the policy decided. The table comes
first, as ``torch/utils/_device.py`` opens on its own; the lists it is built from follow.

Every public torch function whose ATen schema takes a ``device`` is in the table or in
:data:`LEFT_OUT`, which says why (``tests/test_mode.py`` derives the list from the
schemas and checks it). Beyond ``torch/utils/_device.py``'s constructors:

* ``torch.*_like`` and ``Tensor.new_*``: only an explicit ``device=`` is rewritten; without
  one they follow their input, as there.
* ``torch.normal``: a constructor in one overload only (``mean`` and ``std`` numbers, a
  ``size``), which ``_device.py`` leaves out with the whole function; here that overload is
  placed like every factory, and the tensor overloads follow their inputs.
* ``torch.load`` and ``torch.Generator``: they never reach a function mode, so
  :mod:`torchdevice.patches` wraps them instead.
* ``torch.set_default_device``: not overridable; the ``DeviceContext`` mode it installs
  passes its device to factories, where this table rewrites it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from torchdevice.host import Host
from torchdevice.redirecting.handlers import (
    constructor_overload,
    device_ctor,
    explicit_factory,
    factory,
    float64_argument,
    generator_bound,
    parse_to,
    pin_memory,
    tensor_array_wrap,
    tensor_cpu,
    tensor_cuda,
    tensor_device,
    tensor_double,
    tensor_numpy,
    tensor_to,
    tensor_type,
)
from torchdevice.redirecting.policy import has_float64
from torchdevice.redirecting.runtime import Runtime

__all__ = ["LEFT_OUT", "Handler", "build_table"]

#: What the table maps a function to (:mod:`torchdevice.redirecting.handlers`).
Handler = Callable[[Runtime, Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]


def build_table(host: Host) -> Mapping[Callable[..., Any], Handler]:
    """Every intercepted function for ``host``, mapped to its handler.

    Host-dependent functions are left out where they cannot matter (``.numpy()`` of a tensor
    on the CPU needs no help), so the mode's fast path stays a single dict miss.
    """
    table: dict[Callable[..., Any], Handler] = dict.fromkeys(_factories(), factory)
    for name in _EXPLICIT_FACTORIES:
        table[getattr(torch, name)] = explicit_factory
    for name in _NEW_METHODS:
        table[getattr(torch.Tensor, name)] = explicit_factory
    table[torch.Tensor.to] = tensor_to
    table[torch._C._nn._parse_to] = parse_to
    table[torch.Tensor.cuda] = tensor_cuda
    table[torch.Tensor.cpu] = tensor_cpu
    table[torch.Tensor.type] = tensor_type
    table[torch.device] = device_ctor
    table[torch.Tensor.pin_memory] = pin_memory
    for name in _CONSTRUCTOR_OVERLOADS:
        table[getattr(torch, name)] = constructor_overload
    if host.accelerator is not None:
        table[torch.Tensor.numpy] = tensor_numpy
        table[torch.Tensor.__array__] = tensor_numpy
        table[torch.Tensor.__array_wrap__] = tensor_array_wrap
        table[torch._C.TensorBase.device.__get__] = tensor_device
        for name in _GENERATOR_OPS:
            table[getattr(torch.Tensor, name)] = generator_bound
        for name in _GENERATOR_FUNCTIONS:
            table[getattr(torch, name)] = generator_bound
        for function in _initializers():
            table[function] = generator_bound
    if not has_float64(host):
        table[torch.Tensor.double] = tensor_double
        for function in _dtype_argument_functions():
            table.setdefault(function, float64_argument)
    return table


#: Public torch functions whose schema takes a ``device`` but that are not in the table.
LEFT_OUT: Mapping[str, str] = {
    "torch.Generator": "a class torch builds in C++, never a function-mode call: "
    "torchdevice.patches wraps it",
    "torch.from_file": "maps a file into host memory: its only kernel is the CPU's, so "
    "a device-less call must stay on the CPU, and torch refuses other devices itself",
    "torch.Tensor.is_pinned": "a query that makes no tensor; its device argument is "
    "deprecated and names whose pinned memory is asked about",
}

# -- the lists the table is built from ---------------------------------------------------
_EXPLICIT_FACTORIES = (
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
)
_NEW_METHODS = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor")


def _factories() -> set[Callable[..., Any]]:
    """The constructors ``torch/utils/_device.py`` redirects, built lazily like there."""
    from torch.utils._device import _device_constructors  # noqa: PLC0415

    return set(_device_constructors())


#: Functions that construct in some overloads and follow their tensors in the others.
_CONSTRUCTOR_OVERLOADS = ("normal",)

_GENERATOR_OPS = (
    "random_",
    "uniform_",
    "normal_",
    "bernoulli_",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
)
_GENERATOR_FUNCTIONS = ("bernoulli", "multinomial", "poisson")


def _initializers() -> list[Callable[..., Any]]:
    """``torch.nn.init``'s functions that take a generator (``normal_(w, generator=g)``,
    llm.c's initialisation). Some hand themselves to function modes whole, so the mode
    never sees the random op inside: they get the generator rule themselves."""
    return [
        function
        for name, function in vars(torch.nn.init).items()
        if not name.startswith("_")
        and inspect.isfunction(function)
        and "generator" in inspect.signature(function).parameters
    ]


#: Ops that take ``dtype=`` without being factories or conversions read by the rules above
#: (``view(dtype)`` reinterprets bits; quantization has its own dtypes).
_NOT_DTYPE_ARGUMENTS = (
    "to",
    "view",
    "view_copy",
    "quantize_",
    "quantized_",
    "native_",
    "to_mkldnn",
)


def _dtype_argument_functions() -> list[Callable[..., Any]]:
    """Every public function and method whose op takes ``dtype=`` besides a tensor, read
    off the aten schemas (``sum``, ``cumsum``, ``mean``, ``softmax``, ``linalg.norm``...),
    with ``torch.nn.functional``'s that take one (they reach modes whole)."""
    found: dict[int, Callable[..., Any]] = {}
    tensor_type = torch._C.TensorType.get()
    namespaces = {"linalg_": torch.linalg, "special_": torch.special, "": torch}
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name.removeprefix("aten::")
        arguments = schema.arguments
        if (
            name == schema.name
            or name.startswith(("_", *_NOT_DTYPE_ARGUMENTS))
            or not arguments
            or not arguments[0].type.isSubtypeOf(tensor_type)
            or not any(argument.name == "dtype" for argument in arguments)
            or any(argument.name == "device" for argument in arguments)
        ):
            continue
        prefix = next(p for p in namespaces if name.startswith(p))
        for owner, attribute in ((namespaces[prefix], name[len(prefix) :]), (torch.Tensor, name)):
            function = getattr(owner, attribute, None)
            if callable(function):
                found[id(function)] = function
    functional = torch.nn.functional
    for name, function in vars(functional).items():
        if (
            not name.startswith("_")
            and inspect.isfunction(function)
            and "dtype" in inspect.signature(function).parameters
        ):
            found[id(function)] = function
    return list(found.values())
