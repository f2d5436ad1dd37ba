"""Registering the simulated device with PyTorch: once per process, and all or nothing.

Why a module of its own: registration is the one step that cannot be undone. PyTorch renames
its PrivateUse1 backend once per process, so :func:`register` checks everything that can fail
first (the overloads exist, the C++ half builds: :mod:`torchdevice.simulated_mps.native`),
then renames, then installs the pieces in order: the device module
(:mod:`~torchdevice.simulated_mps.device_module`), the kernels
(:mod:`~torchdevice.simulated_mps.kernels`, :mod:`~torchdevice.simulated_mps.lstm`), autocast's
pass-through, the fallback for every op without a kernel
(:mod:`~torchdevice.simulated_mps.fallback`), the patches where torch names MPS
(:mod:`~torchdevice.simulated_mps.mps_by_name`) and the compile backend
(:mod:`~torchdevice.simulated_mps.compile_backend`). It remembers what it did, so a second
call returns at once, and a failure after the rename is reported by every later call.
"""

from __future__ import annotations

import threading
from typing import Final, NamedTuple

import torch
from torch.utils.backend_registration import (
    generate_methods_for_privateuse1_backend,
    rename_privateuse1_backend,
)

from torchdevice.simulated_mps import compile_backend, native
from torchdevice.simulated_mps.device_module import DeviceModule
from torchdevice.simulated_mps.dispatch import overload
from torchdevice.simulated_mps.fallback import missing_kernel
from torchdevice.simulated_mps.kernels import Kernels
from torchdevice.simulated_mps.lstm import LstmKernels, lstm_as_on_mps
from torchdevice.simulated_mps.mps_by_name import print_like_mps, unscale_like_mps
from torchdevice.simulated_mps.op_set import supported_ops, supported_sparse_ops

__all__ = [
    "DEFAULT_NAME",
    "is_registered",
    "register",
    "registered_name",
    "registered_overloads",
    "registered_sparse_overloads",
]

#: The device type the backend registers as when no name is given.
DEFAULT_NAME: Final = "simgpu"


class _State(NamedTuple):
    """What :func:`register` did, kept so that a second call can check and return early."""

    name: str
    device: torch.device
    libraries: tuple[torch.library.Library, ...]  # registrations live as long as these do
    module: DeviceModule
    overloads: frozenset[str]
    sparse_overloads: frozenset[str]


_state: _State | None = None
#: Why a registration failed after the permanent rename: later calls report it, not a rename.
_failure: str | None = None
_register_lock = threading.Lock()


def registered_name() -> str | None:
    """The name the backend was registered under in this process, or None."""
    return None if _state is None else _state.name


def is_registered() -> bool:
    """Whether :func:`register` has run in this process."""
    return _state is not None


def register(name: str = DEFAULT_NAME) -> str:
    """Register the simulated accelerator as device type ``name`` and return ``name``.

    Safe to call again with the same name (it returns at once). It cannot be undone: PyTorch
    renames PrivateUse1 once per process, so a second name, or a PrivateUse1 backend someone
    else registered, raises ``RuntimeError`` instead of half-registering over it.

    After it, ``torch.device(name)`` works everywhere a device does, ``torch.<name>`` is a small
    device module (``is_available``, ``device_count``, ``manual_seed``...), and
    ``torch.accelerator`` reports this device, as it would on a machine with a real one.
    """
    global _state, _failure
    with _register_lock:
        current = torch._C._get_privateuse1_backend_name()
        if _failure is not None:
            raise RuntimeError(f"registering the simulated accelerator failed earlier: {_failure}")
        if _state is not None:
            if _state.name != name:
                raise RuntimeError(
                    f"the simulated accelerator is already registered as {_state.name!r} in "
                    f"this process and cannot be renamed to {name!r}: PyTorch renames its "
                    "PrivateUse1 backend once per process. Use the existing name, or run in a "
                    "new process."
                )
            return name
        if current != "privateuseone":
            raise RuntimeError(
                f"PrivateUse1 is already the {current!r} backend in this process, so the "
                f"simulated accelerator cannot register as {name!r}. Run it in a process "
                "that loads no other out-of-tree backend."
            )
        for operator in (
            supported_ops() | supported_sparse_ops()
        ):  # fail before the permanent rename
            overload(operator)
        native.load()  # the allocator, guard and hooks: a build error leaves torch untouched
        module = DeviceModule(name)
        rename_privateuse1_backend(name)
        try:
            _state = _install(name, module)
        except BaseException as error:
            _failure = f"{type(error).__name__}: {error}"
            raise
        return name


def _install(name: str, module: DeviceModule) -> _State:
    """Everything after the rename: device module, hooks, guard, kernels."""
    device = torch.device(name, 0)
    generate_methods_for_privateuse1_backend(for_storage=True)
    torch._register_device_module(name, module)  # type: ignore[no-untyped-call]  # untyped in torch
    kernels = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    backend = Kernels(name, device, module)
    overloads, sparse_overloads = backend.install(kernels, LstmKernels(backend).by_overload())
    for key in ("AutogradPrivateUse1", "PrivateUse1"):  # with autograd, and without (inference)
        kernels.impl("lstm.input", lstm_as_on_mps, key)  # type: ignore[no-untyped-call]  # untyped in torch
    # Autocast: the C++ half registers PyTorch's shared casting rules at AutocastPrivateUse1
    # (as MPS does at AutocastMPS); every other op passes through autocast uncast.
    autocast = torch.library.Library("_", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    autocast.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")  # type: ignore[no-untyped-call]  # untyped in torch
    # Every op without a kernel here, of any namespace, fails as MPS fails: MPS registers
    # mps_error_fallback for all ops (TORCH_LIBRARY_IMPL(_, MPS, m) in MPSFallback.mm). The
    # dispatcher prefers composite kernels to a backend fallback, as it does on MPS.
    missing = torch.library.Library("_", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    missing.fallback(missing_kernel(name), "PrivateUse1")  # type: ignore[no-untyped-call]  # untyped in torch
    print_like_mps(name)
    unscale_like_mps(name)
    compile_backend.install(name)
    return _State(name, device, (kernels, autocast, missing), module, overloads, sparse_overloads)


def registered_overloads() -> frozenset[str]:
    """Every ``aten::op.overload`` that has a kernel (working or failing) on the device."""
    if _state is None:
        raise RuntimeError("the simulated accelerator is not registered: call register() first")
    return _state.overloads


def registered_sparse_overloads() -> frozenset[str]:
    """Every ``aten::op.overload`` with a kernel for sparse COO tensors on the device."""
    if _state is None:
        raise RuntimeError("the simulated accelerator is not registered: call register() first")
    return _state.sparse_overloads
