"""What native torch looks like, and a check that torch is in that state again.

Imported by ``conftest.py`` (the reset fixture) and by tests that compare against it. What
it checks is derived from torchdevice's install list (:func:`torchdevice.patches.spots`)
and the pytest plugin's variables (:func:`torchdevice.tools.pytest_plugin.spots`), not
written out here: a new patch is checked as soon as it declares its spots.
"""

from __future__ import annotations

import sys
import threading
import warnings

import torch
import torch.distributed.distributed_c10d as c10d
from torch.overrides import _get_current_function_mode_stack

import torchdevice
from torchdevice import ledger, patches
from torchdevice.facade import mps
from torchdevice.patches import amp
from torchdevice.redirecting.mode import DeviceMode
from torchdevice.tools import pytest_plugin

#: Native objects tests compare against by identity.
REAL_CUDA = sys.modules["torch.cuda"]
REAL_LOAD = torch.load
REAL_GENERATOR = torch.Generator
REAL_SHOWWARNING = warnings.showwarning
REAL_AUTOCAST = torch.autocast
REAL_INIT_PROCESS_GROUP = c10d.init_process_group
REAL_IS_NCCL_AVAILABLE = c10d.is_nccl_available


#: What every spot an installer (:data:`torchdevice.patches.INSTALL_ORDER`) or the pytest
#: plugin may change held when this module was imported, before any test enabled anything:
#: native torch.
NATIVE = {
    spot.what: (spot, spot.read())
    for spot in (*patches.spots().values(), *pytest_plugin.spots())
    if spot.read
}


def _same(current: object, native: object) -> bool:
    return current is native or current == native


def torch_is_pristine() -> list[str]:
    """What differs from native torch right now (empty when nothing does).

    First what torchdevice's own ledger still holds (every change it makes is recorded
    there, and ``disable()`` must leave it empty), then every spot the install list says
    it changes, read back and compared with what native torch had there, so a change made
    without recording it is caught too; then what is not a spot (the mode stack).
    """
    problems = [f"still recorded in the ledger: {c.group}: {c.what}" for c in ledger.changes()]
    for what, (spot, native) in NATIVE.items():
        assert spot.read is not None
        if not _same(spot.read(), native):
            problems.append(f"{what} is not as native torch had it")
    if torch.autocast is not REAL_AUTOCAST or amp.installed():
        problems.append("autocast is rewritten")
    if mps.installed():
        problems.append("the torch.mps facade is installed")
    if any(isinstance(m, DeviceMode) for m in _get_current_function_mode_stack()):
        problems.append("a DeviceMode is on this thread's function-mode stack")
    if threading.getprofile() is not None:
        problems.append("a threading profile hook is installed")
    if torchdevice.is_enabled():
        problems.append("torchdevice is enabled")
    return problems
