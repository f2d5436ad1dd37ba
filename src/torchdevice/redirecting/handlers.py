"""The handlers of the function mode's table (:mod:`torchdevice.redirecting.intercepts`): how each
device-taking torch function's device is rewritten.

Each handler receives the current :class:`~torchdevice.redirecting.runtime.Runtime`, the function
and its arguments, places the request on the runtime's one path
(:meth:`~torchdevice.redirecting.runtime.Runtime.place`, with its pin and float64 rules), and calls
the function with the device the policy decided; what the result stands for is marked by
:mod:`torchdevice.redirecting.standing`. Handlers may update ``kwargs`` in place: torch hands each
``__torch_function__`` call a dict of its own, and the mode passes ``{}`` when there is
none. The table of which function goes to which handler, and why, is
:func:`torchdevice.redirecting.intercepts.build_table`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from torchdevice.redirecting import callsite
from torchdevice.redirecting.compiling import is_compiling, is_tracing
from torchdevice.redirecting.policy import (
    GOVERNED_TYPES,
    Standing,
    draws_on_generator,
    is_inplace,
)
from torchdevice.redirecting.runtime import Runtime
from torchdevice.redirecting.standing import (
    READ_CPU,
    device_object,
    mark_placed,
    moved,
    requested,
    standing_of,
)
from torchdevice.reporting.recorder import api_name
from torchdevice.sites import origin

__all__ = [
    "DATA_FACTORIES",
    "constructor_overload",
    "device_ctor",
    "explicit_factory",
    "factory",
    "float64_argument",
    "generator_bound",
    "is_device_arg",
    "parse_to",
    "pin_memory",
    "tensor_array_wrap",
    "tensor_cpu",
    "tensor_cuda",
    "tensor_device",
    "tensor_double",
    "tensor_numpy",
    "tensor_to",
    "tensor_type",
]

#: The C type, bound at import: the entry-points tier puts a stand-in at ``torch.device``.
_DEVICE = torch.device


def is_device_arg(value: object) -> bool:
    """Whether a positional argument of ``.to()`` is a device (not a dtype or tensor); the
    entry-points tier's inlined ``Tensor.to`` asks this too."""
    return isinstance(value, (str, _DEVICE, int)) and not isinstance(value, bool)


_PIN_REASON = "pinned memory needs CUDA here: an ordinary copy"


def _note_pin(rt: Runtime, api: str, requested: str, decided: str) -> None:
    """Report a pin request torchdevice dropped, where the user's own code made it (not
    DataLoader's pinning thread: natively that one only warns without an accelerator,
    while ``x.pin_memory()`` and ``pin_memory=True`` raise)."""
    frame = callsite.user_frame(1)
    if frame is not None and origin(frame.f_code.co_filename) is None:
        rt.note_event("device-api", api, requested, decided, _PIN_REASON)


def _drop_pin(
    rt: Runtime, device: torch.device | None, kwargs: dict[str, Any], func: Callable[..., Any]
) -> None:
    """Drop ``pin_memory=True`` where pinning cannot mean anything (``policy.pins``), and
    report it: natively, without an accelerator, torch raises there."""
    if kwargs.get("pin_memory") and not rt.pins(None if device is None else device.type):
        kwargs["pin_memory"] = False
        _note_pin(rt, api_name(func), "pin_memory=True", "pin_memory=False")


#: Factories whose data argument has copy rules of its own (the entry-points tier sends
#: them to the handler's full path).
DATA_FACTORIES = frozenset({torch.tensor, torch.as_tensor, torch.asarray})
# torch's own, bound once: while torchdevice.redirecting.entry_points wraps them, torch.as_tensor is
# the wrapper, and the handler is handed the original.
_AS_TENSOR, _ASARRAY = torch.as_tensor, torch.asarray


