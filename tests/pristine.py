"""What native torch looks like, and a check that torch is in that state again.

Imported by ``conftest.py`` (the reset fixture) and by tests that compare against it.
"""

from __future__ import annotations

import sys
import threading
import warnings

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.nn.parallel import DataParallel, DistributedDataParallel, scatter_gather
from torch.overrides import _get_current_function_mode_stack

import torchdevice
from torchdevice import ledger
from torchdevice.facade import amp, mps
from torchdevice.mode import DeviceMode

REAL_CUDA = sys.modules["torch.cuda"]
REAL_LOAD = torch.load
REAL_GENERATOR = torch.Generator
REAL_SHOWWARNING = warnings.showwarning
REAL_MPS = sys.modules["torch.mps"]
REAL_BACKENDS_MPS = sys.modules["torch.backends.mps"]
REAL_GET_DEVICE_MODULE = torch.get_device_module
REAL_AUTOCAST = torch.autocast
REAL_INIT_PROCESS_GROUP = c10d.init_process_group
REAL_IS_NCCL_AVAILABLE = c10d.is_nccl_available
REAL_ALL_REDUCE = c10d.all_reduce
REAL_DDP_INIT = DistributedDataParallel.__dict__["__init__"]
#: Whether each device type the dispatcher-level net covers had an allocation kernel.
REAL_ALLOCATORS = {
    key: torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", key)
    for key in ("CUDA", "MPS")
}
REAL_COALESCING_MANAGER = c10d._coalescing_manager
REAL_DP_INIT = DataParallel.__dict__["__init__"]
REAL_SCATTER = scatter_gather.scatter
#: What the entry-points tier wraps (torchdevice.entry_points): torch's own callables.
REAL_ENTRY_POINTS = {
    name: getattr(torch, name) for name in ("zeros", "arange", "tensor", "zeros_like", "full")
}
REAL_PARSE_TO = torch._C._nn._parse_to
#: Tensor methods the tier wraps, as ``torch.Tensor``'s own namespace holds them (most are
#: inherited from ``TensorBase``: absent there, ``None`` here).
_WRAPPED_METHODS = ("to", "cuda", "cpu", "type", "pin_memory", "new_zeros", "new_tensor")
REAL_TENSOR_METHODS = {name: vars(torch.Tensor).get(name) for name in _WRAPPED_METHODS}
REAL_REBUILD_TENSOR = torch._utils._rebuild_tensor


def torch_is_pristine() -> list[str]:
    """What differs from native torch right now (empty when nothing does).

    First what torchdevice's own ledger still holds (every change it makes is recorded
    there, and ``disable()`` must leave it empty), then torch's state itself, checked
    independently of the ledger, so a change made without recording it is caught too.
    """
    problems = [f"still recorded in the ledger: {c.group}: {c.what}" for c in ledger.changes()]
    if sys.modules["torch.cuda"] is not REAL_CUDA or torch.cuda is not REAL_CUDA:
        problems.append("torch.cuda is not the real module")
    if torch.load is not REAL_LOAD or torch.serialization.load is not REAL_LOAD:
        problems.append("torch.load is wrapped")
    if sys.modules["torch.mps"] is not REAL_MPS or torch.mps is not REAL_MPS:
        problems.append("torch.mps is not the real module")
    if sys.modules["torch.backends.mps"] is not REAL_BACKENDS_MPS:
        problems.append("torch.backends.mps is not the real module")
    if torch.get_device_module is not REAL_GET_DEVICE_MODULE:
        problems.append("torch.get_device_module is wrapped")
    if torch.autocast is not REAL_AUTOCAST or amp.installed():
        problems.append("autocast is rewritten")
    if mps.installed():
        problems.append("the torch.mps facade is installed")
    if torch.Generator is not REAL_GENERATOR:
        problems.append("torch.Generator is replaced")
    if (
        dist.init_process_group is not REAL_INIT_PROCESS_GROUP
        or c10d.init_process_group is not REAL_INIT_PROCESS_GROUP
        or dist.is_nccl_available is not REAL_IS_NCCL_AVAILABLE
        or dist.all_reduce is not REAL_ALL_REDUCE
        or c10d.all_reduce is not REAL_ALL_REDUCE
        or DistributedDataParallel.__dict__["__init__"] is not REAL_DDP_INIT
        or c10d._coalescing_manager is not REAL_COALESCING_MANAGER
    ):
        problems.append("torch.distributed is wrapped")
    if (
        DataParallel.__dict__["__init__"] is not REAL_DP_INIT
        or scatter_gather.scatter is not REAL_SCATTER
    ):
        problems.append("nn.DataParallel is wrapped")
    if (
        any(getattr(torch, name) is not real for name, real in REAL_ENTRY_POINTS.items())
        or torch._C._nn._parse_to is not REAL_PARSE_TO
        or any(vars(torch.Tensor).get(n) is not m for n, m in REAL_TENSOR_METHODS.items())
        or torch._utils._rebuild_tensor is not REAL_REBUILD_TENSOR
    ):
        problems.append("torch's device-taking functions are wrapped (entry points)")
    if any(isinstance(m, DeviceMode) for m in _get_current_function_mode_stack()):
        problems.append("a DeviceMode is on this thread's function-mode stack")
    for key, had in REAL_ALLOCATORS.items():
        if torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", key) != had:
            problems.append(f"aten::empty.memory_format has another {key} kernel")
    if warnings.showwarning is not REAL_SHOWWARNING:
        problems.append("warnings.showwarning is wrapped")
    if threading.getprofile() is not None:
        problems.append("a threading profile hook is installed")
    if torchdevice.is_enabled():
        problems.append("torchdevice is enabled")
    return problems
