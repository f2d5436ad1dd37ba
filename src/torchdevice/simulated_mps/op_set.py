"""The simulated MPS device's op set: what it computes, and what it lacks the way MPS does.

Why a module of its own: the device is only as faithful as this set. It is derived at run time
from two answers PyTorch itself gives, never typed in by hand: the overloads MPS has a kernel
for in the installed torch (:mod:`torchdevice.simulated_mps.mps_ops`, read from the wheel's
``native_functions.yaml``) and those the CPU has a kernel for (the dispatcher). The device
computes their intersection with the CPU's kernels; every other op the CPU has is missing
here as it is on MPS. The tables below say which ops a kernel of this device lets take
another device's tensors or any dtype, and which overloads stay out.
"""

from __future__ import annotations

import functools
from typing import Final

import torch

from torchdevice.simulated_mps.mps_ops import mps_kernels, mps_sparse_kernels

__all__ = [
    "ANY_DTYPE_OPS",
    "CROSS_DEVICE_OPS",
    "LEFT_OUT",
    "missing_ops",
    "supported_ops",
    "supported_sparse_ops",
]


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
    in the installed torch (:func:`~torchdevice.simulated_mps.mps_ops.mps_kernels`) that have a CPU
    kernel to run. Derived at run time, cached: nothing here is typed in by hand.

    Composite ops MPS overrides with its own CPU rerun (``linalg_svd`` in
    :data:`~torchdevice.simulated_mps.mps_ops.MPS_CPU_FALLBACK_OPS`) stay composite here: a Python
    kernel in their place would bypass their autograd formula, so they decompose into ops this
    device lacks, and fall back whole.
    """
    return (_cpu_kernels() | _cpu_kernels_beside_composite()) & mps_kernels()


@functools.cache
def _cpu_kernels_beside_composite() -> frozenset[str]:
    """The ``aten::`` overloads with a CPU kernel, a composite kernel and a derivative formula
    of their own (an ``Autograd`` kernel): the composite serves backends without a kernel, and
    where MPS has one it runs it (``silu_backward``, ``mish_backward``). Without them here this
    device computed PyTorch's decomposition where MPS runs a kernel, and Llama-style training
    (SwiGLU) drifted from the CPU's numbers. Only those MPS has a kernel for count:
    ``native_channel_shuffle`` decomposes on MPS as everywhere else."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return frozenset(
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::")
        and has(name, "CPU")
        and has(name, "CompositeImplicitAutograd")
        and has(name, "Autograd")
    )


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
CROSS_DEVICE_OPS: Final = frozenset(
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
ANY_DTYPE_OPS: Final = frozenset(
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
LEFT_OUT: Final = {
    # its CPU kernel gives the tensor a fresh CPU storage: the tensor would change device
    "aten::set_": "set_() with no source",
}
