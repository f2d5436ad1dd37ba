"""The simulated device's kernels: the CPU's kernel on CPU aliases of the device's memory.

Why a module of its own: this is how the device computes what MPS computes. Every overload of
its op set (:mod:`torchdevice.simulated_mps.op_set`) gets a kernel that runs the CPU kernel on
CPU tensors over the device tensors' own memory, so views stay views and in-place ops write in
place, and wraps the CPU results as device tensors without a copy. Plain ops get the C++ half's
boxed kernel (``csrc/kernels.cpp``: the same work without a Python call per op); ops that draw
random numbers, copies between devices, ``resize_``, ``set_``, the ``*_overrideable``
convolutions and those a caller adds (the LSTM pair, :mod:`torchdevice.simulated_mps.lstm`) get
the Python kernels built here. Each checks devices and dtypes as MPS's kernels do.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from torch.utils._pytree import tree_flatten, tree_map

from torchdevice.simulated_mps.device_module import DeviceModule
from torchdevice.simulated_mps.dispatch import (
    CPU,
    CPU_KEYS,
    argument_value,
    below_python,
    draws_random_numbers,
    is_view,
    operator_name,
    overload,
    redispatch_to_cpu,
    rewrap_numbers,
    with_argument,
    written_argument,
)
from torchdevice.simulated_mps.mps_ops import MPS_DTYPES, dtype_message, float64_message
from torchdevice.simulated_mps.op_set import (
    ANY_DTYPE_OPS,
    CROSS_DEVICE_OPS,
    LEFT_OUT,
    supported_ops,
    supported_sparse_ops,
)

__all__ = ["Kernels"]


class Kernels:
    """Builds and installs the kernels for one registered device."""

    def __init__(self, name: str, device: torch.device, module: DeviceModule) -> None:
        self.name = name
        self.device = device
        self.module = module

    # -- installation -----------------------------------------------------------------

    def install(
        self, library: torch.library.Library, extra: dict[str, Callable[..., Any]]
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Register a kernel for every overload MPS has a kernel for (and the CPU can run).

        ``extra`` are more kernels by overload name (the LSTM pair), taking precedence.

        Plain ops get the C++ half's kernel (``alias_kernel``: the same work as
        :meth:`_kernel`, without a Python call per op); ops that draw random numbers, and the
        special kernels, get Python ones. MPS's sparse COO kernels get the C++ kernel at
        ``SparsePrivateUse1``. Returns the overloads with a kernel, dense and sparse.
        """
        installed: set[str] = set()
        plain: list[torch._ops.OpOverload] = []

        def add(op: torch._ops.OpOverload, kernel: Callable[..., Any]) -> None:
            overload_name = operator_name(op).removeprefix("aten::")
            library.impl(overload_name, kernel, "PrivateUse1")  # type: ignore[no-untyped-call]  # untyped in torch
            installed.add(operator_name(op))

        special = {**self._special_kernels(), **extra}
        for operator in sorted(supported_ops()):
            if operator in LEFT_OUT:
                continue
            op = overload(operator)
            if operator in special:
                add(op, special[operator])
            elif draws_random_numbers(op):
                add(op, self._kernel(op))
            else:
                plain.append(op)
        for operator, kernel in special.items():
            if operator not in installed:
                add(overload(operator), kernel)
        plain.append(torch.ops.aten.copy_.default)  # composite in PyTorch; a plain kernel here
        self._install_plain(plain)
        installed.update(operator_name(op) for op in plain)
        sparse = [overload(operator) for operator in sorted(supported_sparse_ops())]
        self._install_plain(sparse, sparse=True)
        return frozenset(installed), frozenset(operator_name(op) for op in sparse)

    def _install_plain(self, ops: list[torch._ops.OpOverload], *, sparse: bool = False) -> None:
        """Register the C++ half's kernel for ``ops``, with each op's device and dtype rules
        (at ``SparsePrivateUse1`` for ``sparse``: MPS's sparse COO kernels)."""
        packets = [op._schema.name.split("::", 1)[1] for op in ops]
        with warnings.catch_warnings():  # "ComplexHalf support is experimental"
            warnings.simplefilter("ignore", UserWarning)
            samples = [torch.empty(0, dtype=dtype) for dtype in sorted(MPS_DTYPES, key=str)]
        self.module._ops.install_kernels(
            [operator_name(op).removeprefix("aten::") for op in ops],
            [packet in CROSS_DEVICE_OPS for packet in packets],
            [
                packet in ANY_DTYPE_OPS or is_view(op._schema)
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
        # MPS-only functions of native_functions.yaml), which ATen's convolution picks for the
        # MPS device type; for an out-of-tree device it calls these two instead.
        convolution = self._kernel(
            torch.ops.aten.convolution_overrideable.default, torch.ops.aten.convolution.default
        )
        convolution_backward = self._kernel(
            torch.ops.aten.convolution_backward_overrideable.default, _convolution_backward
        )
        zeros = self._kernel(torch.ops.aten._efficientzerotensor.default, _plain_zeros)
        return {
            "aten::_efficientzerotensor": zeros,
            "aten::convolution_overrideable": convolution,
            "aten::convolution_backward_overrideable": convolution_backward,
            "aten::_copy_from": self._copy_from,
            "aten::_copy_from_and_resize": self._copy_from_and_resize,
            "aten::resize_": self._resize,
            "aten::set_.source_Storage": redispatch_to_cpu(torch.ops.aten.set_.source_Storage),
            "aten::set_.source_Storage_storage_offset": redispatch_to_cpu(
                torch.ops.aten.set_.source_Storage_storage_offset
            ),
            "aten::set_.source_Tensor": redispatch_to_cpu(torch.ops.aten.set_.source_Tensor),
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
        written = [written_argument(schema, index) for index in range(len(schema.returns))]
        out_names = [
            argument.name
            for argument in schema.arguments
            if argument.kwarg_only
            and argument.alias_info is not None
            and argument.alias_info.is_write
        ]
        cross_device = packet_name in CROSS_DEVICE_OPS
        any_dtype = packet_name in ANY_DTYPE_OPS or is_view(schema)
        tensor_arguments = {
            index: argument.name
            for index, argument in enumerate(schema.arguments)
            if argument.type.isSubtypeOf(torch._C.OptionalType(torch._C.TensorType.get()))
        }
        takes_generator = "generator" in argument_names
        global_rng = packet_name == "native_dropout"
        run = op if compute is None else compute

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with below_python():
                if not cross_device:
                    self.check_devices(op, args, kwargs)
                if not any_dtype:
                    self.check_dtypes(args, kwargs)
                generator = None
                if takes_generator:
                    generator = self._device_generator(args, kwargs, argument_names)
                memo: dict[int, torch.UntypedStorage] = {}
                host_args, host_kwargs = tree_map(lambda x: self.to_host(x, memo), (args, kwargs))
                host_args, host_kwargs = rewrap_numbers(host_args, host_kwargs, tensor_arguments)
                outs = {name: kwargs[name] for name in out_names if kwargs.get(name) is not None}
                for name, out in outs.items():
                    host_kwargs[name] = torch.empty(0, dtype=out.dtype)
                if generator is not None:
                    with self.module._lent(generator) as cpu_generator:
                        host_args, host_kwargs = with_argument(
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
                    self.to_host(out, {}).copy_(produced)
                return self._from_host(result, written, args, kwargs, argument_names, memo)

        kernel.__name__ = f"{self.name}_{packet_name}"
        return kernel

    # -- the work of a kernel ---------------------------------------------------------

    def check_devices(self, op: torch._ops.OpOverload, args: Any, kwargs: Any) -> None:
        """Refuse tensors from another device, as TensorIterator does (CPU scalars pass)."""
        for value in tree_flatten((args, kwargs))[0]:
            if not isinstance(value, torch.Tensor) or value.device.type == self.name:
                continue
            if value.device.type == "cpu" and value.dim() == 0:
                continue
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {self.device} and {value.device}! (when checking arguments for "
                f"{operator_name(op)})"
            )

    def check_dtypes(self, args: Any, kwargs: Any) -> None:
        """Refuse device tensors of a dtype MPS kernels refuse (``getMPSDataType``)."""
        for value in tree_flatten((args, kwargs))[0]:
            if (
                isinstance(value, torch.Tensor)
                and value.device.type == self.name
                and value.dtype not in MPS_DTYPES
            ):
                raise TypeError(dtype_message(value.dtype, self.name))

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

    def to_host(self, value: Any, memo: dict[int, torch.UntypedStorage]) -> Any:
        """A device tensor as a CPU tensor on the same memory; a device as the CPU."""
        if isinstance(value, torch.device):
            if value.type != self.name:
                return value
            if value.index not in (None, 0):
                raise RuntimeError(
                    f"Invalid device ordinal {value.index}: {self.name} has one device, "
                    f"{self.name}:0"
                )
            return CPU
        if not isinstance(value, torch.Tensor) or value.device.type != self.name:
            return value
        storage = value.untyped_storage()
        if storage.nbytes():
            # A second, non-owning and non-resizable CPU storage on the same memory: a CPU
            # kernel can neither free nor move the memory the device storage points to.
            host_storage = _storage_at(storage.data_ptr(), CPU, storage.nbytes())
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
                argument_value(args, kwargs, argument_names, index) if index is not None else None
                for index in written
            ]
            if len(written) == 1:
                return originals[0]
            return tuple(
                original if original is not None else tree_map(self.wrapper(memo), part)
                for original, part in zip(originals, result, strict=True)
            )
        return tree_map(self.wrapper(memo), result)

    def wrapper(self, memo: dict[int, torch.UntypedStorage]) -> Callable[[Any], Any]:
        def wrap(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if value.device.type != "cpu":  # pragma: no cover - CPU kernels return CPU tensors
                raise AssertionError(f"a CPU kernel returned a tensor on {value.device}")
            if value.dtype == torch.float64:  # MPS allocates every result with empty_mps
                raise TypeError(float64_message(self.name))
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
        with below_python():
            memo: dict[int, torch.UntypedStorage] = {}
            self.to_host(dst, memo).copy_(self.to_host(source, memo))
        return dst

    def _copy_from_and_resize(self, source: torch.Tensor, dst: torch.Tensor) -> Any:
        """``_copy_from_and_resize(self, dst)``: as :meth:`_copy_from`, resizing ``dst``."""
        dst.resize_(source.shape)
        return self._copy_from(source, dst)

    def _resize(
        self, tensor: torch.Tensor, size: list[int], *, memory_format: Any = None
    ) -> torch.Tensor:
        """Grow the storage when it is too small, then set the new sizes.

        The storage grows in place (the C++ half's ``resizePrivateUse1Bytes``), so every view
        of it sees the new memory, as on a real device; the CPU kernel then only sets sizes
        and strides, the storage being large enough.
        """
        with below_python():
            numel = 1
            for dim in size:
                numel *= dim
            needed = (tensor.storage_offset() + numel) * tensor.element_size() if numel else 0
            storage = tensor.untyped_storage()
            if needed > storage.nbytes():
                storage.resize_(int(needed))
            torch.ops.aten.resize_.default.redispatch(
                CPU_KEYS, tensor, size, memory_format=memory_format
            )
        return tensor


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
        CPU_KEYS, shell, storage, like.storage_offset(), like.size(), like.stride()
    )
    _copy_bits(like, tensor)
    return tensor


def _copy_bits(source: torch.Tensor, target: torch.Tensor) -> None:
    """Carry the lazy conjugate and negative bits, which are metadata of the view."""
    if source.is_conj():
        torch._C._set_conj(target, True)
    if source.is_neg():
        torch._C._set_neg(target, True)
