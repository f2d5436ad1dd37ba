"""The facades: CUDA-first code asks ``torch.cuda``, MPS-first code ``torch.mps``; the real
device answers.

The ``torch.cuda`` facade is installed as ``sys.modules["torch.cuda"]`` and ``torch.cuda``
on hosts without CUDA, and put back exactly on disable. This package holds it and what it
is made of, one small module per kind of answer (most of them serve ``torch.mps`` too):

* :mod:`~torchdevice.facade.cuda`: the ``torch.cuda`` facade, assembled from the others;
* :mod:`~torchdevice.facade.devices`: availability, device selection, properties, RNG;
* :mod:`~torchdevice.facade.properties`: the real device's properties under CUDA's names;
* :mod:`~torchdevice.facade.memory` and :mod:`~torchdevice.facade.streams` (streams,
  events, ``synchronize``);
* :mod:`~torchdevice.facade.legacy_types` (``torch.cuda.FloatTensor``...) and
  :mod:`~torchdevice.facade.nvtx`;
* :mod:`~torchdevice.facade.device_only`: features one device alone has (CUDA graphs,
  IPC, NCCL, Metal captures...), each a clear error;
* :mod:`~torchdevice.facade.mps`: the ``torch.mps`` facade, the other direction;
* :mod:`~torchdevice.facade.real_device`: the device that answers;
* :mod:`~torchdevice.facade.modules`: module objects that stand in for torch's, and
  putting them in place exactly.

Every other name is looked up on the real module.

Submodules import through it: ``torch.cuda.random``, ``.memory``, ``.streams``, ``.nvtx``,
``.graphs``, ``.jiterator``, ``.nccl``, ``.comm``, ``.profiler`` are facades too, swapped
into ``sys.modules`` alongside; ``torch.cuda.amp`` is the real package, whose autocast and
GradScaler :mod:`torchdevice.patches.amp` rewrites to the real device type.

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

import sys
import types
from typing import Any

from torchdevice import ledger
from torchdevice.facade import accelerator, cuda, devices, modules, mps, real_device
from torchdevice.facade.cuda import (
    _ORIGINAL_GET_DEVICE_MODULE,
    _clear_device_module_cache,
    build_cuda_facade,
    get_device_module,
)
from torchdevice.facade.modules import FacadeModule
from torchdevice.redirecting import compiling
from torchdevice.redirecting.runtime import active

__all__ = ["CUDA_GROUP", "GROUP", "build_cuda_facade", "install", "installed", "spots"]

_REAL_CUDA: types.ModuleType = real_device.REAL_CUDA


#: The ledger groups: the ``torch.cuda`` facade (undone alone when the host becomes a CUDA
#: host), and the repair of modules imported while any facade was in place (recorded
#: first, so undone last, after every facade has left).
CUDA_GROUP = cuda.GROUP
GROUP = "facades"
#: Every facade module put in place during this activation, for the repair.
_placed: list[FacadeModule] = []


def install() -> None:
    """Put every facade the current host needs in place (idempotent; adapts to the host).

    ``torch.cuda`` on hosts without CUDA, ``torch.mps`` on hosts without a real MPS backend
    (the simulated MPS host included); they answer for
    :func:`~torchdevice.redirecting.runtime.active`. Everything goes through the ledger, and leaves
    through it on ``disable()``.
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
        _placed.extend(cuda.install())
    if kind == "mps" and not _simulated(rt):
        ledger.undo(mps.GROUP)  # a Mac: the real torch.mps answers
    else:
        _placed.extend(mps.install())
    if kind == "cpu":
        _placed.extend(accelerator.install())
    else:
        ledger.undo(accelerator.GROUP)
    _clear_device_module_cache()


def _simulated(rt: Any) -> bool:
    """Whether the MPS host is one that stands for a Mac (the simulated MPS device): no
    real MPS backend is there to answer ``torch.mps``, so the facade answers from the
    device, as a Mac's would."""
    return rt is not None and rt.host.device_type is not None


def _repair(modules_before: set[str]) -> None:
    """After the facades left: repair what torch imported while they were in place.

    Torch modules imported meanwhile get the real objects back in the tables they built at
    import; dynamo's cached trace rules are rebuilt lazily; torch's bindings forget the
    CUDA initialisation the facade answered (:func:`~torchdevice.facade.devices.forget_lazy_init`).
    The ledger runs this last.
    """
    devices.forget_lazy_init()
    mapping: dict[int, Any] = {id(get_device_module): _ORIGINAL_GET_DEVICE_MODULE}
    for module in _placed:
        mapping.update(modules.facade_objects(module))
    _placed.clear()
    _clear_device_module_cache()
    imported = [
        name
        for name in set(sys.modules) - modules_before
        if name == "torch" or name.startswith("torch.")
    ]
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


def spots() -> tuple[ledger.Spot, ...]:
    """Everything :func:`install` may change on some host, for the pristine check."""
    return (
        ledger.Spot("torch modules imported under a facade", None),
        *cuda.spots(),
        *mps.spots(),
        *accelerator.spots(),
    )
