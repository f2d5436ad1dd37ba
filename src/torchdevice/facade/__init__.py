"""The facades: CUDA-first code asks ``torch.cuda``, MPS-first code ``torch.mps``; the real
device answers.

The ``torch.cuda`` facade is installed as ``sys.modules["torch.cuda"]`` and ``torch.cuda``
on hosts without CUDA, and put back exactly on disable. This package holds it and what it
is made of, one small module per kind of answer (most of them serve ``torch.mps`` too):

* :mod:`~torchdevice.facade.devices`: availability, device selection, properties, RNG;
* :mod:`~torchdevice.facade.properties`: the real device's properties under CUDA's names;
* :mod:`~torchdevice.facade.memory` and :mod:`~torchdevice.facade.streams` (streams,
  events, ``synchronize``);
* :mod:`~torchdevice.facade.legacy_types` (``torch.cuda.FloatTensor``...) and
  :mod:`~torchdevice.facade.nvtx`;
* :mod:`~torchdevice.facade.device_only`: features one device alone has (CUDA graphs,
  IPC, NCCL, Metal captures...), each a clear error;
* :mod:`~torchdevice.facade.amp`: autocast and GradScaler on the real device type;
* :mod:`~torchdevice.facade.mps`: the ``torch.mps`` facade, the other direction;
* :mod:`~torchdevice.facade.real_device`: the device that answers;
* :mod:`~torchdevice.facade.modules`: module objects that stand in for torch's, and
  putting them in place exactly.

Every other name is looked up on the real module.

Submodules import through it: ``torch.cuda.random``, ``.memory``, ``.streams``, ``.nvtx``,
``.graphs``, ``.jiterator``, ``.nccl``, ``.comm``, ``.profiler`` are facades too, swapped
into ``sys.modules`` alongside; ``torch.cuda.amp`` is the real package, whose autocast and
GradScaler :mod:`~torchdevice.facade.amp` rewrites to the real device type.

:func:`install` also puts the ``torch.mps`` facade in place on hosts without MPS
(:mod:`~torchdevice.facade.mps`), and the ``torch.accelerator`` one on CPU-only hosts
(:mod:`~torchdevice.facade.accelerator`); activation installs the amp rewrite, on every host, on
its own. On a CUDA host the real
``torch.cuda`` stays: CUDA code needs no facade there.

Every change goes through the :mod:`~torchdevice.ledger`; ``disable()`` undoes them there.
Disabling clears ``torch.get_device_module``'s cache (it caches ``torch.cuda``) and repairs
torch modules first imported while the facade was in place (see
:func:`~torchdevice.facade.modules.rebind_imported`), so a ``torch.compile`` that first ran
while redirecting still compiles natively afterwards.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from torchdevice import compiling, ledger
from torchdevice.facade import (
    accelerator,
    device_only,
    devices,
    legacy_types,
    memory,
    modules,
    mps,
    nvtx,
    real_device,
    streams,
)
from torchdevice.facade.modules import FacadeModule
from torchdevice.facade.reporting import reported_namespace
from torchdevice.runtime import active

__all__ = ["CUDA_GROUP", "GROUP", "build_cuda_facade", "install", "installed"]

_REAL_CUDA: types.ModuleType = real_device.REAL_CUDA

_DEVICE_NAMES = (
    "is_available", "is_initialized", "init", "_lazy_init", "device_count",
    "current_device", "set_device", "_get_device_index", "_exchange_device",
    "_maybe_exchange_device", "device", "device_of", "get_device_name",
    "get_device_properties", "get_device_capability", "is_bf16_supported",
    "is_tf32_supported", "is_current_stream_capturing", "ipc_collect", "utilization",
    "temperature", "power_draw", "clock_rate", "memory_usage", "device_memory_used",
)  # fmt: skip
_RNG_NAMES = (
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all",
)  # fmt: skip
_MEMORY_NAMES = tuple(n for n in memory.__all__ if n not in ("MemoryTracker", "tracker"))
_STREAM_NAMES = tuple(streams.__all__)
_NVTX_NAMES = ("mark", "range", "range_end", "range_pop", "range_push", "range_start")
_ALLOCATOR_NAMES = (
    "caching_allocator_alloc", "caching_allocator_delete", "change_current_allocator",
    "use_mem_pool", "memory_snapshot",
)  # fmt: skip


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
    allocator: dict[str, Any] = {name: device_only.unsupported(f"torch.cuda.{name}")
                                 for name in _ALLOCATOR_NAMES}  # fmt: skip
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
        "random": FacadeModule("torch.cuda.random", real_sub.get("random"), rng,
                               dynamic=default_generators),
        "memory": FacadeModule(
            "torch.cuda.memory", real_sub.get("memory"),
            {**_pick(memory, _MEMORY_NAMES), **allocator, **memory_private},
        ),
        "streams": FacadeModule("torch.cuda.streams", real_sub.get("streams"),
                                _pick(streams, ("Stream", "Event", "ExternalStream"))),
        "nvtx": FacadeModule("torch.cuda.nvtx", real_sub.get("nvtx"),
                             _pick(nvtx, _NVTX_NAMES)),
        "profiler": FacadeModule("torch.cuda.profiler", real_sub.get("profiler"),
                                 _pick(nvtx, ("start", "stop", "profile"))),
        "graphs": FacadeModule("torch.cuda.graphs", real_sub.get("graphs"), graphs),
        "jiterator": FacadeModule("torch.cuda.jiterator", real_sub.get("jiterator"), {
            name: device_only.unsupported(f"torch.cuda.jiterator.{name}")
            for name in ("_create_jit_fn", "_create_multi_output_jit_fn")
        }),
        "nccl": FacadeModule("torch.cuda.nccl", None,
                             {"is_available": device_only.nccl_is_available},
                             fallback=_unsupported_everywhere("torch.cuda.nccl")),
        "comm": FacadeModule("torch.cuda.comm", None, {},
                             fallback=_unsupported_everywhere("torch.cuda.comm")),
        "_utils": FacadeModule("torch.cuda._utils", real_sub.get("_utils"),
                               {"_get_device_index": devices._get_device_index}),
    }  # fmt: skip
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


#: The ledger groups: the ``torch.cuda`` facade (undone alone when the host becomes a CUDA
#: host), and the repair of modules imported while any facade was in place (recorded
#: first, so undone last, after every facade has left).
CUDA_GROUP = "cuda facade"
GROUP = "facades"
#: Every facade module put in place during this activation, for the repair.
_placed: list[FacadeModule] = []
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


def _install_cuda() -> None:
    if ledger.has(CUDA_GROUP):
        return
    cuda, subs = build_cuda_facade()
    _placed.extend([cuda, *subs.values()])
    modules.place(CUDA_GROUP, "torch.cuda", cuda, torch, "cuda")
    ledger.set_attr(CUDA_GROUP, torch, "get_device_module", get_device_module)
    for key, module in subs.items():
        modules.place(CUDA_GROUP, key, module)


def install() -> None:
    """Put every facade the current host needs in place (idempotent; adapts to the host).

    ``torch.cuda`` on hosts without CUDA, ``torch.mps`` on hosts without MPS; they answer
    for :func:`~torchdevice.runtime.active`. Everything
    goes through the ledger, and leaves through it on ``disable()``.
    """
    rt = active()
    kind = rt.host.kind if rt is not None else "cpu"
    if not ledger.has(GROUP):
        before = set(sys.modules)
        if not installed():  # dynamo's table of torch functions, from the real modules
            compiling.build_trace_rules_natively()
        ledger.hook(GROUP, "torch modules imported under a facade", lambda: _repair(before))
    if kind == "cuda":
        ledger.undo(CUDA_GROUP)
    else:
        _install_cuda()
    if kind == "mps":
        ledger.undo(mps.GROUP)
    else:
        _placed.extend(mps.install())
    if kind == "cpu":
        _placed.extend(accelerator.install())
    else:
        ledger.undo(accelerator.GROUP)
    _clear_device_module_cache()


def _repair(modules_before: set[str]) -> None:
    """After the facades left: repair what torch imported while they were in place.

    Torch modules imported meanwhile get the real objects back in the tables they built at
    import; dynamo's cached trace rules are rebuilt lazily. The ledger runs this last.
    """
    mapping: dict[int, Any] = {id(get_device_module): _ORIGINAL_GET_DEVICE_MODULE}
    for module in _placed:
        mapping.update(modules.facade_objects(module))
    _placed.clear()
    _clear_device_module_cache()
    imported = [name for name in set(sys.modules) - modules_before
                if name == "torch" or name.startswith("torch.")]  # fmt: skip
    if imported:
        modules.rebind_imported(sorted(imported), mapping)
        _adopt_submodules()
    compiling.clear_trace_rules()


def _adopt_submodules() -> None:
    """Real ``torch.cuda``/``torch.mps`` submodules imported through a facade become
    attributes of the real parent, as a native import would have made them."""
    for parent in (_REAL_CUDA, real_device.REAL_MPS):
        prefix = parent.__name__ + "."
        for key, module in list(sys.modules.items()):
            child = key[len(prefix) :]
            if key.startswith(prefix) and "." not in child and child not in parent.__dict__:
                setattr(parent, child, module)


def installed() -> bool:
    """Whether ``torch.cuda`` is the facade now."""
    return sys.modules.get("torch.cuda") is not _REAL_CUDA
