"""Call every public ``torch.Tensor`` and ``torch.UntypedStorage`` method on the simulated
device and on the CPU.

``python tensor_methods.py PROGRESS SKIP...`` registers the simulated device and, for each
public method of ``torch.Tensor`` (minus the names in ``SKIP``: methods an earlier run
crashed in), finds the first argument pattern the CPU accepts and makes the same call on the
device. Before each call it appends ``start NAME`` to ``PROGRESS`` (flushed), after it
``done NAME OUTCOME DETAIL``, so that a crash of the interpreter names the method it died in
(``SWEEP_CRASH_IN=NAME`` crashes it on purpose there, to test that).

Outcomes: ``same`` (the device gives the CPU's result), ``both-fail`` (no pattern works on
the CPU either), ``refused`` (the device raises what MPS raises: a missing kernel, a dtype
MPS lacks, a host-only conversion), ``device-specific`` (an answer that names the device or
its memory: :data:`DEVICE_SPECIFIC`), ``differs`` (another result or error: a finding).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from torchdevice.testing import register

NAME = register()

#: Methods not called: they need state the sweep cannot give them, or act on the process.
NOT_CALLED = {
    "Tensor.backward": "needs a graph (autograd is swept by the op database tests)",
    "Tensor.register_hook": "a hook registry, no computation",
    "Tensor.register_post_accumulate_grad_hook": "a hook registry, no computation",
    "Tensor.retain_grad": "autograd bookkeeping, no computation",
    "Tensor.cuda": "CUDA itself, absent here",
    "Tensor.to_sparse_bsc": "sparse layouts: the device has none, as MPS",
    "Tensor.to_sparse_bsr": "sparse layouts: the device has none, as MPS",
    "Tensor.to_sparse_csc": "sparse layouts: the device has none, as MPS",
    "Tensor.to_sparse_csr": "sparse layouts: the device has none, as MPS",
    "Tensor.to_sparse": "sparse layouts: the device has none, as MPS",
    "Tensor.module_load": "a module-loading hook, no computation",
    "Tensor.to_sparse_coo": "sparse layouts: the device has none (MPS has a few kernels)",
}

#: Methods whose answer names the device or its memory: they differ from the CPU's by nature.
DEVICE_SPECIFIC = {
    "Tensor.data_ptr": "an address",
    "Tensor.const_data_ptr": "an address",
    "Tensor.get_device": "the device index (-1 on the CPU)",
    "Tensor.type": "the type name names the device ('torch.simgpu.FloatTensor')",
    "Tensor.is_shared": "PyTorch answers True for this PrivateUse1 device's storages, False "
    "for MPS's: a trait of the simulation",
    "UntypedStorage.data_ptr": "an address",
    "UntypedStorage.get_device": "the device index (None on the CPU)",
    "UntypedStorage.is_shared": "as Tensor.is_shared",
}

#: Errors that are MPS's own answers (or any accelerator's: host-only conversions).
FAITHFUL_REFUSALS = (
    f"is not currently implemented for the {NAME} device",
    f"to the {NAME} backend but it does not have support for that dtype",
    f"Cannot convert a {NAME} Tensor to float64",
    "can't convert",  # numpy() of a device tensor, as for CUDA and MPS
    "only dense CPU tensors can be pinned",
    "only CPU memory can be pinned",
)


def bases(device: str) -> dict[str, torch.Tensor]:
    """The tensors methods are called on, by kind, on ``device``: a float32 3x4 matrix with
    distinct values in (0, 1), a square well-conditioned one, a vector, a one-element
    tensor, an int32 matrix."""
    matrix = (torch.arange(1, 13, dtype=torch.float32).reshape(3, 4) / 13).to(device)
    square = (torch.eye(3) * 2 + torch.arange(9.0).reshape(3, 3) / 10).to(device)
    return {
        "matrix": matrix,
        "square": square,
        "vector": matrix[0].clone(),
        "scalar": matrix[0, :1].clone(),
        "int": torch.arange(1, 13, dtype=torch.int32).reshape(3, 4).to(device),
    }


def patterns(device: str) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """(kind of tensor, arguments) patterns, tried in order until the CPU accepts one."""
    b = bases(device)
    x, square, vector = b["matrix"], b["square"], b["vector"]
    index = torch.tensor([0, 2], device=device)
    index2d = torch.tensor([[0, 1], [1, 2], [2, 3]], device=device)
    mask = x > 0.5
    return [
        ("matrix", (), {}),
        ("matrix", (x,), {}),
        ("matrix", (0,), {}),
        ("matrix", (1,), {}),
        ("matrix", (0.5,), {}),
        ("matrix", (x.t(),), {}),
        ("matrix", (0, index), {}),
        ("matrix", (0, index, x[:2]), {}),
        ("matrix", (0, index, 0.5), {}),
        ("matrix", (1, index2d), {}),
        ("matrix", (1, index2d, x[:, :2]), {}),
        ("matrix", (mask, 0.0), {}),
        ("matrix", (mask,), {}),
        ("matrix", (mask, x), {}),
        ("matrix", (x, 0.5), {}),
        ("matrix", (x, x), {}),
        ("matrix", (torch.float16,), {}),
        ("matrix", (device,), {}),
        ("matrix", (2, 3, 2), {}),
        ("matrix", (4, 3), {}),
        ("matrix", (12,), {}),
        ("matrix", ((2, 6),), {}),
        ("matrix", (0, 1), {}),
        ("matrix", (1, 0, 2), {}),
        ("matrix", (0, 0, 2), {}),
        ("matrix", (index,), {}),
        ("matrix", ((index,), x[:2]), {}),
        ("matrix", (index, vector[:2]), {}),
        ("matrix", ([1, 2],), {}),
        ("matrix", (1, (2, 2)), {}),
        ("matrix", ((2,), 0.5), {}),
        ("matrix", ((2, 2), (1, 2)), {}),
        ("matrix", (x[:, 0].clone(),), {}),
        ("matrix", (x[0], 0, 0), {}),
        ("matrix", (torch.tensor([0.25], device=device),), {}),
        ("matrix", (), {"size": 3}),
        ("matrix", (x.t(), x), {}),
        ("square", (), {}),
        ("square", (2,), {}),
        ("square", (square,), {}),
        ("square", (square, square), {}),
        ("square", (square, square[0]), {}),
        ("vector", (vector,), {}),
        ("vector", ((3, 4),), {}),
        ("scalar", (), {}),
        ("int", (), {}),
        ("int", (b["int"],), {}),
        ("int", (1,), {}),
    ]


#: Methods whose device result is on the CPU by design.
HOST_RESULTS = {"cpu"}
#: Methods that return uninitialised memory: only dtype, shape and device are compared.
UNINITIALISED = {"Tensor.new_empty", "Tensor.new_empty_strided"}


def compare(cpu: Any, dev: Any, on: str = NAME, values: bool = True) -> str | None:
    """None when ``dev`` (from the device) is ``cpu``'s result, its tensors on ``on``, else
    what differs (``values=False``: tensors' values are not compared)."""
    if isinstance(cpu, torch.Tensor):
        if not isinstance(dev, torch.Tensor):
            return f"a {type(dev).__name__}, not a tensor"
        if dev.device.type != on:
            return f"landed on {dev.device}"
        if cpu.dtype != dev.dtype or cpu.shape != dev.shape:
            return f"{dev.dtype}{tuple(dev.shape)} instead of {cpu.dtype}{tuple(cpu.shape)}"
        if cpu.layout != torch.strided or cpu.is_quantized or not values:
            return None
        host, ref = dev.detach().cpu(), cpu.detach()
        if ref.dtype in (torch.complex32, torch.float8_e4m3fn, torch.float8_e5m2):
            wide = torch.complex64 if ref.is_complex() else torch.float32  # equal() lacks them
            host, ref = host.to(wide), ref.to(wide)
        same = torch.equal(ref, host) or (
            (ref.is_floating_point() or ref.is_complex())
            and torch.allclose(ref, host, equal_nan=True)
        )
        return None if same else "other values"
    if isinstance(cpu, (tuple, list)) and not isinstance(cpu, torch.Size):
        if not isinstance(dev, (tuple, list)) or len(cpu) != len(dev):
            return "another structure"
        for one, other in zip(cpu, dev, strict=True):
            problem = compare(one, other, on, values)
            if problem is not None:
                return problem
        return None
    if isinstance(cpu, (torch.UntypedStorage, torch.TypedStorage)):
        if not isinstance(dev, (torch.UntypedStorage, torch.TypedStorage)):
            return f"a {type(dev).__name__}, not a storage"
        if dev.device.type != on:
            return f"storage on {dev.device}"
        return compare(_bytes(cpu), _bytes(dev).to(on), on)
    if isinstance(cpu, (torch.device, torch.Generator)):
        return None  # device-specific by nature
    if callable(cpu) or type(cpu).__module__.startswith("torch"):
        return None
    try:
        equal = bool(cpu == dev)
    except Exception:  # a comparison that cannot be made is not a finding
        return None
    return None if equal else f"{dev!r} instead of {cpu!r}"


def _bytes(storage: torch.UntypedStorage | torch.TypedStorage) -> torch.Tensor:
    """A storage's bytes as a CPU uint8 tensor."""
    untyped = storage.untyped() if isinstance(storage, torch.TypedStorage) else storage
    return torch.empty(0, dtype=torch.uint8).set_(untyped.cpu())


def call(method: Callable[..., Any], device: str, pattern: int, on_storage: bool) -> Any:
    """``method`` on a fresh base tensor (or its storage) of ``device`` with argument pattern
    ``pattern``, the generators seeded alike; returns the result and the tensor or storage
    itself (in-place methods change it)."""
    kind, args, kwargs = patterns(device)[pattern]
    target = bases(device)[kind]
    if on_storage:
        if kind != "matrix":
            raise ValueError("storages are called with the matrix patterns only")
        args = tuple(a.untyped_storage() if isinstance(a, torch.Tensor) else a for a in args)
        target = target.untyped_storage()
    torch.manual_seed(0)
    result = method(target, *args, **kwargs)
    return result, target


def public_methods(cls: type) -> list[str]:
    """The public methods of ``cls``, sorted."""
    return sorted(
        name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name, None))
    )


