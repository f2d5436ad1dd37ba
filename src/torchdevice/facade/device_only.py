"""CUDA-only features: a clear error naming the feature and what to do instead.

CUDA graphs, IPC, ``cudart``, raw kernels (jiterator), NCCL, multi-GPU ``comm`` and the
caching allocator's internals have no counterpart on MPS or a CPU. Each raises
:class:`~torchdevice.errors.UnsupportedFeatureError` (a ``RuntimeError``, what torch itself
raises for an unusable CUDA) when used, never a stub returning made-up values. Queries
whose true answer off CUDA is simply "no" (``is_current_stream_capturing``,
``nccl.is_available``) answer it.
"""

from __future__ import annotations

from typing import Any, NoReturn

from torchdevice.errors import UnsupportedFeatureError

__all__ = ["ALTERNATIVES", "UnsupportedClass", "unsupported"]

_GRAPHS = (
    "CUDA graphs capture and replay CUDA kernels. Run the callable eagerly, or use "
    "torch.compile (its 'reduce-overhead' mode only uses CUDA graphs on CUDA)."
)
_KERNELS = "Write the operation with torch ops (torch.compile can fuse them) instead."
_NCCL = (
    "For collectives use torch.distributed with the 'gloo' backend, which torchdevice's "
    "hosts support."
)
_COMM = "There is one device here: use tensor.to(device) or torch.distributed instead."
_ALLOCATOR = (
    "The CUDA caching allocator does not exist here: allocate tensors with torch factories "
    "and read memory with torch.cuda.memory_allocated()/memory_stats()."
)

#: Feature -> what to do instead, for every CUDA-only entry point the facade covers.
ALTERNATIVES: dict[str, str] = {
    "torch.cuda.CUDAGraph": _GRAPHS,
    "torch.cuda.graph": _GRAPHS,
    "torch.cuda.make_graphed_callables": _GRAPHS,
    "torch.cuda.graph_pool_handle": _GRAPHS,
    "torch.cuda.cudart": "cudart is the CUDA runtime library itself. " + _KERNELS,
    "torch.cuda.jiterator._create_jit_fn": "The jiterator compiles CUDA C++. " + _KERNELS,
    "torch.cuda.jiterator._create_multi_output_jit_fn": "The jiterator compiles CUDA C++. "
    + _KERNELS,
    "torch.cuda.nccl": _NCCL,
    "torch.cuda.comm": _COMM,
    "torch.cuda.caching_allocator_alloc": _ALLOCATOR,
    "torch.cuda.caching_allocator_delete": _ALLOCATOR,
    "torch.cuda.CUDAPluggableAllocator": _ALLOCATOR,
    "torch.cuda.change_current_allocator": _ALLOCATOR,
    "torch.cuda.MemPool": _ALLOCATOR,
    "torch.cuda.use_mem_pool": _ALLOCATOR,
    "torch.cuda.memory_snapshot": _ALLOCATOR,
    "torch.cuda.memory._record_memory_history": _ALLOCATOR,
    "torch.cuda.memory._snapshot": _ALLOCATOR,
    "torch.cuda.memory._dump_snapshot": _ALLOCATOR,
    "torch.mps.compile_shader": "Metal shaders run only on Apple GPUs. " + _KERNELS,
    "torch.mps.load_metallib": "Metal libraries run only on Apple GPUs. " + _KERNELS,
    "torch.mps.profiler.metal_capture": "Metal GPU captures need an Apple GPU; profile with "
    "torch.profiler instead.",
}


def _raise(feature: str, key: str | None = None) -> NoReturn:
    raise UnsupportedFeatureError(feature, ALTERNATIVES[feature if key is None else key])


def unsupported(feature: str, key: str | None = None) -> Any:
    """A function standing for ``feature`` that raises when called.

    ``key`` names the :data:`ALTERNATIVES` key when it is not ``feature`` itself (every
    function of ``torch.cuda.nccl`` shares that module's advice).
    """
    name = feature.rsplit(".", 1)[-1]

    def raiser(*args: Any, **kwargs: Any) -> NoReturn:
        _raise(feature, key)

    raiser.__name__ = raiser.__qualname__ = name
    raiser.__doc__ = f"``{feature}`` is CUDA-only (or device-only): raises UnsupportedFeatureError."
    return raiser


class UnsupportedClass:
    """Base of the stand-ins for CUDA-only classes: instantiating one raises."""

    feature = "torch.cuda.CUDAGraph"

    def __new__(cls, *args: Any, **kwargs: Any) -> UnsupportedClass:
        _raise(cls.feature)


class CUDAGraph(UnsupportedClass):
    """``torch.cuda.CUDAGraph``: CUDA-only."""

    feature = "torch.cuda.CUDAGraph"


class graph(UnsupportedClass):
    """``with torch.cuda.graph(g):``: CUDA-only."""

    feature = "torch.cuda.graph"


class CUDAPluggableAllocator(UnsupportedClass):
    """``torch.cuda.CUDAPluggableAllocator``: CUDA-only."""

    feature = "torch.cuda.CUDAPluggableAllocator"


class MemPool(UnsupportedClass):
    """``torch.cuda.MemPool``: CUDA-only."""

    feature = "torch.cuda.MemPool"


def nccl_is_available(tensors: Any = None) -> bool:
    """NCCL cannot run on these tensors: they are not on an NVIDIA GPU."""
    return False
