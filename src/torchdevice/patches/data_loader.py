"""``DataLoader(pin_memory=True)`` where nothing can be pinned: no pin-memory thread.

CUDA-first code asks its loaders for ``pin_memory=True``. Torch pins only when an
accelerator is there (``torch.accelerator.is_available()``), and while redirecting the
facades say one is (CUDA code finds CUDA), so every loader iterator starts torch's
pin-memory thread: each batch goes through a thread and a queue and
``Tensor.pin_memory()``, which torchdevice answers with the batch itself where pinned
memory does not exist (the pin rule, ``Runtime.pins``: only a CUDA host pins). That hop
bought nothing and cost the DataLoader workload about 8 % of its time, in either tier
(benchmarks/workloads.py). Torch itself turns pinning off in the iterator on MPS
(``_BaseDataLoaderIter.__init__``: "not supported on MPS now"); here it is turned off
the same way, after torch's constructor, on every host that cannot pin. The batches are
the same tensors; only the thread is gone. On CUDA hosts, and while not redirecting,
torch's own constructor runs alone.

Torch warns where it cannot pin natively ("no accelerator is found"), and showing that
warning reads ``dataloader.py`` into :mod:`linecache`. Its workers then format their stack
(``torch.xpu.manual_seed_all`` in the worker's seeding records ``traceback.format_stack()``
for a lazy call) and find the file there; without the warning each forked worker read the
81 KB file again, about 0.8M instructions per worker per epoch. The loader that turns
pinning off here reads it once in the parent first, as the native warning would have.
"""

from __future__ import annotations

import functools
import linecache
from typing import Any

from torch.utils.data import dataloader

from torchdevice import ledger
from torchdevice.redirecting.runtime import active

__all__ = ["GROUP", "install", "spots"]

#: The ledger group of the wrapper.
GROUP = "data loader"

_ITERATOR = dataloader._BaseDataLoaderIter
_ORIGINAL_INIT = _ITERATOR.__dict__["__init__"]


@functools.wraps(_ORIGINAL_INIT)
def _init(self: Any, loader: Any) -> None:
    """torch's constructor; then no pinning where the host cannot pin (as torch on MPS)."""
    _ORIGINAL_INIT(self, loader)
    rt = active()
    if rt is not None and self._pin_memory and not rt.pins("cpu"):
        self._pin_memory = False
        if self._num_workers:  # the workers fork from here and format their stacks
            linecache.getlines(dataloader.__file__)


def install() -> None:
    """Put the wrapper on the iterators' constructor (idempotent)."""
    if not ledger.has(GROUP):
        ledger.set_attr(GROUP, _ITERATOR, "__init__", _init)


def spots() -> tuple[ledger.Spot, ...]:
    """What :func:`install` changes, for the pristine check."""
    return (ledger.attr_spot(_ITERATOR, "__init__"),)
