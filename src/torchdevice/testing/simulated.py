"""A simulated accelerator: a PyTorch backend that holds real data and lacks some ops on purpose.

Why it exists: no CI machine has MPS or a GPU, yet torchdevice's interesting paths (send a
CUDA request to the accelerator, rerun an op the accelerator lacks on the CPU) only run when
an accelerator is there. Mocks would test the mock. This module registers a real backend
through PyTorch's PrivateUse1 dispatch key, so a tensor on it goes through the same dispatcher,
autograd and device checks as a tensor on MPS, and:

* **holds data**: every tensor's storage is real CPU memory, so values survive any round trip
  and can be compared with a CPU reference;
* **computes what MPS computes**: the op overloads MPS has a kernel for in the installed torch
  (:func:`supported_ops`, read from the wheel's ``native_functions.yaml`` by
  :mod:`torchdevice.testing.mps_ops`) run the CPU kernel on CPU *aliases* of the same memory
  (views stay views, in-place ops write in place), from one boxed C++ kernel for plain ops
  and Python kernels for the rest;
* **lacks what MPS lacks, the way MPS does**: every other op (:func:`missing_ops` are those
  the CPU has) reaches a boxed fallback that raises MPS's own ``NotImplementedError`` ("The
  operator 'aten::heaviside.out' is not currently implemented for the simgpu device...",
  ``mps_error_fallback`` in ``aten/src/ATen/mps/MPSFallback.mm``), for ops of every namespace,
  as on MPS with ``PYTORCH_ENABLE_MPS_FALLBACK`` unset. Nothing silently computes on the
  wrong device. With ``PYTORCH_ENABLE_MPS_FALLBACK=1`` in the environment when the device
  registers (MPS reads it at torch's import), those ops run on the CPU instead, with MPS's
  warning, as ``mps_cpu_fallback`` does (:func:`_cpu_fallback`);
* **has MPS's dtypes**: no float64 (allocating one raises MPS's ``TypeError``, "Cannot convert a
  simgpu Tensor to float64 dtype..."), and kernels refuse the dtypes MPS kernels refuse
  (complex128, float8...: :data:`~torchdevice.testing.mps_ops.MPS_DTYPES`). Copies, views and
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

How memory works: the device has a C++ half (``csrc/simulated.cpp``, built on first use and
cached by :mod:`torchdevice.testing.native`) that gives PyTorch what it asks any device for:
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
  (:mod:`torchdevice.testing.compile_backend`).
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, NamedTuple, NoReturn, cast

import torch
from torch.utils._mode_utils import no_dispatch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.backend_registration import (
    generate_methods_for_privateuse1_backend,
    rename_privateuse1_backend,
)

from torchdevice.testing import compile_backend, native
from torchdevice.testing.mps_ops import (
    MPS_DTYPES,
    mps_kernels,
    mps_sparse_kernels,
    scalar_type_name,
)

__all__ = [
    "DEFAULT_NAME",
    "is_registered",
    "missing_ops",
    "register",
    "registered_name",
    "registered_overloads",
    "registered_sparse_overloads",
    "supported_ops",
    "supported_sparse_ops",
]

#: The device type the backend registers as when no name is given.
DEFAULT_NAME: Final = "simgpu"


def _cpu_kernels(key: str = "CPU") -> frozenset[str]:
    """Every ``aten::`` overload the installed torch has a kernel for at ``key`` (``CPU``,
    or ``SparseCPU``: the dispatcher's own answer), composite ones left out: those decompose
    on every backend."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = set()
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        try:
            if has(name, key) and not has(name, "CompositeImplicitAutograd"):
                names.add(name)
        except RuntimeError:  # pragma: no cover - a name the dispatcher lists but cannot find
            continue
    return frozenset(names)


@functools.cache
def supported_ops() -> frozenset[str]:
    """The ``aten::op.overload`` names this device computes: exactly those MPS has a kernel for
    in the installed torch (:func:`~torchdevice.testing.mps_ops.mps_kernels`) that have a CPU
    kernel to run. Derived at run time, cached: nothing here is typed in by hand.

    Composite ops MPS overrides with its own CPU rerun (``linalg_svd`` in
    :data:`~torchdevice.testing.mps_ops.MPS_CPU_FALLBACK_OPS`) stay composite here: a Python
    kernel in their place would bypass their autograd formula, so they decompose into ops this
    device lacks, and fall back whole.
    """
    return _cpu_kernels() & mps_kernels()


@functools.cache
def supported_sparse_ops() -> frozenset[str]:
    """The ``aten::op.overload`` names this device computes on sparse COO tensors: those MPS
    has a ``SparseMPS`` kernel for that the CPU has a ``SparseCPU`` kernel to run. A sparse
    op MPS lacks fails as on MPS, with the dispatcher's "Could not run ... with arguments
    from the 'SparsePrivateUse1' backend" (MPS registers no fallback for sparse tensors)."""
    return _cpu_kernels("SparseCPU") & mps_sparse_kernels()


@functools.cache
def missing_ops() -> frozenset[str]:
    """The ``aten::op.overload`` names the CPU has a kernel for and MPS has none: on this
    device each raises MPS's own ``NotImplementedError``, and a CPU fallback can rerun it."""
    return _cpu_kernels() - mps_kernels()


#: Ops that legitimately take tensors on another device: the copies between devices, and
#: indexing, whose index tensors may stay on the CPU (as on CUDA and MPS).
_CROSS_DEVICE_OPS: Final = frozenset(
    {
        "copy_",
        "copy_sparse_to_sparse_",
        "_copy_from",
        "_copy_from_and_resize",
        "index",
        "index_put_",
        "_index_put_impl_",
        "equal",
    }
)

#: Packets that only allocate, copy or describe memory: MPS runs them for any dtype (its
#: ``empty_mps`` refuses only float64, its blit copies move bytes), while its compute kernels
#: look the dtype up in ``getMPSDataType`` and refuse the rest. Views are found from the schema.
_ANY_DTYPE_OPS: Final = frozenset(
    {
        "empty",
        "empty_strided",
        "set_",
        "resize_",
        "copy_",
        "_copy_from",
        "_copy_from_and_resize",
        "_local_scalar_dense",
    }
)

#: Overloads of supported packets that stay unimplemented, with the reason.
_LEFT_OUT: Final = {
    # its CPU kernel gives the tensor a fresh CPU storage: the tensor would change device
    "aten::set_": "set_() with no source",
}

_CPU: Final = torch.device("cpu")
_CPU_KEYS: Final = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


class _State(NamedTuple):
    """What :func:`register` did, kept so that a second call can check and return early."""

    name: str
    device: torch.device
    libraries: tuple[torch.library.Library, ...]  # registrations live as long as these do
    module: _DeviceModule
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
            _overload(operator)
        native.load()  # the allocator, guard and hooks: a build error leaves torch untouched
        module = _DeviceModule(name)
        rename_privateuse1_backend(name)
        try:
            _state = _install(name, module)
        except BaseException as error:
            _failure = f"{type(error).__name__}: {error}"
            raise
        return name


def _install(name: str, module: _DeviceModule) -> _State:
    """Everything after the rename: device module, hooks, guard, kernels."""
    device = torch.device(name, 0)
    generate_methods_for_privateuse1_backend(for_storage=True)
    torch._register_device_module(name, module)  # type: ignore[no-untyped-call]  # untyped in torch
    kernels = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    overloads, sparse_overloads = _Backend(name, device, module).install(kernels)
    for key in ("AutogradPrivateUse1", "PrivateUse1"):  # with autograd, and without (inference)
        kernels.impl("lstm.input", _lstm_as_on_mps, key)  # type: ignore[no-untyped-call]  # untyped in torch
    # Autocast: the C++ half registers PyTorch's shared casting rules at AutocastPrivateUse1
    # (as MPS does at AutocastMPS); every other op passes through autocast uncast.
    autocast = torch.library.Library("_", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    autocast.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")  # type: ignore[no-untyped-call]  # untyped in torch
    # Every op without a kernel here, of any namespace, fails as MPS fails: MPS registers
    # mps_error_fallback for all ops (TORCH_LIBRARY_IMPL(_, MPS, m) in MPSFallback.mm). The
    # dispatcher prefers composite kernels to a backend fallback, as it does on MPS.
    missing = torch.library.Library("_", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    missing.fallback(_missing_kernel(name), "PrivateUse1")  # type: ignore[no-untyped-call]  # untyped in torch
    _print_like_mps(name)
    _unscale_like_mps(name)
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


class _DeviceModule:
    """``torch.<name>``: the functions PyTorch and user code call on a device module.

    The generators are the C++ half's device generators (``torch.Generator(device=name)``
    builds one, :attr:`default_generator` is the device's default): the CPU's Mersenne
    Twister labelled as the device's, so random ops on the device draw from a stream separate
    from the CPU's, as on a real device, and ``torch.manual_seed`` seeds it (through
    ``manual_seed_all``). A kernel lends a generator's state to a CPU generator for the CPU
    kernel it runs (:meth:`_lent`), and takes the advanced state back.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        ops = getattr(torch.ops, native.NAMESPACE)
        self._ops = ops
        self.default_generator: torch.Generator = ops.default_generator()
        self._rng_lock = threading.RLock()

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def _lazy_init(self) -> None:
        """Nothing to initialise: the memory is the CPU's."""

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: torch.device | str | int) -> None:
        if torch.device(self.name, 0) != _as_device(device, self.name):
            raise RuntimeError(f"{self.name} has one device, {self.name}:0")

    @contextmanager
    def device(self, device: torch.device | str | int | None) -> Iterator[None]:
        """Make ``device`` current for a block: there is one device, so only check it."""
        if device is not None:
            self.set_device(device)
        yield

    def synchronize(self, device: torch.device | str | int | None = None) -> None:
        """Kernels run synchronously on the CPU: there is never anything to wait for."""

    def empty_cache(self) -> None:
        """Memory goes back to the CPU allocator as soon as the last tensor using it dies."""

    def memory_allocated(self, device: torch.device | str | int | None = None) -> int:
        """Bytes held by the device's storages now (the C++ allocator's count)."""
        return int(self._ops.memory_allocated())

    def max_memory_allocated(self, device: torch.device | str | int | None = None) -> int:
        """The peak of :meth:`memory_allocated` since the start or the last reset."""
        return int(self._ops.max_memory_allocated())

    def memory_reserved(self, device: torch.device | str | int | None = None) -> int:
        """No cache: what is reserved is what is allocated."""
        return self.memory_allocated(device)

    def max_memory_reserved(self, device: torch.device | str | int | None = None) -> int:
        return self.max_memory_allocated(device)

    def reset_peak_memory_stats(self, device: torch.device | str | int | None = None) -> None:
        self._ops.reset_peak_memory_stats()

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    def manual_seed(self, seed: int) -> None:
        self.default_generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def seed(self) -> None:
        self.default_generator.seed()

    def seed_all(self) -> None:
        self.seed()

    def initial_seed(self) -> int:
        return self.default_generator.initial_seed()

    def get_rng_state(self, device: torch.device | str | int | None = None) -> torch.Tensor:
        return self.default_generator.get_state()

    def set_rng_state(
        self, new_state: torch.Tensor, device: torch.device | str | int | None = None
    ) -> None:
        self.default_generator.set_state(new_state)

    @contextmanager
    def _lent(self, generator: torch.Generator) -> Iterator[torch.Generator]:
        """A CPU generator holding ``generator``'s state for one CPU kernel; the state it
        reaches goes back to ``generator`` (CPU kernels only take CPU generators)."""
        with self._rng_lock:
            cpu = torch.Generator()
            cpu.set_state(generator.get_state())
            try:
                yield cpu
            finally:
                generator.set_state(cpu.get_state())

    @contextmanager
    def _global_cpu_generator_at(self, state: torch.Tensor) -> Iterator[None]:
        """The CPU default generator at ``state`` (a device generator's, saved earlier) for
        one CPU computation that replays draws already made; nothing advances."""
        cpu = torch.default_generator
        with self._rng_lock:
            saved = cpu.get_state()
            cpu.set_state(state)
            try:
                yield
            finally:
                cpu.set_state(saved)

    @contextmanager
    def _as_global_cpu_generator(self) -> Iterator[None]:
        """Lend this device's RNG state to the CPU default generator for one op.

        For the few random kernels without a generator argument (``native_dropout``): they
        draw from the CPU default generator, which must not advance on behalf of the device.
        """
        cpu = torch.default_generator
        with self._rng_lock:
            saved = cpu.get_state()
            cpu.set_state(self.default_generator.get_state())
            try:
                yield
            finally:
                self.default_generator.set_state(cpu.get_state())
                cpu.set_state(saved)


def _as_device(device: torch.device | str | int, name: str) -> torch.device:
    """A device argument as ``torch.device`` (an int is an index on this device)."""
    if isinstance(device, int):
        return torch.device(name, device)
    device = torch.device(device)
    return torch.device(device.type, 0 if device.index is None else device.index)


def _not_implemented_message(operator: str, name: str) -> str:
    """MPS's own text, with the device's name for "MPS": ``mps_error_fallback`` in
    ``aten/src/ATen/mps/MPSFallback.mm``, with the commit hash torch was built from."""
    return (
        f"The operator '{operator}' is not currently implemented for the {name} device. If you "
        "want this op to be considered for addition please comment on "
        "https://github.com/pytorch/pytorch/issues/141287 and mention use-case, that resulted "
        f"in missing op as well as commit hash {torch.version.git_version}. As a temporary fix, "
        "you can set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU "
        f"as a fallback for this op. WARNING: this will be slower than running natively on "
        f"{name}."
    )


def _float64_message(name: str) -> str:
    """``MPS_ERROR_DOUBLE_NOT_SUPPORTED`` of ``aten/src/ATen/mps/EmptyTensor.cpp``, raised by
    ``empty_mps`` and ``empty_strided_mps`` for every float64 allocation."""
    return (
        f"Cannot convert a {name} Tensor to float64 dtype as the {name} framework doesn't "
        "support float64. Please use float32 instead."
    )


def _dtype_message(dtype: torch.dtype, name: str) -> str:
    """``getMPSDataType``'s refusal (``aten/src/ATen/native/mps/OperationUtils.mm``)."""
    return (
        f"Trying to convert {scalar_type_name(dtype)} to the {name} backend but it does not "
        "have support for that dtype."
    )


#: The values of ``PYTORCH_ENABLE_MPS_FALLBACK`` that switch MPS's CPU fallback on
#: (``c10::utils::check_env``'s true words).
_TRUE_WORDS: Final = frozenset({"1", "on", "yes", "true", "y"})


def _cpu_fallback_enabled() -> bool:
    """Whether ``PYTORCH_ENABLE_MPS_FALLBACK`` asks for MPS's CPU fallback."""
    return os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "").strip().lower() in _TRUE_WORDS


def _missing_kernel(name: str) -> Callable[..., Any]:
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
        raise NotImplementedError(_not_implemented_message(_operator_name(op), name))

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
    operator = _operator_name(op)
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
    with _below_python():
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


@contextmanager
def _below_python() -> Iterator[None]:
    """Run a kernel's CPU work out of sight of torch function and dispatch modes.

    A ``TorchFunctionMode`` such as torchdevice's own would otherwise see, and redirect, the
    CPU calls that implement the device; fake_tensor's fallback runs under ``no_dispatch`` too.
    """
    with torch._C.DisableTorchFunction(), no_dispatch():
        yield


class _Backend:
    """Builds and installs the kernels for one registered device."""

    def __init__(self, name: str, device: torch.device, module: _DeviceModule) -> None:
        self.name = name
        self.device = device
        self.module = module

    # -- installation -----------------------------------------------------------------

    def install(self, library: torch.library.Library) -> tuple[frozenset[str], frozenset[str]]:
        """Register a kernel for every overload MPS has a kernel for (and the CPU can run).

        Plain ops get the C++ half's kernel (``alias_kernel``: the same work as
        :meth:`_kernel`, without a Python call per op); ops that draw random numbers, and the
        special kernels, get Python ones. MPS's sparse COO kernels get the C++ kernel at
        ``SparsePrivateUse1``. Returns the overloads with a kernel, dense and sparse.
        """
        installed: set[str] = set()
        plain: list[torch._ops.OpOverload] = []

        def add(op: torch._ops.OpOverload, kernel: Callable[..., Any]) -> None:
            overload_name = _operator_name(op).removeprefix("aten::")
            library.impl(overload_name, kernel, "PrivateUse1")  # type: ignore[no-untyped-call]  # untyped in torch
            installed.add(_operator_name(op))

        special = self._special_kernels()
        for operator in sorted(supported_ops()):
            if operator in _LEFT_OUT:
                continue
            op = _overload(operator)
            if operator in special:
                add(op, special[operator])
            elif _draws_random_numbers(op):
                add(op, self._kernel(op))
            else:
                plain.append(op)
        for operator, kernel in special.items():
            if operator not in installed:
                add(_overload(operator), kernel)
        plain.append(torch.ops.aten.copy_.default)  # composite in PyTorch; a plain kernel here
        self._install_plain(plain)
        installed.update(_operator_name(op) for op in plain)
        sparse = [_overload(operator) for operator in sorted(supported_sparse_ops())]
        self._install_plain(sparse, sparse=True)
        return frozenset(installed), frozenset(_operator_name(op) for op in sparse)

    def _install_plain(self, ops: list[torch._ops.OpOverload], *, sparse: bool = False) -> None:
        """Register the C++ half's kernel for ``ops``, with each op's device and dtype rules
        (at ``SparsePrivateUse1`` for ``sparse``: MPS's sparse COO kernels)."""
        packets = [op._schema.name.split("::", 1)[1] for op in ops]
        with warnings.catch_warnings():  # "ComplexHalf support is experimental"
            warnings.simplefilter("ignore", UserWarning)
            samples = [torch.empty(0, dtype=dtype) for dtype in sorted(MPS_DTYPES, key=str)]
        self.module._ops.install_kernels(
            [_operator_name(op).removeprefix("aten::") for op in ops],
            [packet in _CROSS_DEVICE_OPS for packet in packets],
            [
                packet in _ANY_DTYPE_OPS or _is_view(op._schema)
                for op, packet in zip(ops, packets, strict=True)
            ],
            samples,
            sparse,
        )

    def _special_kernels(self) -> dict[str, Callable[..., Any]]:
        """Kernels that cannot be "the CPU kernel on CPU aliases", by overload name.

        ``_copy_from*`` are what PyTorch calls to copy to and from an out-of-tree device;
        ``set_`` and ``resize_`` change the device tensor's own storage.
        """
        # MPS convolves with its own kernels (_mps_convolution, mps_convolution_backward...:
        # MPS-only entries of native_functions.yaml), which ATen's convolution picks for the
        # MPS device type; for an out-of-tree device it calls these two instead.
        convolution = self._kernel(
            torch.ops.aten.convolution_overrideable.default, torch.ops.aten.convolution.default
        )
        convolution_backward = self._kernel(
            torch.ops.aten.convolution_backward_overrideable.default, _convolution_backward
        )
        zeros = self._kernel(torch.ops.aten._efficientzerotensor.default, _plain_zeros)
        return {
            "aten::_lstm_mps": self._lstm,
            "aten::lstm_mps_backward": self._lstm_backward,
            "aten::_efficientzerotensor": zeros,
            "aten::convolution_overrideable": convolution,
            "aten::convolution_backward_overrideable": convolution_backward,
            "aten::_copy_from": self._copy_from,
            "aten::_copy_from_and_resize": self._copy_from_and_resize,
            "aten::resize_": self._resize,
            "aten::set_.source_Storage": _redispatch_to_cpu(torch.ops.aten.set_.source_Storage),
            "aten::set_.source_Storage_storage_offset": _redispatch_to_cpu(
                torch.ops.aten.set_.source_Storage_storage_offset
            ),
            "aten::set_.source_Tensor": _redispatch_to_cpu(torch.ops.aten.set_.source_Tensor),
        }

    def _kernel(
        self, op: torch._ops.OpOverload, compute: Callable[..., Any] | None = None
    ) -> Callable[..., Any]:
        """The kernel for one supported overload: the CPU kernel on CPU aliases of the data.

        ``compute`` replaces the CPU kernel of ``op`` where the CPU has none (the
        ``*_overrideable`` convolutions).

        Inputs and in-place ``self`` are aliases of the device memory, so views and in-place
        writes land where they belong. ``out=`` arguments get a fresh CPU tensor instead,
        because a CPU kernel may resize them, and the result is copied into the device
        tensor (resized on the device first), as PyTorch's own ``cpu_fallback`` does.
        """
        schema = op._schema
        packet_name = schema.name.split("::", 1)[1]
        argument_names = [argument.name for argument in schema.arguments]
        # Returns that are an argument written in place (``add_``, ``out=``): hand back that
        # very argument, as a real backend does.
        written = [_written_argument(schema, index) for index in range(len(schema.returns))]
        out_names = [
            argument.name
            for argument in schema.arguments
            if argument.kwarg_only
            and argument.alias_info is not None
            and argument.alias_info.is_write
        ]
        cross_device = packet_name in _CROSS_DEVICE_OPS
        any_dtype = packet_name in _ANY_DTYPE_OPS or _is_view(schema)
        tensor_arguments = {
            index: argument.name
            for index, argument in enumerate(schema.arguments)
            if argument.type.isSubtypeOf(torch._C.OptionalType(torch._C.TensorType.get()))
        }
        takes_generator = "generator" in argument_names
        global_rng = packet_name == "native_dropout"
        run = op if compute is None else compute

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with _below_python():
                if not cross_device:
                    self._check_devices(op, args, kwargs)
                if not any_dtype:
                    self._check_dtypes(args, kwargs)
                generator = None
                if takes_generator:
                    generator = self._device_generator(args, kwargs, argument_names)
                memo: dict[int, torch.UntypedStorage] = {}
                host_args, host_kwargs = tree_map(lambda x: self._to_host(x, memo), (args, kwargs))
                host_args, host_kwargs = _rewrap_numbers(host_args, host_kwargs, tensor_arguments)
                outs = {name: kwargs[name] for name in out_names if kwargs.get(name) is not None}
                for name, out in outs.items():
                    host_kwargs[name] = torch.empty(0, dtype=out.dtype)
                if generator is not None:
                    with self.module._lent(generator) as cpu_generator:
                        host_args, host_kwargs = _with_argument(
                            host_args, host_kwargs, argument_names, "generator", cpu_generator
                        )
                        result = run(*host_args, **host_kwargs)
                elif global_rng:
                    with self.module._as_global_cpu_generator():
                        result = run(*host_args, **host_kwargs)
                else:
                    result = run(*host_args, **host_kwargs)
                for name, out in outs.items():
                    produced = host_kwargs[name]
                    if out.shape != produced.shape:
                        out.resize_(produced.shape)
                    self._to_host(out, {}).copy_(produced)
                return self._from_host(result, written, args, kwargs, argument_names, memo)

        kernel.__name__ = f"{self.name}_{packet_name}"
        return kernel

    # -- the work of a kernel ---------------------------------------------------------

    def _check_devices(self, op: torch._ops.OpOverload, args: Any, kwargs: Any) -> None:
        """Refuse tensors from another device, as TensorIterator does (CPU scalars pass)."""
        for value in tree_flatten((args, kwargs))[0]:
            if not isinstance(value, torch.Tensor) or value.device.type == self.name:
                continue
            if value.device.type == "cpu" and value.dim() == 0:
                continue
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {self.device} and {value.device}! (when checking arguments for "
                f"{_operator_name(op)})"
            )

    def _check_dtypes(self, args: Any, kwargs: Any) -> None:
        """Refuse device tensors of a dtype MPS kernels refuse (``getMPSDataType``)."""
        for value in tree_flatten((args, kwargs))[0]:
            if (
                isinstance(value, torch.Tensor)
                and value.device.type == self.name
                and value.dtype not in MPS_DTYPES
            ):
                raise TypeError(_dtype_message(value.dtype, self.name))

    def _device_generator(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], argument_names: list[str]
    ) -> torch.Generator:
        """The generator an op draws from: its argument, else the device's default; a CPU
        one is refused, as CUDA and MPS refuse it."""
        index = argument_names.index("generator")
        generator = args[index] if index < len(args) else kwargs.get("generator")
        if generator is None:
            return self.module.default_generator
        if generator.device.type != self.name:
            raise RuntimeError(
                f"Expected a '{self.name}' device type for generator but found "
                f"'{generator.device.type}'"
            )
        return cast("torch.Generator", generator)

    def _to_host(self, value: Any, memo: dict[int, torch.UntypedStorage]) -> Any:
        """A device tensor as a CPU tensor on the same memory; a device as the CPU."""
        if isinstance(value, torch.device):
            if value.type != self.name:
                return value
            if value.index not in (None, 0):
                raise RuntimeError(
                    f"Invalid device ordinal {value.index}: {self.name} has one device, "
                    f"{self.name}:0"
                )
            return _CPU
        if not isinstance(value, torch.Tensor) or value.device.type != self.name:
            return value
        storage = value.untyped_storage()
        if storage.nbytes():
            # A second, non-owning and non-resizable CPU storage on the same memory: a CPU
            # kernel can neither free nor move the memory the device storage points to.
            host_storage = _storage_at(storage.data_ptr(), _CPU, storage.nbytes())
            memo[storage.data_ptr()] = storage
        else:
            host_storage = torch.empty(0, dtype=torch.uint8).untyped_storage()
        host = torch.empty(0, dtype=value.dtype)
        host.set_(host_storage, value.storage_offset(), value.size(), value.stride())
        _copy_bits(value, host)
        return host

    def _from_host(
        self,
        result: Any,
        written: list[int | None],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        argument_names: list[str],
        memo: dict[int, torch.UntypedStorage],
    ) -> Any:
        """Results as device tensors: the argument itself for in-place returns, else a tensor
        on the device storage the CPU result's memory belongs to (an input's for views)."""
        if written and any(index is not None for index in written):
            originals = [
                _argument(args, kwargs, argument_names, index) if index is not None else None
                for index in written
            ]
            if len(written) == 1:
                return originals[0]
            return tuple(
                original if original is not None else tree_map(self._wrapper(memo), part)
                for original, part in zip(originals, result, strict=True)
            )
        return tree_map(self._wrapper(memo), result)

    def _wrapper(self, memo: dict[int, torch.UntypedStorage]) -> Callable[[Any], Any]:
        def wrap(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if value.device.type != "cpu":  # pragma: no cover - CPU kernels return CPU tensors
                raise AssertionError(f"a CPU kernel returned a tensor on {value.device}")
            if value.dtype == torch.float64:  # MPS allocates every result with empty_mps
                raise TypeError(_float64_message(self.name))
            host_storage = value.untyped_storage()
            key = host_storage.data_ptr()
            storage = memo.get(key) if host_storage.nbytes() else None
            if storage is None:
                storage = self._device_storage(value)
                if host_storage.nbytes():
                    memo[key] = storage
            return _tensor_on(storage, value)

        return wrap

    def _device_storage(self, host: torch.Tensor) -> torch.UntypedStorage:
        """A device storage over the memory of ``host``'s storage, without a copy: the C++
        half's storage keeps the CPU storage alive, and grows like any device storage."""
        adopted: torch.Tensor = self.module._ops.adopt(host)
        return adopted.untyped_storage()

    # -- special kernels --------------------------------------------------------------

    def _copy_from(
        self, source: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False
    ) -> Any:
        """``_copy_from(self, dst)``: copy ``self`` into ``dst``, either on either device."""
        with _below_python():
            memo: dict[int, torch.UntypedStorage] = {}
            self._to_host(dst, memo).copy_(self._to_host(source, memo))
        return dst

    def _copy_from_and_resize(self, source: torch.Tensor, dst: torch.Tensor) -> Any:
        """``_copy_from_and_resize(self, dst)``: as :meth:`_copy_from`, resizing ``dst``."""
        dst.resize_(source.shape)
        return self._copy_from(source, dst)

    # -- LSTM, as MPS runs it ---------------------------------------------------------
    #
    # ATen sends ``lstm`` on an MPS tensor to MPS's own kernel, ``_lstm_mps``, whose autograd
    # formula is ``lstm_mps_backward`` (RNN.cpp; derivatives.yaml); the generic path would
    # take ``_thnn_fused_lstm_cell`` for an out-of-tree device, which MPS does not have, at
    # every step. ``lstm.input`` on this device goes the MPS way (:func:`_lstm_as_on_mps`,
    # registered at AutogradPrivateUse1), and these two kernels are MPS's pair: the CPU's
    # ``lstm`` on CPU aliases, its inter-layer dropout drawn from the device's generator as
    # MPS draws it from its own. Their three extra outputs are this device's own: the
    # generator state the forward drew from (so the backward replays the same masks, by
    # running the CPU forward again under autograd), and two empty tensors.

    def _lstm(
        self,
        input: torch.Tensor,
        hx: list[torch.Tensor],
        params: list[torch.Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
    ) -> tuple[torch.Tensor, ...]:
        with _below_python():
            self._check_devices(torch.ops.aten._lstm_mps.default, (input, hx, params), {})
            self._check_dtypes((input, hx, params), {})
            state = self.module.default_generator.get_state()
            memo: dict[int, torch.UntypedStorage] = {}
            host_input, host_hx, host_params = tree_map(
                lambda x: self._to_host(x, memo), (input, hx, params)
            )
            flags = (has_biases, num_layers, dropout, train, bidirectional, batch_first)
            with self.module._as_global_cpu_generator():
                output, hy, cy = torch.lstm(host_input, host_hx, host_params, *flags)
            empty = torch.empty(0, dtype=input.dtype)
            wrap = self._wrapper(memo)
            return (
                wrap(output),
                wrap(hy),
                wrap(cy),
                wrap(state),
                wrap(empty),
                wrap(empty),
            )

    def _lstm_backward(
        self,
        grad_y: torch.Tensor | None,
        grad_hy: torch.Tensor | None,
        grad_cy: torch.Tensor | None,
        z_state: torch.Tensor,
        cell_state_fwd: torch.Tensor,
        input: torch.Tensor,
        layers_outputs: torch.Tensor,
        hx: list[torch.Tensor],
        params: list[torch.Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        with _below_python():
            memo: dict[int, torch.UntypedStorage] = {}
            host = tree_map(
                lambda x: self._to_host(x, memo), (grad_y, grad_hy, grad_cy, input, hx, params)
            )
            grads_out, host_input, host_hx, host_params = host[:3], host[3], host[4], host[5]
            leaves = [t.detach().requires_grad_() for t in (host_input, *host_hx, *host_params)]
            flags = (has_biases, num_layers, dropout, train, bidirectional, batch_first)
            state = self._to_host(z_state, memo).clone()
            with _autograd_below_autograd(), self.module._global_cpu_generator_at(state):
                outputs = torch.lstm(leaves[0], leaves[1:3], leaves[3:], *flags)
            pairs = [(o, g) for o, g in zip(outputs, grads_out, strict=True) if g is not None]
            grads = torch.autograd.grad(
                [o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True
            )
            filled = [
                torch.zeros_like(leaf) if grad is None else grad
                for leaf, grad in zip(leaves, grads, strict=True)
            ]
            wrap = self._wrapper(memo)
            device = [wrap(grad) for grad in filled]
            return device[0], device[1:3], device[3:]

    def _resize(
        self, tensor: torch.Tensor, size: list[int], *, memory_format: Any = None
    ) -> torch.Tensor:
        """Grow the storage when it is too small, then set the new sizes.

        The storage grows in place (the C++ half's ``resizePrivateUse1Bytes``), so every view
        of it sees the new memory, as on a real device; the CPU kernel then only sets sizes
        and strides, the storage being large enough.
        """
        with _below_python():
            numel = 1
            for dim in size:
                numel *= dim
            needed = (tensor.storage_offset() + numel) * tensor.element_size() if numel else 0
            storage = tensor.untyped_storage()
            if needed > storage.nbytes():
                storage.resize_(int(needed))
            torch.ops.aten.resize_.default.redispatch(
                _CPU_KEYS, tensor, size, memory_format=memory_format
            )
        return tensor


@contextmanager
def _autograd_below_autograd() -> Iterator[None]:
    """Autograd for CPU work inside a kernel, which runs below autograd (the dispatcher
    excludes the autograd keys for the thread while a backend kernel runs)."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for key in (torch._C.DispatchKey.AutogradCPU, torch._C.DispatchKey.ADInplaceOrView):
        excluded = excluded.remove(key)
    included = torch._C._dispatch_tls_local_include_set()
    with torch._C._ForceDispatchKeyGuard(included, excluded), torch.enable_grad():
        yield


def _lstm_as_on_mps(
    input: torch.Tensor,
    hx: list[torch.Tensor],
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lstm`` on this device, as ATen runs it on an MPS tensor: ``_lstm_mps``, whose
    autograd formula is ``lstm_mps_backward`` (``at::native::lstm``'s ``is_mps()`` branch)."""
    output, hy, cy, *_ = torch.ops.aten._lstm_mps.default(
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
    )
    return output, hy, cy


def _plain_zeros(
    size: list[int],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """``_efficientzerotensor`` as a plain tensor of zeros.

    Autograd builds zero gradients with it (``sgn`` of a real tensor); the CPU's is a
    ``ZeroTensor`` with no memory, which cannot be rebuilt on this device (Python cannot give
    a tensor that dispatch key). Zeros are what it stands for; only the memory saving is lost.
    """
    return torch.zeros(size, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


def _convolution_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``convolution_backward_overrideable`` computed by the CPU's ``convolution_backward``.

    The overrideable op has no bias sizes (the bias has one value per output channel) and
    must return three tensors: a gradient not asked for is an empty tensor, never used.
    """
    channels = weight.size(1) * groups if transposed else weight.size(0)
    grads = torch.ops.aten.convolution_backward.default(
        grad_output,
        input,
        weight,
        [channels],
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        output_mask,
    )
    empty = torch.empty(0, dtype=grad_output.dtype)
    grad_input, grad_weight, grad_bias = (empty if g is None else g for g in grads)
    return grad_input, grad_weight, grad_bias


def _print_like_mps(name: str) -> None:
    """Let ``print`` format this device's tensors in float32, as it does MPS tensors.

    ``torch._tensor_str.tensor_totype`` converts a tensor to float64 to format it, except on
    MPS (``t.is_mps``) and other devices without float64; a device only gets that exception
    by name. Process-wide and permanent, like the registration itself.
    """
    tensor_str = torch._tensor_str
    original = tensor_str.tensor_totype

    def tensor_totype(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == name:
            return t.to(dtype=torch.float)
        return cast("torch.Tensor", original(t))  # type: ignore[no-untyped-call]  # untyped in torch

    tensor_str.tensor_totype = tensor_totype


def _unscale_like_mps(name: str) -> None:
    """Let ``GradScaler.unscale_`` take the inverse scale in float32 on this device, as it
    does on MPS.

    torch computes ``1 / scale`` in float64 except when the scale is on ``mps:0``
    (``self._scale.device != torch.device("mps:0")`` in ``torch/amp/grad_scaler.py``): MPS has
    no float64. A device gets that exception only by name, so fp16 training with a
    GradScaler would stop here with the float64 ``TypeError`` where a Mac trains. The method
    below is torch's, with the MPS branch for this device's scale; any other scale goes to
    torch's own. Process-wide and permanent, like the registration itself.
    """
    from torch.amp.grad_scaler import GradScaler, OptState  # noqa: PLC0415 - amp is lazy

    original = GradScaler.unscale_

    def unscale_(self: GradScaler, optimizer: torch.optim.Optimizer) -> None:
        scale = self._scale
        if not self._enabled or scale is None or scale.device.type != name:
            return original(self, optimizer)
        self._check_scale_growth_tracker("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = scale.reciprocal()  # the branch torch takes for mps:0
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = OptState.UNSCALED
        return None

    unscale_.__doc__ = original.__doc__
    GradScaler.unscale_ = unscale_  # type: ignore[method-assign]


def _redispatch_to_cpu(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """A kernel running the CPU kernel on the device tensors themselves (metadata-only ops).

    ``set_``'s CPU kernel checks that tensor and storage share a device and sets sizes,
    strides and the storage pointer; it never reads or allocates memory when the storage is
    large enough, which is always so for storages of this device.
    """

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_CPU_KEYS, *args, **kwargs)

    return kernel


def _overload(qualified: str) -> torch._ops.OpOverload:
    """``aten::set_.source_Storage`` -> the OpOverload (``.default`` when none is named)."""
    packet_name, _, overload_name = qualified.removeprefix("aten::").partition(".")
    op: torch._ops.OpOverload = getattr(
        getattr(torch.ops.aten, packet_name), overload_name or "default"
    )
    return op


def _storage_at(data_ptr: int, device: torch.device, nbytes: int) -> torch.UntypedStorage:
    """A storage on ``device`` over memory it does not own (and cannot resize or free)."""
    storage = torch._C._construct_storage_from_data_pointer(data_ptr, device, nbytes)
    return cast("torch.UntypedStorage", storage)  # the stub says Storage; it is untyped


def _tensor_on(storage: torch.UntypedStorage, like: torch.Tensor) -> torch.Tensor:
    """A device tensor on ``storage`` with ``like``'s dtype and geometry (no copy)."""
    shell = torch._C._acc.create_empty_tensor((0,), like.dtype)
    # No Python API sets a storage without dispatching to the device; the CPU kernel of set_
    # only checks that tensor and storage share a device and touches metadata, never memory.
    tensor: torch.Tensor = torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYS, shell, storage, like.storage_offset(), like.size(), like.stride()
    )
    _copy_bits(like, tensor)
    return tensor


def _copy_bits(source: torch.Tensor, target: torch.Tensor) -> None:
    """Carry the lazy conjugate and negative bits, which are metadata of the view."""
    if source.is_conj():
        torch._C._set_conj(target, True)
    if source.is_neg():
        torch._C._set_neg(target, True)


def _operator_name(op: torch._ops.OpOverload) -> str:
    """``aten::erfinv.out``, as the dispatcher and MPS print it."""
    name: str = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def _rewrap_numbers(
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


def _draws_random_numbers(op: torch._ops.OpOverload) -> bool:
    """Whether ``op`` draws from a generator (an argument, or the global one for
    ``native_dropout``): its kernel lends the device generator's state to the CPU kernel."""
    schema = op._schema
    return schema.name == "aten::native_dropout" or any(
        argument.name == "generator" for argument in schema.arguments
    )


def _is_view(schema: torch._C.FunctionSchema) -> bool:
    """Whether the op returns a view of an input (``Tensor(a)``, aliased and not written)."""
    return any(ret.alias_info is not None and not ret.alias_info.is_write for ret in schema.returns)


def _written_argument(schema: torch._C.FunctionSchema, return_index: int) -> int | None:
    """The index of the argument a return writes into (``Tensor(a!)``), or None."""
    alias = schema.returns[return_index].alias_info
    if alias is None or not alias.is_write:
        return None
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.before_set & alias.before_set:
            return index
    return None


def _with_argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], argument_names: list[str], name: str, value: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with schema argument ``name`` set to ``value``, where it sits."""
    index = argument_names.index(name)
    if index < len(args):
        return (*args[:index], value, *args[index + 1 :]), kwargs
    return args, {**kwargs, name: value}


def _argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], argument_names: list[str], index: int
) -> Any:
    """The value of the ``index``-th schema argument, given positionally or by keyword."""
    if index < len(args):
        return args[index]
    return kwargs[argument_names[index]]
