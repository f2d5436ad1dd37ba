"""Run a script on the simulated accelerator (the MPS stand-in): a test-only launcher.

``torchrun ... on_simgpu.py SCRIPT ARGS...`` registers the simulated backend in the worker,
enables torchdevice with the simulated MPS host, and runs ``SCRIPT`` as ``__main__`` with
its own ``sys.argv``. The script itself stays as users write it. Kept out of the public
settings: a simulated host is a test fixture, not something a user selects.

One bridge, for a limit of the simulated backend rather than of torchdevice: it has no
allocator, so ``torch.load`` cannot restore storages onto it (``torchdevice.testing.
simulated``). Here a load with a ``map_location`` restores to the CPU and then moves every
tensor where the policy sends ``map_location``, which is what a load onto MPS does.
"""

import runpy
import sys
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

import torchdevice
from torchdevice import Host
from torchdevice.patches import _ORIGINAL_LOAD
from torchdevice.testing import register

torchdevice.enable(host=Host.simulated(register()))
_load = torch.load


def _load_then_move(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
    if map_location is None:
        return _load(f, **kwargs)
    with torch._C.DisableTorchFunction():  # a genuine CPU load: torch's own, natively
        state = _ORIGINAL_LOAD(f, map_location="cpu", **kwargs)
    return tree_map_only(torch.Tensor, lambda t: t.to(map_location), state)


torch.load = _load_then_move
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