def sweep(progress: Path, skip: set[str]) -> None:
    names = [("Tensor", name) for name in public_methods(torch.Tensor)]
    names += [("UntypedStorage", name) for name in public_methods(torch.UntypedStorage)]
    with progress.open("a", encoding="utf-8") as log:
        for owner, method_name in names:
            name = f"{owner}.{method_name}"
            if name in skip or name in NOT_CALLED:
                continue
            log.write(f"start {name}\n")
            log.flush()
            if name == os.environ.get("SWEEP_CRASH_IN"):  # the test of the crash detection
                os.kill(os.getpid(), signal.SIGSEGV)
            outcome, detail = run_one(owner, method_name)
            log.write(f"done {name} {outcome} {detail}\n".replace("\n", " ") + "\n")
            log.flush()
        log.write("finished\n")


def run_one(owner: str, name: str) -> tuple[str, str]:
    """Call ``owner.name`` on the CPU and on the device; the outcome and a detail."""
    method = getattr(getattr(torch, owner), name)
    cpu = None
    on_storage = owner == "UntypedStorage"
    for pattern in range(len(patterns("cpu"))):
        try:
            cpu = call(method, "cpu", pattern, on_storage)
        except Exception:  # trying patterns until one fits
            continue
        break
    else:
        return "both-fail", ""
    try:
        dev = call(method, NAME, pattern, on_storage)
    except Exception as error:  # every error is classified
        text = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        if any(refusal in text for refusal in FAITHFUL_REFUSALS):
            return "refused", text
        return "differs", text
    on = "cpu" if name in HOST_RESULTS else NAME
    values = f"{owner}.{name}" not in UNINITIALISED
    problem = compare(cpu[0], dev[0], on, values) or compare(cpu[1], dev[1])
    if problem is None:
        return "same", f"pattern {pattern}"
    if f"{owner}.{name}" in DEVICE_SPECIFIC:
        return "device-specific", f"pattern {pattern}: {problem}"
    return "differs", f"pattern {pattern}: {problem}"


if __name__ == "__main__":
    sweep(Path(sys.argv[1]), set(sys.argv[2:]))
