"""The simulated MPS device: MPS's op set, errors and dtypes on the CPU, as a real PyTorch
backend (``--host simulated-mps``, ``TORCHDEVICE_HOST=simulated-mps``,
``torchdevice.enable(host="simulated-mps")``, or :func:`register` directly).

Why it exists: no CI machine has MPS or a GPU, yet torchdevice's interesting paths (send a
CUDA request to the accelerator, rerun an op the accelerator lacks on the CPU) only run when
an accelerator is there. Mocks would test the mock. This package registers a real backend
through PyTorch's PrivateUse1 dispatch key, so a tensor on it goes through the same dispatcher,
autograd and device checks as a tensor on MPS, and:

* **holds data**: every tensor's storage is real CPU memory, so values survive any round trip
  and can be compared with a CPU reference;
* **computes what MPS computes**: the op overloads MPS has a kernel for in the installed torch
  (:func:`supported_ops`, read from the wheel's ``native_functions.yaml`` by
  :mod:`torchdevice.simulated_mps.mps_ops`) run the CPU kernel on CPU *aliases* of the same memory
  (views stay views, in-place ops write in place), from one boxed C++ kernel for plain ops
  and Python kernels for the rest;
* **lacks what MPS lacks, the way MPS does**: every other op (:func:`missing_ops` are those
  the CPU has) reaches a boxed fallback that raises MPS's own ``NotImplementedError`` ("The
  operator 'aten::heaviside.out' is not currently implemented for the simgpu device...",
  ``mps_error_fallback`` in ``aten/src/ATen/mps/MPSFallback.mm``), for ops of every namespace,
  as on MPS with ``PYTORCH_ENABLE_MPS_FALLBACK`` unset. Nothing silently computes on the
  wrong device. With ``PYTORCH_ENABLE_MPS_FALLBACK=1`` in the environment when the device
  registers (MPS reads it at torch's import), those ops run on the CPU instead, with MPS's
  warning, as ``mps_cpu_fallback`` does (:mod:`torchdevice.simulated_mps.fallback`);
* **has MPS's dtypes**: no float64 (allocating one raises MPS's ``TypeError``, "Cannot convert a
  simgpu Tensor to float64 dtype..."), and kernels refuse the dtypes MPS kernels refuse
  (complex128, float8...: :data:`~torchdevice.simulated_mps.mps_ops.MPS_DTYPES`). Copies, views and
  allocation take any other dtype, as on MPS.

Ops that PyTorch implements once for all backends (``CompositeExplicitAutograd`` or
``CompositeImplicitAutograd``: ``transpose``, ``expand``, ``_to_copy``, ``linear``...) work here
as they work on every real backend: they decompose into the ops listed.

What stays unlike MPS: kernels are the CPU's, so where the CPU kernel lacks a dtype that MPS has
(or computes it differently) this device follows the CPU; and ops MPS routes to MPS-only kernels
from C++ (``_mps_convolution``, ``_lstm_mps``, its SDPA) take the generic path here
(``convolution_overrideable``: missing, so it falls back; SDPA's math decomposition).

Registration is process-global and permanent: PyTorch can rename PrivateUse1 once per process
and has no way to undo it, so there is no ``unregister()``. :func:`register` is idempotent; run
tests that must not see the backend in a separate process.

How memory works: the device has a C++ half (``csrc/``, built on first use and cached by
:mod:`torchdevice.simulated_mps.native`) that gives PyTorch what it asks any device for:
an allocator (device memory is CPU memory), a device guard (one device; streams are labels,
events host-clock timestamps), a generator type, a pinned-memory allocator and the
PrivateUse1 hooks. So ``torch.UntypedStorage(n, device=name)``, ``copy.deepcopy``,
``torch.save``/``torch.load`` with any ``map_location``, ``pickle``, ``pin_memory()``,
``UntypedStorage.resize_`` and ``torch.Generator(device=name)`` go through PyTorch's own code
paths, as they do for MPS. A kernel's CPU result becomes a device tensor without a copy: the
C++ half *adopts* its storage (the device storage holds a reference to the CPU one, and is
freed with the last tensor using it). Geometry (sizes, strides, offset) lives in the device
tensor itself, so ``stride()``, ``is_contiguous()``, ``_base`` and ``data_ptr()`` answer as on
a real device.

Limits:

* one device, ``<name>:0``; kernels run synchronously on the CPU (plain ops in the C++
  half's kernel, a few microseconds over the CPU's; random ops and copies between devices in
  Python, hundreds), so timing means nothing;
* random ops draw from the device's generators (``torch.<name>.default_generator``, seeded
  by ``torch.manual_seed``, or ``torch.Generator(device=name)``); each holds the CPU's
  Mersenne Twister state, so a device stream equals the CPU stream with the same seed (MPS's
  Philox gives other numbers). A CPU generator is refused, as CUDA and MPS refuse it;
* autocast casts by the rules PyTorch's backends share (``ATen/autocast_mode.h``), which
  MPS's own list follows; ``torch.compile`` works (dynamo's fake tensors
  carry the device), but inductor has no code generator for the device, so the default
  backend compiles graphs on it with ``aot_eager``, logged
  (:mod:`torchdevice.simulated_mps.compile_backend`).

Where things are, split the way PyTorch's own out-of-tree example backend (OpenReg) splits a
device: :mod:`~torchdevice.simulated_mps.registration` (:func:`register`, once per process);
:mod:`~torchdevice.simulated_mps.device_module` (``torch.<name>``);
:mod:`~torchdevice.simulated_mps.mps_ops` (what MPS has, read from torch's files) and
:mod:`~torchdevice.simulated_mps.op_set` (what this device computes and lacks);
:mod:`~torchdevice.simulated_mps.kernels`, :mod:`~torchdevice.simulated_mps.lstm`,
:mod:`~torchdevice.simulated_mps.dispatch` (the CPU-backed kernels);
:mod:`~torchdevice.simulated_mps.fallback` (ops it lacks);
:mod:`~torchdevice.simulated_mps.mps_by_name` and
:mod:`~torchdevice.simulated_mps.compile_backend` (where torch names MPS, ``torch.compile``);
:mod:`~torchdevice.simulated_mps.native` and ``csrc/`` (the C++ half: allocator, host
allocator, generator, guard, hooks, common kernel, autocast, operators).

This package is not imported by ``import torchdevice``: registering a backend is
process-global and permanent, so only code that asks for it gets it. The core finds it through
the ``torchdevice.backends`` entry-point group (``pyproject.toml``), loaded by
:mod:`torchdevice.extra_backends` only when a host choice it does not know is asked for:
:func:`extra_backend` is that entry point. Importing the package also announces the device
there, so that a device registered by a direct :func:`register` call is found as the MPS
host's.
"""