def _factory_dtype(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Apply the dtype rule to a factory's ``dtype=`` (or its float64 data) in place."""
    dtype = kwargs.get("dtype")
    if dtype is None and func in DATA_FACTORIES and args:
        data_dtype = getattr(args[0], "dtype", None)
        if data_dtype is torch.float64 or str(data_dtype) == "float64":
            dtype = torch.float64
    narrowed = rt.narrow_float64(func, kwargs.get("device"), dtype)
    if narrowed is not dtype:
        kwargs["dtype"] = narrowed


def _inferred_float64(
    rt: Runtime, func: Callable[..., Any], kwargs: dict[str, Any], call: Callable[[], Any]
) -> Any:
    """``call()``, the dtype rule applied to data torch reads as float64 from inside.

    Why: a list of NumPy float64 scalars (a NumPy learning-rate schedule's values, as in
    DINO's ``MetricLogger``) has no ``dtype`` to read before the call, but torch infers
    float64 from it, which the MPS device rejects with a ``TypeError``. Only then, for a data
    factory without ``dtype=``, is the call made again with the rule's dtype (float32, logged):
    the common call costs nothing.
    """
    try:
        return call()
    except TypeError as error:
        if func not in DATA_FACTORIES or kwargs.get("dtype") is not None:
            raise
        if "float64" not in str(error):
            raise
        narrowed = rt.narrow_float64(func, kwargs.get("device"), torch.float64)
        if narrowed is torch.float64:
            raise
    kwargs["dtype"] = narrowed
    return call()


# -- factories --------------------------------------------------------------------------
def factory(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A constructor (``torch.zeros``...): its device placed by the runtime
    (:meth:`~torchdevice.redirecting.runtime.Runtime.place`), the one given in ``device=``
    or, for a call without one, the request ``None``: where device-less factories land on
    this host (natively a host tensor; here on the accelerator, standing for the host)."""
    request = kwargs.get("device")
    if request is None:
        default = rt.default_device
        if default is None or kwargs.get("out") is not None:  # out= decides the device
            if kwargs.get("pin_memory"):
                _drop_pin(rt, None, kwargs, func)
            return func(*args, **kwargs)
        generator = kwargs.get("generator")
        if generator is not None and draws_on_generator(generator.device.type, default.type):
            return _drawn_then_moved(rt, func, args, kwargs, generator.device)
        if func in DATA_FACTORIES and args and _on_the_device(args[0]):
            return _kept_on_its_device(rt, func, args, kwargs)
    elif (
        type(request) is _DEVICE  # a string request ("cuda") leaves at the cheapest test
        and not is_compiling()  # before the runtime's test: dynamo reads nothing past it
        and rt.runs_as_made(request)
        and "pin_memory" not in kwargs
        and func not in DATA_FACTORIES  # the host's data copy rules still apply
    ):
        return func(*args, **kwargs)
    _, device, wanted = rt.place(request, func)
    kwargs["device"] = device
    if "pin_memory" in kwargs:
        _drop_pin(rt, device, kwargs, func)
    from_data = request is not None and func in DATA_FACTORIES and bool(args)
    if rt.float64_device is not None:
        _factory_dtype(rt, func, args, kwargs)
        # kwargs read at the call, not bound before it: the dtype rule's retry changes them
        call: Callable[[], Any] = (
            functools.partial(_from_data, func, args, kwargs, wanted)
            if from_data
            else lambda: func(*args, **kwargs)
        )
        return mark_placed(_inferred_float64(rt, func, kwargs, call), wanted)
    if from_data:
        return _from_data(func, args, kwargs, wanted)
    result = func(*args, **kwargs)
    return mark_placed(result, wanted)


def explicit_factory(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``*_like`` and ``Tensor.new_*``: only an explicit ``device=`` is rewritten, as a
    :func:`factory`'s is; a float64 ``dtype=`` landing on the MPS device follows the dtype
    rule either way."""
    if kwargs.get("device") is None:  # on its input's device, where an op's own dtype= lands
        return float64_argument(rt, func, args, kwargs)
    return factory(rt, func, args, kwargs)


def _from_data(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    wanted: Standing | None,
) -> Any:
    """``torch.tensor/as_tensor/asarray(data, device=...)`` with the device's copy rules.

    Data on the host (a NumPy array, a host tensor) given to a device request is copied,
    as a host-to-device transfer copies, even where the real device is the same and
    ``as_tensor``/``asarray`` would alias it; a tensor already standing for the wanted
    device is shared, as natively.
    """
    data = args[0]
    if wanted is None:
        return func(*args, **kwargs)
    source: Standing = standing_of(data) if isinstance(data, torch.Tensor) else "host"
    if source != wanted and func is _ASARRAY and kwargs.get("copy") is None:
        kwargs["copy"] = True
    result = func(*args, **kwargs)
    if source != wanted and func is _AS_TENSOR and _aliases(result, data):
        result = result.clone()
    return mark_placed(result, wanted)  # a standing from Runtime.place: not compiling


def _on_the_device(data: object) -> bool:
    """Whether ``data`` is a tensor already on the accelerator (not a real CPU tensor)."""
    return isinstance(data, torch.Tensor) and not data.is_cpu


def _kept_on_its_device(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``torch.tensor/as_tensor/asarray(t)`` without a device, ``t`` on the accelerator.

    Natively such a call keeps the tensor's own device: ``as_tensor``/``asarray`` return
    ``t`` itself, ``tensor`` copies it there. It is no host request, so ``t`` keeps its
    standing (a device tensor moved to the device is itself) and a copy takes ``t``'s (on
    ``t`` itself, or a view of it, that is the mark it has). Marks are for eager tensors:
    none while torch compiles, as :meth:`~torchdevice.redirecting.runtime.Runtime.place` gives none.
    """
    data: torch.Tensor = args[0]
    kwargs["device"] = data.device
    if rt.float64_device is not None:
        _factory_dtype(rt, func, args, kwargs)
    result = func(*args, **kwargs)
    if is_compiling():
        return result
    return mark_placed(result, standing_of(data))


def _aliases(result: torch.Tensor, data: object) -> bool:
    """Whether ``as_tensor`` shared ``data``'s memory instead of copying it."""
    if isinstance(data, torch.Tensor):
        return result.untyped_storage().data_ptr() == data.untyped_storage().data_ptr()
    interface = getattr(data, "__array_interface__", None)
    return isinstance(interface, dict) and result.data_ptr() == interface["data"][0]


def _drawn_then_moved(
    rt: Runtime,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    source: torch.device,
) -> torch.Tensor:
    """A device-less factory given a generator of another device (a CPU one, typically).

    A generator only draws on its own device, so the values are drawn there — the very
    numbers a native run draws — and the tensor then moves to where device-less factories
    land (the runtime's place for the request ``None``), so it meets the rest of the
    program's tensors (the model, other data) on one device. A leaf asked for with
    ``requires_grad=True`` stays a leaf.
    """
    requires_grad = bool(kwargs.pop("requires_grad", False))
    kwargs.pop("pin_memory", None)  # the result lives on the accelerator: nothing to pin
    kwargs["device"] = source
    drawn: torch.Tensor = func(*args, **kwargs)
    _, target, wanted = rt.place(None, func)
    dtype = drawn.dtype
    if rt.float64_device is not None:
        dtype = rt.narrow_float64(func, target, dtype)
    result = mark_placed(drawn.to(target, dtype), wanted)  # a device-less factory's result
    return result.requires_grad_() if requires_grad else result


# -- random ops given a generator -------------------------------------------------------
def generator_bound(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Random ops given a generator of another device than their tensor's.

    The factory rule's other half: redirected tensors live on the accelerator while a
    ``torch.Generator()`` made without a device stays on the CPU (DataLoader draws its
    seed with ``torch.empty(()).random_(generator=g)``). The numbers are drawn on the
    generator's device, as natively, and land on the tensor's: in place for ``x.uniform_``
    and friends, moved for ``torch.bernoulli``/``multinomial``/``normal``.
    """
    if not args and "tensor" in kwargs:  # nn.init's functions reach modes by keyword
        kwargs = dict(kwargs)
        args = (kwargs.pop("tensor"),)
    generator = kwargs.get("generator")
    if generator is None:  # and take it positionally too
        generator = next((a for a in args if isinstance(a, torch.Generator)), None)
    tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if (
        generator is None
        or tensor is None
        or not draws_on_generator(str(generator.device), str(tensor.device))
    ):
        return func(*args, **kwargs)
    source = generator.device
    moved = tuple(a.to(source) if isinstance(a, torch.Tensor) else a for a in args)
    result = func(*moved, **kwargs)
    if is_inplace(func):  # write into the original
        with torch.no_grad():
            tensor.copy_(moved[0])
        return tensor
    return result.to(tensor.device)


def _has_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return any(isinstance(a, torch.Tensor) for a in args) or any(
        isinstance(v, torch.Tensor) for v in kwargs.values()
    )


def constructor_overload(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A function that constructs only in some overloads: ``torch.normal(0., 1., size)``.

    Which overload a call takes shows in its arguments: with no tensor among them it is
    the constructor (the one that takes ``device=``), placed like every factory, with or
    without a device; with tensors (``torch.normal(means, 1.0)``, ``out=``) it follows
    them, under the generator rule on accelerator hosts.
    """
    if _has_tensor(args, kwargs):
        if rt.default_device is None:  # CPU host: tensors and generators share the CPU
            return func(*args, **kwargs)
        return generator_bound(rt, func, args, kwargs)
    return factory(rt, func, args, kwargs)


# -- transfers --------------------------------------------------------------------------
def _rewrite_to_args(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], first: int
) -> tuple[tuple[Any, ...], dict[str, Any], Standing | None]:
    """Rewrite the device of a ``.to()``-shaped call; ``first`` skips ``self``.

    Also returns what the requested device stands for (``None``: no device requested, or
    one the policy does not govern), for the copy semantics of
    :mod:`torchdevice.redirecting.standing`. ``Module.to`` (``first == 0``: ``_parse_to``) is
    reported past overrides of ``to``.
    """
    method = "to" if first == 0 else None
    if "device" in kwargs:
        request = kwargs["device"]
        if request is None:
            return args, kwargs, None
        _, device, wanted = rt.place(request, func, method=method)
        kwargs = dict(kwargs)
        kwargs["device"] = device
        return args, kwargs, wanted
    if len(args) > first and is_device_arg(args[first]):
        request = args[first]
        _, device, wanted = rt.place(request, func, method=method)
        return (*args[:first], device, *args[first + 1 :]), kwargs, wanted
    return args, kwargs, None


def tensor_to(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.to``: rewrite the device; keep the device's identity and copy semantics.

    A transfer to where the tensor already stands returns it; one between host and
    device gives an independent copy, even where both land on one real device
    (:mod:`torchdevice.redirecting.standing`).
    """
    source = args[0]
    request = kwargs.get("device") if len(args) < 2 else args[1]
    if type(request) is _DEVICE and not is_compiling() and rt.runs_as_made(request):
        result = func(*args, **kwargs)  # .to(t.device) of a CPU tensor t: no decision
        return result if result is not source else moved(source, result, "host")
    args, kwargs, wanted = _rewrite_to_args(rt, func, args, kwargs, 1)
    if rt.float64_device is not None:
        args, kwargs = _to_dtype_rule(rt, func, args, kwargs)
    result = func(*args, **kwargs)
    return result if wanted is None else moved(source, result, wanted)


def _to_dtype_rule(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``Tensor.to`` landing float64 on MPS: normalise the arguments, narrow the dtype."""
    tensor, *positional = args
    # ``copy`` follows ``non_blocking`` in each form: .to(device, dtype, non_blocking, copy),
    # .to(dtype, non_blocking, copy), .to(other, non_blocking, copy); _parse_to refuses it.
    at = 3 if positional and is_device_arg(positional[0]) else 2
    copy = positional[at] if len(positional) > at else kwargs.get("copy", False)
    rest = {k: v for k, v in kwargs.items() if k != "copy"}
    with torch._C.DisableTorchFunction():  # parsing only: no mode needs to see it
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(
            *positional[:at], **rest
        )
    target = device if device is not None else tensor.device
    wanted = dtype if dtype is not None else tensor.dtype
    narrowed = rt.narrow_float64(func, target, wanted)
    if narrowed is wanted:
        return args, kwargs
    new_kwargs = {
        "device": target,
        "dtype": narrowed,
        "non_blocking": non_blocking,
        # a conversion natively, so a new tensor even where float32 is what it already is
        "copy": copy or tensor.dtype != wanted,
        "memory_format": memory_format if memory_format is not None else torch.preserve_format,
    }
    return (tensor,), new_kwargs


def parse_to(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``torch._C._nn._parse_to``: how ``Module.to`` reads its arguments.

    The device it returns is the one ``Module.to`` hands every parameter's ``.to()``,
    and the one modules that remember their device read (Lightning's
    ``DeviceDtypeModuleMixin``): the device as written, placed where each ``.to()`` uses
    it (docs/policy.md, device objects). The ``"cpu:-1"`` override, which torch cannot
    parse, gives the decided device, keeping what it stood for
    (:func:`~torchdevice.redirecting.standing.device_object`).
    """
    request = kwargs.get("device", args[0] if args else None)
    if request is READ_CPU:  # Module.to(t.device) of a tensor on the CPU: where t is
        return (request, *func(*args, **kwargs)[1:])
    if type(request) is int:
        # torch reads an int as an index of the current accelerator (``simgpu:1`` or
        # ``mps:1`` on an MPS host, an index past its one device); the policy reads it as
        # CUDA code means it, a CUDA index (``model.to(rank)`` in DDP scripts).
        request = _DEVICE("cuda", request)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": request}
        else:
            args = (request, *args[1:])
    written = args, kwargs
    args, kwargs, wanted = _rewrite_to_args(rt, func, args, kwargs, 0)
    if type(request) is not _DEVICE or requested(request, None) is None:
        try:  # a remembered object (Module.cuda's, below) is not as written: decided
            return func(*written[0], **written[1])
        except RuntimeError:  # "cpu:-1": only the decided device can say it
            pass
    device, *rest = func(*args, **kwargs)
    if device is None:
        return (device, *rest)
    # Distinct even where the real device is what it stands for: its standing then
    # travels to every tensor's .to() without being read off its type (which the policy
    # may not know: a simulated accelerator's).
    return (device_object(device, wanted, distinct=True), *rest)


def _move(
    rt: Runtime,
    func: Callable[..., Any],
    tensor: torch.Tensor,
    request: object,
    non_blocking: bool,
    memory_format: torch.memory_format,
) -> Any:
    """``.cuda()``/``.cpu()`` as ``.to(device)``, with the device's copy semantics."""
    _, device, wanted = rt.place(request, func)
    dtype = tensor.dtype
    if rt.float64_device is not None:
        dtype = rt.narrow_float64(func, device, dtype)
    result = tensor.to(device, dtype, non_blocking=non_blocking, memory_format=memory_format)
    return result if wanted is None else moved(tensor, result, wanted)


def tensor_cuda(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.cuda(device=None, non_blocking=False, memory_format=...)``."""
    tensor, *rest = args
    device = rest[0] if rest else kwargs.get("device")
    request: object = "cuda" if device is None else device
    if (isinstance(request, str) and not request.startswith("cuda")) or (
        isinstance(request, torch.device)
        and request.type != "cuda"
        and requested(request, None) != "device"  # torch.device("cuda") decided elsewhere
    ):
        return func(*args, **kwargs)  # torch rejects .cuda("cpu"); let it say so
    non_blocking = rest[1] if len(rest) > 1 else kwargs.get("non_blocking", False)
    memory_format = kwargs.get("memory_format", torch.preserve_format)
    return _move(rt, func, tensor, request, non_blocking, memory_format)


def tensor_cpu(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.cpu(memory_format=...)``: a CPU request like any other."""
    memory_format = kwargs.get("memory_format", torch.preserve_format)
    return _move(rt, func, args[0], "cpu", False, memory_format)


def tensor_type(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.type("torch.cuda.FloatTensor")``: the dtype natively, the device redirected.

    The legacy classes (``t.type(torch.cuda.FloatTensor)``, the real ones or the facade's
    stand-ins) are read by their ``torch.cuda`` name.
    """
    dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    if isinstance(dtype, type) and getattr(dtype, "__module__", None) == "torch.cuda":
        dtype = f"torch.cuda.{dtype.__name__}"
    tensor = args[0]
    non_blocking = bool(args[2]) if len(args) > 2 else bool(kwargs.get("non_blocking", False))
    if not (isinstance(dtype, str) and dtype.startswith("torch.cuda.")):
        if dtype is torch.float64 and tensor.device.type == rt.float64_device:
            return _converted(rt, func, tensor)  # .type(torch.float64) on MPS
        return func(*args, **kwargs)
    decision, device, wanted = rt.place("cuda", func)
    if decision.action == "unchanged":
        return func(*args, **kwargs)
    cast = func(tensor, "torch." + dtype[len("torch.cuda.") :], non_blocking)
    narrowed = cast.dtype
    if rt.float64_device is not None:
        narrowed = rt.narrow_float64(func, device, narrowed)
    result = cast.to(device, narrowed, non_blocking=non_blocking)
    return result if wanted is None else moved(tensor, result, wanted)


def _converted(
    rt: Runtime,
    func: Callable[..., Any],
    tensor: torch.Tensor,
    memory_format: torch.memory_format = torch.preserve_format,
) -> torch.Tensor:
    """A conversion to float64 of a tensor on the MPS device: float32 under the dtype rule,
    and a new tensor, as the native conversion gives, even where float32 is what it is."""
    dtype = rt.narrow_float64(func, tensor.device, torch.float64)
    return tensor.to(dtype, copy=True, memory_format=memory_format)


def tensor_double(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.double()`` of a tensor on the MPS device (MPS hosts only): the dtype rule,
    as for ``.to(torch.float64)``."""
    tensor = args[0]
    if tensor.device.type != rt.float64_device or tensor.dtype is torch.float64:
        return func(*args, **kwargs)
    return _converted(rt, func, tensor, kwargs.get("memory_format", torch.preserve_format))


def float64_argument(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``dtype=torch.float64`` reaching the MPS device through an op's own dtype argument
    (``x.sum(dtype=torch.float64)``, ``F.softmax(x, dim, dtype=torch.float64)``, MPS hosts
    only): the dtype rule, logged at the call."""
    if kwargs.get("dtype") is torch.float64 and rt.float64_device is not None:
        tensor = args[0] if args else kwargs.get("input")
        if isinstance(tensor, torch.Tensor) and tensor.device.type == rt.float64_device:
            kwargs["dtype"] = rt.narrow_float64(func, tensor.device, torch.float64)
    return func(*args, **kwargs)


# -- device objects, reads and pinning --------------------------------------------------
def device_ctor(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``torch.device(...)`` itself: the device as written; accepts ``"cpu:-1"``.

    The rule (docs/policy.md, device objects): a device object reads what the code
    wrote, ``torch.device("cuda")`` is of type ``"cuda"``, and is placed where it is used
    (factories, ``.to()``, ``Module.to``, ``torch.load``...), as the string ``"cuda"`` is.
    Libraries that check the device they built against the accelerator they chose
    (Lightning's ``device.type != "cuda"``, Accelerate's fp16 branch on
    ``device.type == "cuda"``) take their GPU path. The request is still decided here:
    a malformed one raises as torch would, and the redirect is reported at this line,
    the one to port. ``"cpu:-1"``, which torch cannot parse, gives the decided CPU device.
    """
    request: object
    params = list(args)
    if kwargs:  # torch.device(type="cuda", index=0), torch.device("cuda", index=0)
        if set(kwargs) - {"type", "index"} or ("type" in kwargs and params):
            return func(*args, **kwargs)  # not a form torch accepts: let torch say so
        if "type" in kwargs:
            params.append(kwargs["type"])
        if "index" in kwargs:
            if len(params) != 1:
                return func(*args, **kwargs)
            params.append(kwargs["index"])
    if len(params) not in (1, 2):
        return func(*args, **kwargs)
    if len(params) == 2:
        type_, index = params
        if not (isinstance(type_, str) and ":" not in type_ and isinstance(index, int)):
            return func(*args, **kwargs)
        # torch.device("cpu", -1) is torch's "no index", not the override.
        request = type_ if index < 0 else f"{type_}:{index}"
    else:
        request = params[0]
        if isinstance(request, torch.device):
            if request.type in GOVERNED_TYPES:
                # Reported where it was made (Runtime.place gives a device object no
                # row) and never a toggle: placing it only checks it, so the line that
                # made this copy (torch's storage._new_shared, per DataLoader batch) is
                # not looked for.
                rt.place(request, func, report=False)
            return request
    # torch building its own device object (GradScaler.unscale_, autocast...): apply the
    # policy, but it is no line of the user's to port, so it is not reported. Placed once:
    # deciding "cpu:-1" toggles the override.
    maker = callsite.entered(device_ctor)
    ours = maker is None or not callsite.is_internal(maker.f_code)
    decision, device, _ = rt.place(request, func, report=ours)
    if decision.toggle_override:
        return device_object(device, decision.standing)
    written = decision.requested
    if isinstance(request, int) and written is not None:  # torch reads an int as the
        return func(written.type, written.index)  # current accelerator's: here CUDA's
    return func(*args, **kwargs)


def tensor_device(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.device`` on accelerator hosts: a tensor really on the CPU reads
    :data:`~torchdevice.redirecting.standing.READ_CPU`, so that ``x.to(t.device)`` lands where ``t``
    is, as natively, instead of on the accelerator an explicit ``"cpu"`` is sent to."""
    device = func(*args)
    if device.type == "cpu" and not is_tracing():
        return READ_CPU
    return device


def tensor_numpy(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.numpy()`` reads the host copy of an accelerator tensor.

    Also ``Tensor.__array__`` (``dtype=``), the way NumPy reaches a tensor itself:
    ``np.asarray(t)``, ``np.array(t)``, and NumPy functions given a tensor
    (``np.argsort(t.cpu()[i])`` in whisper's beam search falls back to ``__array__`` when
    ``Tensor.argsort`` rejects its keywords). Natively ``t.cpu()`` is host memory that the
    array shares; on an accelerator host it is device memory, so the array is a copy: its
    values are the tensor's, and writes to it stay in the array (docs/policy.md).
    """
    tensor = args[0]
    if tensor.is_cpu:
        return func(*args, **kwargs)
    return func(tensor.cpu(), *args[1:], **kwargs)


def tensor_array_wrap(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.__array_wrap__``: NumPy's result for a tensor (``np.sin(t.cpu())``, the
    indices of ``np.argsort``) as a tensor where the input is.

    Natively the input is a host tensor and torch wraps the result with
    ``torch.from_numpy``, a host tensor that mixes with the program's other host tensors.
    On an accelerator host those live on the accelerator, standing for the host, so the
    result goes there too and stands for the host: ``x + np.sin(x)`` works as natively.
    The array it wraps is NumPy's fresh result, which nothing else holds. A float64
    result (NumPy promotes ``float32 + float64``) meets the float64 rule on MPS, as a
    host tensor moved there does.
    """
    tensor = args[0]
    result = func(*args, **kwargs)
    if tensor.is_cpu or not isinstance(result, torch.Tensor) or not result.is_cpu:
        return result
    device = tensor.device
    dtype = rt.narrow_float64("Tensor.__array_wrap__", device, result.dtype)
    return mark_placed(result.to(device, dtype), "host")


def pin_memory(
    rt: Runtime, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.pin_memory()``: pinning is a host-to-device transfer optimisation.

    A tensor already on the accelerator (a redirected factory put it there; DataLoader's
    pin-memory thread pins whatever the dataset returns) is returned as is, ready for the
    transfer it was being prepared for; natively, pinning it would raise. Without CUDA
    there is no pinned memory: a CPU tensor the user's code pins gets an ordinary copy, as
    a pinned one would be. Torch's own pinning (the DataLoader's pin-memory thread, every
    batch) gets the tensor itself: the batch is fresh and nothing else holds it, so a
    copy would buy nothing and cost every batch a copy (benchmarks/README.md).
    """
    tensor = args[0]
    if not tensor.is_cpu:
        return tensor
    if rt.pins("cpu"):
        return func(*args, **kwargs)
    maker = callsite.entered(pin_memory)
    if maker is not None and callsite.is_internal(maker.f_code):
        return tensor
    _note_pin(rt, "Tensor.pin_memory", "cuda", "cpu")
    return tensor.clone()
