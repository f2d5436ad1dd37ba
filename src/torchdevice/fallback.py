"""Rerun on the CPU the ops the accelerator cannot run (SPEC §4).

The fallback lives in the function mode's error path, not in a ``TorchDispatchMode``: a
dispatch mode costs ~4 µs on every aten op and turns ``torch.compile`` into eager
execution, while a ``try`` around the call costs nothing until an op fails. When a call
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

A call that fell back once goes straight to the CPU afterwards, per function and input
dtypes; every fallback is logged once per call site and counted in the migration report.
"""

from __future__ import annotations

import re
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map_only

from torchdevice.report import api_name
from torchdevice.runtime import Runtime

__all__ = ["Fallback", "Unsupported", "is_capability_error", "observe_native", "unobserve_native"]

#: Messages of device-capability errors (MPS, CUDA, PrivateUse1 backends, dtype gaps).
_CAPABILITY = re.compile(
    r"not (?:currently )?implemented for|not supported (?:on|for|by) the|"
    r"Could not run '[\w:.]+' with arguments from the '\w+' backend|"
    r"doesn't support|does not support .*(?:dtype|device|backend)|"
    r"is not currently supported on the \w+ backend"
)

_Key = tuple[Callable[..., Any], tuple[torch.dtype, ...]]


def is_capability_error(error: BaseException) -> bool:
    """Whether ``error`` says the device cannot run the op (not that the call is wrong).

    ``NotImplementedError`` always is (PyTorch raises it for missing kernels); it is a
    subclass of ``RuntimeError``, so it is checked first. A ``RuntimeError`` is one only
    when its message says so; shape, dtype-promotion and device-mismatch errors are not.
    """
    if isinstance(error, NotImplementedError):
        return True
    if isinstance(error, RuntimeError):
        return _CAPABILITY.search(str(error)) is not None
    return False


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    leaves, _ = tree_flatten((args, kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _storage(tensor: torch.Tensor) -> int:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # sparse / nested: no plain storage
        return -1


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
        """Whether this call, by function and input dtypes, fell back before."""
        return (func, self._dtypes(args, kwargs)) in self._keys

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
        if device is None:
            raise Unsupported
        if not self.enabled:
            if error is not None:
                fallback_hint(error)
            raise Unsupported
        cpu_args, cpu_kwargs = tree_map_only(
            torch.Tensor, lambda t: t.cpu() if t.device == device else t, (args, kwargs)
        )
        inputs = {_storage(t) for t in _tensors(cpu_args, cpu_kwargs)} - {-1}
        try:
            result = func(*cpu_args, **cpu_kwargs)
        except Exception:
            raise Unsupported from None
        out = kwargs.get("out")
        if _is_inplace(func) or out is not None:
            return self._write_back(func, args, kwargs, cpu_args, cpu_kwargs, result)
        for tensor in _tensors((result,), {}):
            if _storage(tensor) in inputs:
                raise Unsupported  # a view of an input: a copy would break aliasing
        moved = tree_map_only(torch.Tensor, lambda t: t.to(device), result)
        self._remember(func, args, kwargs, device, error)
        return moved

    # -- helpers -----------------------------------------------------------------------
    def _device(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
        devices = {t.device for t in _tensors(args, kwargs) if t.device.type != "cpu"}
        if len(devices) != 1:
            return None
        (device,) = devices
        return device if device.type == self.device_type else None

    @staticmethod
    def _dtypes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.dtype, ...]:
        return tuple(t.dtype for t in _tensors(args, kwargs))

    def _write_back(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        cpu_args: tuple[Any, ...],
        cpu_kwargs: dict[str, Any],
        result: Any,
    ) -> Any:
        """In-place and ``out=``: copy each CPU-side mutated tensor into its original."""
        originals = _tensors(args, kwargs)
        copies = _tensors(cpu_args, cpu_kwargs)
        for original, copy in zip(originals, copies, strict=True):
            if original is copy or original.device.type == "cpu":
                continue
            if copy.shape != original.shape:
                original.resize_(copy.shape)
            original.copy_(copy)
        device = originals[0].device if originals else None
        self._remember(func, args, kwargs, device, None)
        out = kwargs.get("out")
        if out is not None:
            return out
        if _is_inplace(func) and args and isinstance(args[0], torch.Tensor):
            return args[0]
        return tree_map_only(torch.Tensor, lambda t: t.to(device), result)

    def _remember(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        device: torch.device | None,
        error: BaseException | None,
    ) -> None:
        dtypes = self._dtypes(args, kwargs)
        key = (func, dtypes)
        first = key not in self._keys
        with self._lock:
            self._keys.add(key)
            self.functions.add(func)
        reason = "cached: failed before on this device" if error is None and not first else (
            _first_line(error) if error is not None else "in-place fallback"
        )  # fmt: skip
        requested = f"{device}, {', '.join(str(d).removeprefix('torch.') for d in dtypes)}"
        self.runtime.note_event("fallback", api_name(func), requested, "cpu", reason)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


def _is_inplace(func: Callable[..., Any]) -> bool:
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


def fallback_hint(error: BaseException) -> None:
    """With fallback off, tell the user how to turn it on (Python 3.11+ exception notes)."""
    if sys.version_info >= (3, 11):
        error.add_note(
            "torchdevice: this op is not supported on the device; enable(fallback=True) "
            "(or TORCHDEVICE_FALLBACK=1) reruns such ops on the CPU."
        )


# -- PyTorch's own MPS fallback -----------------------------------------------------------
# With PYTORCH_ENABLE_MPS_FALLBACK=1 (read by torch at import; `python -m torchdevice` sets
# it on macOS before torch loads) torch reruns unsupported MPS ops on the CPU itself,
# backward ops included, and says so once per op in a UserWarning. Those ops never raise,
# so the report learns of them from the warning.
_NATIVE = re.compile(
    r"The operator '(?P<op>[\w:.]+)' is not currently supported on the MPS backend and "
    r"will fall back to run on the CPU"
)
_original_showwarning: Callable[..., None] | None = None


def observe_native(get_runtime: Callable[[], Runtime | None]) -> None:
    """Count torch's native MPS fallbacks in the migration report (wraps showwarning)."""
    global _original_showwarning
    if _original_showwarning is not None:
        return
    original = warnings.showwarning
    _original_showwarning = original

    def showwarning(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
        match = _NATIVE.search(str(message))
        rt = get_runtime()
        if match is not None and rt is not None:
            rt.note_event("fallback", match["op"], "mps", "cpu", "PyTorch's MPS fallback (native)")
        original(message, category, *args, **kw)

    warnings.showwarning = showwarning


def unobserve_native() -> None:
    """Put ``warnings.showwarning`` back."""
    global _original_showwarning
    if _original_showwarning is not None:
        warnings.showwarning = _original_showwarning
        _original_showwarning = None