from __future__ import annotations

from torchdevice import extra_backends
from torchdevice.simulated_mps.op_set import missing_ops, supported_ops, supported_sparse_ops
from torchdevice.simulated_mps.registration import (
    DEFAULT_NAME,
    is_registered,
    register,
    registered_name,
    registered_overloads,
    registered_sparse_overloads,
)

__all__ = [
    "CHOICE",
    "DEFAULT_NAME",
    "extra_backend",
    "is_registered",
    "missing_ops",
    "register",
    "registered_name",
    "registered_overloads",
    "registered_sparse_overloads",
    "supported_ops",
    "supported_sparse_ops",
]


#: The host choice that asks for the simulated device (``--host``, ``TORCHDEVICE_HOST``):
#: the name of this package's entry point in the ``torchdevice.backends`` group
#: (``pyproject.toml``), spelled nowhere in the core.
CHOICE = "simulated-mps"


def _start() -> str:
    """The simulated device's type, registering it in this process if need be (a device
    already registered under another name is reused)."""
    return registered_name() or register()


def extra_backend() -> extra_backends.ExtraBackend:
    """The simulated device as the host probe knows it: host choice ``"simulated-mps"``,
    standing for ``"mps"`` (the ``torchdevice.backends`` entry point of this package)."""
    return extra_backends.ExtraBackend(
        choice=CHOICE, stands_for="mps", start=_start, device_type=registered_name
    )


extra_backends.announce(extra_backend())
