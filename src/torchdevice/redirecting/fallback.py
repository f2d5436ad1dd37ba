"""Rerun on the CPU the ops the accelerator cannot run.

The fallback lives in the function mode's error path, not in a ``TorchDispatchMode``: a
dispatch mode runs Python on every aten op and turns ``torch.compile`` into eager
execution (benchmarks/README.md), while a ``try`` around the call costs nothing until an
op fails. When a call
raises a *device-capability* error on the accelerator, the call is rerun with its tensor
arguments copied to the CPU, and its tensor results are moved back — same return
structure, dtypes and autograd (the copies are differentiable, so gradients flow through
the CPU op, in backward too). Any other error propagates unchanged.

Rules copied in spirit from ``run_fallback_kernel`` in ``torch/_subclasses/fake_tensor.py``:

* in-place ops and ``out=`` calls write the CPU result back into the original tensors;
* a result that aliases an input (a view) cannot be reproduced by a copy: the original
  error is re-raised;
* only calls whose tensors sit on the host's accelerator fall back (a failing ``meta`` or
  CPU op is a real error), and the rerun itself failing re-raises the *original* error.

A call that fell back once goes straight to the CPU afterwards, per function, input
dtypes and device, until ``disable()``; every fallback is logged once per call site and
counted in the migration report.

Which errors mean "the device cannot run this" is one table, :data:`CAPABILITY_ERRORS`;
which calls are never rerun, whatever they raise, is another, :data:`NEVER_RERUN`.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import torch
from torch.utils._pytree import tree_flatten, tree_map_only

from torchdevice.redirecting.policy import is_inplace
from torchdevice.redirecting.runtime import Runtime
from torchdevice.reporting.recorder import api_name

__all__ = [
    "CAPABILITY_ERRORS",
    "CAPABILITY_ERROR_TYPES",
    "NEVER_RERUN",
    "CapabilityError",
    "Fallback",
    "Unsupported",
    "is_capability_error",
]


class CapabilityError(NamedTuple):
    """One kind of error that says "this device cannot run this call"."""

    kind: type[Exception]
    #: Searched in the message; ``None``: every error of ``kind`` counts.
    message: re.Pattern[str] | None
    #: A message of this kind, as PyTorch words it (the tests check each one matches).
    example: str


#: The errors that count as "the device cannot run this", and the only ones: a call that
#: raises anything else (shape, dtype promotion, device mismatch, float64 on MPS...) is
#: wrong on every device, and its error propagates unchanged.
CAPABILITY_ERRORS: Final[tuple[CapabilityError, ...]] = (
    # A missing kernel, whatever its wording: the dispatcher's "Could not run", MPS's error
    # fallback (mps_error_fallback, aten/src/ATen/mps/MPSFallback.mm), and every
    # TORCH_CHECK_NOT_IMPLEMENTED in a kernel ("only strided tensors are supported on MPS").
    CapabilityError(
        NotImplementedError,
        None,
        "The operator 'aten::heaviside.out' is not currently implemented for the MPS device.",
    ),
    # AT_DISPATCH_* of a kernel that has no code for a dtype (Dispatch.h: "not implemented
    # for"), and MPS's error text when it reaches Python as a RuntimeError.
    CapabilityError(
        RuntimeError,
        re.compile(r"not (?:currently )?implemented for"),
        "\"addmm_impl_cpu_\" not implemented for 'Half'",
    ),
    # The dispatcher's missing-kernel text (NotImplementedError from Python) when code in
    # between re-raises it as a RuntimeError.
    CapabilityError(
        RuntimeError,
        re.compile(r"Could not run '[\w:.]+' with arguments from the '\w+' backend"),
        "Could not run 'aten::_fft_r2c' with arguments from the 'MPS' backend.",
    ),
    # Backends' "not supported" checks naming the backend or device.
    CapabilityError(
        RuntimeError,
        re.compile(
            r"not supported (?:on|for|by) the|is not currently supported on the \w+ backend"
        ),
        "The operator 'aten::_linalg_eigh' is not currently supported on the MPS backend.",
    ),
    # Backends' dtype and feature checks ("MPS does not support cumsum op with int64 input").
    CapabilityError(
        RuntimeError,
        re.compile(r"doesn't support|does not support .*(?:dtype|device|backend)"),
        "MPS does not support cumsum op with int64 input on this device",
    ),
    # An MPS kernel refusing a dtype the device can hold (complex128, float8...):
    # getMPSDataType in aten/src/ATen/native/mps/OperationUtils.mm, TORCH_CHECK_TYPE. The
    # CPU can compute it and the result can come back. Not float64: MPS cannot hold it at
    # all ("Cannot convert a MPS Tensor to float64 dtype", EmptyTensor.cpp), so no result
    # could come back; the dtype rule narrows float64 requests instead (docs/fallback.md).
    CapabilityError(
        TypeError,
        re.compile(r"Trying to convert \w+ to the \w+ backend but it does not have support"),
        "Trying to convert ComplexDouble to the MPS backend but it does not have support for "
        "that dtype.",
    ),
)

#: The exception classes the mode's ``except`` clause catches: those of the table.
CAPABILITY_ERROR_TYPES: Final[tuple[type[Exception], ...]] = tuple(
    dict.fromkeys(rule.kind for rule in CAPABILITY_ERRORS)
)

#: Calls never rerun on the CPU, whatever they raise: their meaning is the identity of their
#: tensors, which a copy does not keep. Autograd's entry points run backward kernels on the
#: graph that reaches the tensors they are given; rerun on CPU copies (which have no graph)
#: they return no gradients, or zeros, instead of the error of the missing backward kernel.
NEVER_RERUN: Final[frozenset[Callable[..., Any]]] = frozenset(
    {torch.autograd.grad, torch.autograd.backward, torch.Tensor.backward}
)

_CPU: Final = torch.device("cpu")

_Key = tuple[Callable[..., Any], tuple[torch.dtype, ...], torch.device]


def is_capability_error(error: BaseException) -> bool:
    """Whether ``error`` says the device cannot run the call (not that the call is wrong):
    whether a rule of :data:`CAPABILITY_ERRORS` matches its class and message."""
    for rule in CAPABILITY_ERRORS:
        if isinstance(error, rule.kind) and (
            rule.message is None or rule.message.search(str(error)) is not None
        ):
            return True
    return False


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    leaves, _ = tree_flatten((args, kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _storage(tensor: torch.Tensor) -> int:
    """The address of ``tensor``'s memory, -1 when it has none to alias.

    Empty storages all sit at address 0: an empty result is no view of an empty input.
    """
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse / nested: no plain storage
        return -1
    return int(storage.data_ptr()) if storage.nbytes() else -1


class Unsupported(Exception):
    """Internal: the fallback does not apply; the caller re-raises the original error."""


class Fallback:
    """The fallback of one activation: which device falls back, and what fell back."""

    def __init__(self, runtime: Runtime, device_type: str, enabled: bool = True) -> None:
        self.runtime = runtime
        self.device_type = device_type
        self.enabled = enabled
        #: Functions with at least one cached fallback: the mode's cheap first check.
        self.functions: set[Callable[..., Any]] = set()
        self._keys: set[_Key] = set()
        self._lock = threading.Lock()

    # -- the mode's two entry points ---------------------------------------------------
    def cached(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Whether this call, by function, input dtypes and device, fell back before."""
        device = self._device(args, kwargs)
        return device is not None and (func, self._dtypes(args, kwargs), device) in self._keys

    def reset(self) -> None:
        """Forget every cached fallback (``disable()`` calls it: a later activation, maybe
        on another device or torch build, starts by trying the device again)."""
        with self._lock:
            self._keys.clear()
            self.functions.clear()

    def rerun(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: BaseException | None = None,
    ) -> Any:
        """Run ``func`` on the CPU and move results back; raise ``error`` if impossible.

        Called inside the mode's ``except`` block, so a bare ``raise`` by the caller keeps
        the original traceback; here ``Unsupported`` signals "not applicable".
        """
        device = self._device(args, kwargs)
        if device is None or func in NEVER_RERUN:
            raise Unsupported
        if not self.enabled:
            if error is not None:
                fallback_hint(error)
            raise Unsupported
        cpu_args, cpu_kwargs = tree_map_only(
            torch.Tensor, lambda t: t.cpu() if t.device == device else t, (args, kwargs)
        )
        requested = _as_device(cpu_kwargs.get("device"))
        if requested is not None and requested.type == device.type:
            cpu_kwargs["device"] = _CPU  # a factory: made on the CPU, then moved
        inputs = {_storage(t) for t in _tensors(cpu_args, cpu_kwargs)} - {-1}
        try:
            result = func(*cpu_args, **cpu_kwargs)
        except Exception:
            raise Unsupported from None
        out = kwargs.get("out")
        if is_inplace(func) or out is not None:
            call, cpu_call = (args, kwargs), (cpu_args, cpu_kwargs)
            return self._write_back(device, func, call, cpu_call, result, error)
        for tensor in _tensors((result,), {}):
            if _storage(tensor) in inputs:
                raise Unsupported  # a view of an input: a copy would break aliasing
        moved = tree_map_only(torch.Tensor, lambda t: t.to(device), result)
        self._remember(func, args, kwargs, device, error)
        return moved

    # -- helpers -----------------------------------------------------------------------
    def _device(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
        """The accelerator the call ran on: that of its non-CPU tensors, or, for a factory
        with none (``torch.logspace(0, 1, 5, device="cuda")``), its ``device=`` argument
        once the mode's handler has rewritten it to the accelerator."""
        devices = {t.device for t in _tensors(args, kwargs) if t.device.type != "cpu"}
        if not devices:
            requested = _as_device(kwargs.get("device"))
            if requested is not None:
                devices = {requested}
        if len(devices) != 1:
            return None
        (device,) = devices
        return device if device.type == self.device_type else None

    @staticmethod
    def _dtypes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.dtype, ...]:
        return tuple(t.dtype for t in _tensors(args, kwargs))

    def _write_back(
        self,
        device: torch.device,
        func: Callable[..., Any],
        call: tuple[tuple[Any, ...], dict[str, Any]],
        cpu_call: tuple[tuple[Any, ...], dict[str, Any]],
        result: Any,
        error: BaseException | None,
    ) -> Any:
        """In-place and ``out=``: copy each CPU-side mutated tensor into its original."""
        args, kwargs = call
        originals = _tensors(args, kwargs)
        copies = _tensors(*cpu_call)
        for original, copy in zip(originals, copies, strict=True):
            if original is copy or original.device.type == "cpu":
                continue
            if copy.shape != original.shape:
                original.resize_(copy.shape)
            original.copy_(copy)
        self._remember(func, args, kwargs, device, error)
        out = kwargs.get("out")
        if out is not None:
            return out
        if is_inplace(func) and args and isinstance(args[0], torch.Tensor):
            return args[0]
        return tree_map_only(torch.Tensor, lambda t: t.to(device), result)

    def _remember(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        device: torch.device,
        error: BaseException | None,
    ) -> None:
        dtypes = self._dtypes(args, kwargs)
        key = (func, dtypes, device)
        first = key not in self._keys
        with self._lock:
            self._keys.add(key)
            self.functions.add(func)
        reason = (
            "cached: failed before on this device"
            if error is None and not first
            else (_first_line(error) if error is not None else "in-place fallback")
        )
        requested = ", ".join([str(device), *(str(d).removeprefix("torch.") for d in dtypes)])
        self.runtime.note_event("fallback", api_name(func), requested, "cpu", reason)


def _as_device(value: object) -> torch.device | None:
    """A ``device=`` argument as a ``torch.device``; None for anything else (ints too: an
    int names a CUDA index, which the mode has already rewritten)."""
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        try:
            return torch.device(value)
        except RuntimeError:
            return None
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


def fallback_hint(error: BaseException) -> None:
    """With fallback off, tell the user how to turn it on (Python 3.11+ exception notes)."""
    if sys.version_info >= (3, 11):
        error.add_note(
            "torchdevice: this op is not supported on the device; enable(fallback=True) "
            "(or TORCHDEVICE_FALLBACK=1) reruns such ops on the CPU."
        )
