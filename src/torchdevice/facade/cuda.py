"""The ``torch.cuda`` facade: CUDA-first code on MPS and CPU-only hosts.

Installed as ``sys.modules["torch.cuda"]`` and ``torch.cuda`` (with its submodules
``torch.cuda.random``, ``.memory``, ``.streams``, ``.nvtx``, ``.profiler``, ``.graphs``,
``.tunable``, ``.jiterator``, ``.nccl``, ``.comm``, ``._utils``) on every host that is not
a CUDA host, and ``torch.get_device_module`` beside it. It is assembled here from the
answers of its sibling modules (:mod:`~torchdevice.facade.devices`, ``memory``,
``streams``, ``nvtx``, ``tunable``, ``legacy_types``, ``device_only``); every other name
is looked up on the real module. The other direction, ``torch.mps``, is
:mod:`~torchdevice.facade.mps`; the package's :func:`~torchdevice.facade.install` puts in
place whichever the host needs.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from torchdevice import ledger
from torchdevice.facade import (
    device_only,
    devices,
    legacy_types,
    memory,
    modules,
    nvtx,
    real_device,
    streams,
    tunable,
)
from torchdevice.facade.call_counts import reported_namespace
from torchdevice.facade.modules import FacadeModule

__all__ = ["GROUP", "SUBMODULES", "build_cuda_facade", "get_device_module", "install", "spots"]

_REAL_CUDA: types.ModuleType = real_device.REAL_CUDA

_DEVICE_NAMES = (
    "is_available",
    "is_initialized",
    "init",
    "_lazy_init",
    "device_count",
    "current_device",
    "set_device",
    "_get_device_index",
    "_exchange_device",
    "_maybe_exchange_device",
    "device",
    "device_of",
    "get_device_name",
    "get_device_properties",
    "get_device_capability",
    "is_bf16_supported",
    "is_tf32_supported",
    "is_current_stream_capturing",
    "ipc_collect",
    "utilization",
    "temperature",
    "power_draw",
    "clock_rate",
    "memory_usage",
    "device_memory_used",
)
_RNG_NAMES = (
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
)
_MEMORY_NAMES = tuple(n for n in memory.__all__ if n not in ("MemoryTracker", "tracker"))
_STREAM_NAMES = tuple(streams.__all__)
_NVTX_NAMES = ("mark", "range", "range_end", "range_pop", "range_push", "range_start")
_ALLOCATOR_NAMES = (
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "change_current_allocator",
    "use_mem_pool",
    "memory_snapshot",
)


def _pick(module: types.ModuleType, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(module, name) for name in names}


def _unsupported_everywhere(prefix: str) -> Callable[[str], Any]:
    """For modules that are CUDA-only as a whole: every public name raises when called."""

    def fallback(name: str) -> Any:
        return device_only.unsupported(f"{prefix}.{name}", prefix)

    return fallback


def build_cuda_facade() -> tuple[FacadeModule, dict[str, FacadeModule]]:
    """The ``torch.cuda`` facade and its submodule facades (keyed by full name)."""
    rng = _pick(devices, _RNG_NAMES)
    default_generators = {"default_generators": devices.default_generators}
    allocator: dict[str, Any] = {
        name: device_only.unsupported(f"torch.cuda.{name}") for name in _ALLOCATOR_NAMES
    }
    allocator.update(
        CUDAPluggableAllocator=device_only.CUDAPluggableAllocator, MemPool=device_only.MemPool
    )
    graphs = {
        "CUDAGraph": device_only.CUDAGraph,
        "graph": device_only.graph,
        "make_graphed_callables": device_only.unsupported("torch.cuda.make_graphed_callables"),
        "graph_pool_handle": device_only.unsupported("torch.cuda.graph_pool_handle"),
        "is_current_stream_capturing": devices.is_current_stream_capturing,
    }
    memory_private = {
        name: device_only.unsupported(f"torch.cuda.memory.{name}")
        for name in ("_record_memory_history", "_snapshot", "_dump_snapshot")
    }
    real_sub = _REAL_CUDA.__dict__
    subs = {
        "random": FacadeModule(
            "torch.cuda.random", real_sub.get("random"), rng, dynamic=default_generators
        ),
        "memory": FacadeModule(
            "torch.cuda.memory",
            real_sub.get("memory"),
            {**_pick(memory, _MEMORY_NAMES), **allocator, **memory_private},
        ),
        "streams": FacadeModule(
            "torch.cuda.streams",
            real_sub.get("streams"),
            _pick(streams, ("Stream", "Event", "ExternalStream")),
        ),
        "nvtx": FacadeModule("torch.cuda.nvtx", real_sub.get("nvtx"), _pick(nvtx, _NVTX_NAMES)),
        "profiler": FacadeModule(
            "torch.cuda.profiler",
            real_sub.get("profiler"),
            _pick(nvtx, ("start", "stop", "profile")),
        ),
        "graphs": FacadeModule("torch.cuda.graphs", real_sub.get("graphs"), graphs),
        "tunable": FacadeModule(
            "torch.cuda.tunable", real_sub.get("tunable"), _pick(tunable, tuple(tunable.__all__))
        ),
        "jiterator": FacadeModule(
            "torch.cuda.jiterator",
            real_sub.get("jiterator"),
            {
                name: device_only.unsupported(f"torch.cuda.jiterator.{name}")
                for name in ("_create_jit_fn", "_create_multi_output_jit_fn")
            },
        ),
        "nccl": FacadeModule(
            "torch.cuda.nccl",
            None,
            {"is_available": device_only.nccl_is_available},
            fallback=_unsupported_everywhere("torch.cuda.nccl"),
        ),
        "comm": FacadeModule(
            "torch.cuda.comm", None, {}, fallback=_unsupported_everywhere("torch.cuda.comm")
        ),
        "_utils": FacadeModule(
            "torch.cuda._utils",
            real_sub.get("_utils"),
            {"_get_device_index": devices._get_device_index},
        ),
    }
    namespace: dict[str, Any] = {}
    namespace.update(_pick(devices, _DEVICE_NAMES))
    namespace.update(rng)
    namespace.update(_pick(memory, _MEMORY_NAMES))
    namespace.update(_pick(streams, _STREAM_NAMES))
    namespace.update(legacy_types.legacy_types())
    namespace.update(allocator)
    namespace.update(graphs)
    namespace["cudart"] = device_only.unsupported("torch.cuda.cudart")
    wrapped: dict[int, Any] = {}  # ids of the wrapped objects are kept alive by namespace
    namespace = reported_namespace("torch.cuda", namespace, wrapped)
    for name, sub in subs.items():
        own = {key: value for key, value in sub.__dict__.items() if not key.startswith("__")}
        sub.__dict__.update(reported_namespace(f"torch.cuda.{name}", own, wrapped))
    namespace.update(subs)
    cuda = FacadeModule("torch.cuda", _REAL_CUDA, namespace, dynamic=default_generators)
    return cuda, {f"torch.cuda.{name}": module for name, module in subs.items()}


#: The ledger group of the ``torch.cuda`` facade (undone alone when the host becomes a CUDA
#: host).
GROUP = "cuda facade"
#: The submodules of ``torch.cuda`` that are facades too (keys of :func:`build_cuda_facade`).
SUBMODULES = (
    "random",
    "memory",
    "streams",
    "nvtx",
    "profiler",
    "graphs",
    "tunable",
    "jiterator",
    "nccl",
    "comm",
    "_utils",
)

_ORIGINAL_GET_DEVICE_MODULE = torch.get_device_module


def _clear_device_module_cache() -> None:
    """``torch.get_device_module`` caches ``getattr(torch, "cuda")``: forget it."""
    cache_clear = getattr(_ORIGINAL_GET_DEVICE_MODULE, "cache_clear", None)
    if cache_clear is not None:
        cache_clear()


@functools.wraps(_ORIGINAL_GET_DEVICE_MODULE)
def get_device_module(device: Any = None) -> Any:
    """``torch.get_device_module`` reading device names natively.

    It parses its argument with ``torch.device``, which the function mode redirects: the
    CUDA-first ``torch.get_device_module("cuda")`` (``fork_rng`` asks it) would get
    ``torch.cpu``, which has no RNG functions. Parsed natively, "cuda" names the facade,
    which answers from the real device.
    """
    with torch._C.DisableTorchFunction():
        return _ORIGINAL_GET_DEVICE_MODULE(device)


def install() -> tuple[FacadeModule, ...]:
    """Put the ``torch.cuda`` facade in place (idempotent); returns what it placed.

    Leaves through the ledger: ``disable()``, or ``ledger.undo(GROUP)`` on a CUDA host.
    """
    if ledger.has(GROUP):
        return ()
    cuda, subs = build_cuda_facade()
    modules.install_module(GROUP, "torch.cuda", cuda, torch, "cuda")
    ledger.set_attr(GROUP, torch, "get_device_module", get_device_module)
    ledger.set_attr(GROUP, torch, "set_default_tensor_type", legacy_types.set_default_tensor_type)
    for key, module in subs.items():
        modules.install_module(GROUP, key, module)
    return (cuda, *subs.values())


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` changes, for the pristine check."""
    return (
        ledger.attr_spot(torch, "cuda"),
        ledger.item_spot(sys.modules, "torch.cuda"),
        ledger.attr_spot(torch, "get_device_module"),
        ledger.attr_spot(torch, "set_default_tensor_type"),
        *legacy_types.spots(),
        *(ledger.item_spot(sys.modules, f"torch.cuda.{name}") for name in SUBMODULES),
    )
