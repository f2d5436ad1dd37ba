"""The collective forms NCCL accepts and gloo refuses, run on gloo as NCCL runs them.

A script written for NCCL keeps using NCCL's forms after its ``"nccl"`` group became gloo
(:mod:`torchdevice.distributed`). Swept across 2 ranks on torch 2.13, gloo refuses:

* ``all_gather_into_tensor`` (and ``all_gather_single``, its name since torch 2.13) into
  any output but the concatenation along dim 0 (a flat ``world_size * numel`` buffer as
  Accelerate's ``gather`` makes, or a stacked ``(world_size, *shape)`` one):
  "ProcessGroupGloo::allgather: invalid tensor size"; and an input that requires grad, in
  any output form ("A view was created in no_grad mode..."). NCCL only asks for
  ``world_size * input.numel()`` elements of the same dtype.
* ``reduce_scatter_tensor`` (and ``reduce_scatter_single``) from any input but the
  concatenation along dim 0 (a stacked ``(world_size, *shape)`` input): "Check failed:
  outputShape[0] * worldSize == inputShape[0]". NCCL only asks for
  ``world_size * output.numel()`` elements.
* ``all_gather`` (list) and ``all_to_all`` (list) with tensors of different sizes per rank:
  "invalid tensor size". ProcessGroupNCCL takes them (one broadcast per rank; a send and a
  receive per peer).
* ``ReduceOp.PREMUL_SUM`` (``dist._make_nccl_premul_sum(factor)``): "Cannot use
  ReduceOp.PREMUL_SUM with Gloo". NCCL multiplies each input by the factor and sums.
* float8 tensors in collectives that only move data (broadcast, the all-gathers,
  all-to-all): "Invalid scalar type". ProcessGroupNCCL moves them as bytes (``ncclUint8``).

Each adapter below takes the bound arguments of one call and a ``run`` that performs the
collective as the host runs it (staged through CPU memory where gloo cannot take the
device), rewrites the arguments into gloo's form (views where the result can land in
place, else a buffer copied back), and returns what NCCL would: ``None``, or with
``async_op=True`` a work object. Forms gloo takes as they are go to ``run`` untouched, and
so do malformed calls (a wrong element count, mixed dtypes): they get gloo's own error,
which is NCCL's too in substance. Only groups created for ``"nccl"`` are adapted
(:func:`mark`); a group the script asked gloo for keeps gloo's rules.

Forms gloo takes the way NCCL does (checked by the same sweep, left alone): the
concatenated ``all_gather_into_tensor``/``reduce_scatter_tensor``, ``all_to_all_single``
with and without split sizes, ``ReduceOp.AVG``, ``_coalescing_manager`` (the adapted
forms inside it are views, so the coalesced call writes where the script looks),
object collectives, ``barrier(device_ids=...)`` (gloo ignores the ids), ``async_op=True``.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

__all__ = [
    "ADAPTERS",
    "PREMUL_ONLY",
    "DoneWork",
    "Run",
    "is_nccl_group",
    "is_premul",
    "mark_nccl_group",
]

_log = logging.getLogger(__name__)

#: Runs a collective from its (possibly rewritten) bound arguments, as the host runs it.
Run = Callable[[inspect.BoundArguments], Any]

#: The groups a script created for NCCL (resolved to gloo): only these are adapted.
_NCCL_GROUPS: weakref.WeakSet[dist.ProcessGroup] = weakref.WeakSet()

#: Dtypes gloo cannot move and NCCL moves as bytes.
_AS_BYTES = frozenset(
    {
        torch.float8_e4m3fn,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2,
        torch.float8_e5m2fnuz,
    }
)


def mark_nccl_group(group: Any) -> None:
    """Remember ``group`` as created for NCCL (a non-member's placeholder is skipped)."""
    if isinstance(group, dist.ProcessGroup):
        _NCCL_GROUPS.add(group)


def is_nccl_group(group: Any) -> bool:
    """Whether ``group`` (``None``: the default group) was created for NCCL."""
    if group is None or group is c10d.GroupMember.WORLD:
        if not dist.is_initialized():
            return False
        group = c10d._get_default_group()
    return isinstance(group, dist.ProcessGroup) and group in _NCCL_GROUPS


class DoneWork(dist.Work):
    """What an ``async_op=True`` collective returns once it ran synchronously: a real
    ``Work`` (C++ code, DDP's reducer among it, takes it), finished, whose future holds
    the result tensors."""

    def __init__(self, result: list[torch.Tensor]) -> None:
        super().__init__()
        self._result = result

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._result

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        future: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
        future.set_result(self._result)
        return future


# -- helpers -----------------------------------------------------------------------------
def _size(bound: inspect.BoundArguments) -> int:
    return int(c10d._get_group_size(bound.arguments.get("group")))


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as gloo can move it: float8 viewed as bytes (same storage), else itself."""
    return tensor.view(torch.uint8) if tensor.dtype in _AS_BYTES else tensor


#: The collectives whose one NCCL-only form is ``ReduceOp.PREMUL_SUM``: with any other op
#: they run as they are (their adapters pass them through).
PREMUL_ONLY = frozenset({"all_reduce", "reduce"})


def is_premul(op: Any) -> bool:
    """Whether ``op`` (a ``ReduceOp``, or the ``RedOpType`` of the defaults) is PREMUL_SUM."""
    return bool(getattr(op, "op", op) == dist.ReduceOp.PREMUL_SUM)


def _factor(op: Any) -> float | torch.Tensor:
    """The factor of a ``PREMUL_SUM`` op (a number or a one-element tensor)."""
    factor: float | torch.Tensor = op.factor
    return factor


def _note(form: str) -> None:
    _log.debug("NCCL form on gloo: %s", form)


@contextmanager
def _plain() -> Iterator[None]:
    """torch's own tensors here, natively: the inputs are already on the real device."""
    with torch._C.DisableTorchFunction(), torch.no_grad():
        yield


def _finish(
    run: Run, bound: inspect.BoundArguments, copies: list[tuple[torch.Tensor, torch.Tensor]]
) -> Any:
    """Run ``bound``, then copy each ``(buffer, destination)`` pair back; what NCCL returns."""
    asked_async = bool(bound.arguments.get("async_op", False))
    bound.arguments["async_op"] = False
    run(bound)
    with _plain():
        for buffer, destination in copies:
            destination.copy_(buffer.view(destination.shape))
    return DoneWork([d for _, d in copies]) if asked_async else None


# -- the adapters --------------------------------------------------------------------------
def all_gather_into_tensor(run: Run, bound: inspect.BoundArguments) -> Any:
    """Any output of ``world_size * input.numel()`` elements; an input that requires grad."""
    output, input_ = bound.arguments["output_tensor"], bound.arguments["input_tensor"]
    if not (isinstance(output, torch.Tensor) and isinstance(input_, torch.Tensor)):
        return run(bound)
    world = _size(bound)
    gloo_form = (world * input_.shape[0], *input_.shape[1:]) if input_.dim() else (world,)
    if (
        output.dtype != input_.dtype
        or output.numel() != world * input_.numel()
        or not output.is_contiguous()  # NCCL refuses it too ("must be contiguous")
        or (
            tuple(output.shape) == gloo_form
            and not input_.requires_grad
            and input_.dtype not in _AS_BYTES
        )
    ):
        return run(bound)
    _note(f"all_gather_into_tensor {tuple(input_.shape)} -> {tuple(output.shape)}")
    with _plain():
        bound.arguments["input_tensor"] = _bytes(input_.detach().reshape(-1))
        bound.arguments["output_tensor"] = _bytes(output.detach().view(-1))
    with torch.no_grad():
        return run(bound)


def reduce_scatter_tensor(run: Run, bound: inspect.BoundArguments) -> Any:
    """Any input of ``world_size * output.numel()`` elements; ``PREMUL_SUM``."""
    output, input_ = bound.arguments["output"], bound.arguments["input"]
    op = bound.arguments.get("op", dist.ReduceOp.SUM)
    if not (isinstance(output, torch.Tensor) and isinstance(input_, torch.Tensor)):
        return run(bound)
    world = _size(bound)
    gloo_form = (world * output.shape[0], *output.shape[1:]) if output.dim() else (world,)
    premul = is_premul(op)
    if (
        output.dtype != input_.dtype
        or input_.numel() != world * output.numel()
        or not output.is_contiguous()  # NCCL refuses it too ("must be contiguous")
        or (tuple(input_.shape) == gloo_form and not premul)
    ):
        return run(bound)
    _note(f"reduce_scatter_tensor {tuple(input_.shape)} -> {tuple(output.shape)}")
    with _plain():
        flat_input = input_.detach().reshape(-1)
        if premul:
            flat_input = flat_input * _factor(op)
            bound.arguments["op"] = dist.ReduceOp.SUM
        bound.arguments["input"] = flat_input
        bound.arguments["output"] = output.detach().view(-1)
    with torch.no_grad():
        return run(bound)


def _premul_sum(
    bound: inspect.BoundArguments, name: str
) -> tuple[torch.Tensor, float | torch.Tensor] | None:
    """``(tensor, factor)`` of a ``PREMUL_SUM`` collective on one ``tensor``, whose op this
    makes ``SUM`` (the caller scales); ``None`` for any other call, which runs as it is."""
    tensor, op = bound.arguments["tensor"], bound.arguments.get("op", dist.ReduceOp.SUM)
    if not (is_premul(op) and isinstance(tensor, torch.Tensor)):
        return None
    _note(f"{name} PREMUL_SUM")
    bound.arguments["op"] = dist.ReduceOp.SUM
    return tensor, _factor(op)


def all_reduce(run: Run, bound: inspect.BoundArguments) -> Any:
    """``PREMUL_SUM``: each rank scales its tensor, then the ranks sum."""
    premul = _premul_sum(bound, "all_reduce")
    if premul is not None:
        tensor, factor = premul
        with _plain():
            tensor.mul_(factor)  # the tensor is overwritten by the result anyway
    return run(bound)


def reduce(run: Run, bound: inspect.BoundArguments) -> Any:
    """``PREMUL_SUM``: scaled copies are summed; only the destination's tensor changes."""
    premul = _premul_sum(bound, "reduce")
    if premul is None:
        return run(bound)
    tensor, factor = premul
    with _plain():
        scaled = tensor * factor
    bound.arguments["tensor"] = scaled
    group, dst = bound.arguments.get("group"), bound.arguments.get("dst")
    if dst is None:  # given as a rank in the group
        group_dst = bound.arguments.get("group_dst") or 0
        dst = c10d.get_global_rank(group, group_dst) if group is not None else group_dst
    mine = dist.get_rank() == dst
    return _finish(run, bound, [(scaled, tensor)] if mine else [])


def reduce_scatter(run: Run, bound: inspect.BoundArguments) -> Any:
    """``PREMUL_SUM``: each rank scales (copies of) its inputs, then the ranks sum."""
    inputs, op = bound.arguments["input_list"], bound.arguments.get("op", dist.ReduceOp.SUM)
    if not is_premul(op):
        return run(bound)
    _note("reduce_scatter PREMUL_SUM")
    with _plain():
        bound.arguments["input_list"] = [t * _factor(op) for t in inputs]
    bound.arguments["op"] = dist.ReduceOp.SUM
    return run(bound)


def broadcast(run: Run, bound: inspect.BoundArguments) -> Any:
    """float8 tensors, moved as bytes."""
    tensor = bound.arguments["tensor"]
    if isinstance(tensor, torch.Tensor) and tensor.dtype in _AS_BYTES:
        _note(f"broadcast {tensor.dtype}")
        bound.arguments["tensor"] = _bytes(tensor.detach())
    return run(bound)


def all_gather(run: Run, bound: inspect.BoundArguments) -> Any:
    """Outputs of different sizes per rank (each rank's input matches its output slot)."""
    outputs, input_ = bound.arguments["tensor_list"], bound.arguments["tensor"]
    if not (
        isinstance(input_, torch.Tensor)
        and isinstance(outputs, list)
        and all(isinstance(t, torch.Tensor) for t in outputs)
    ):
        return run(bound)
    if input_.dtype in _AS_BYTES and all(t.dtype == input_.dtype for t in outputs):
        _note(f"all_gather {input_.dtype}")
        bound.arguments["tensor"] = _bytes(input_.detach())
        bound.arguments["tensor_list"] = [_bytes(t.detach()) for t in outputs]
        return all_gather(run, bound)
    same = all(t.shape == input_.shape for t in outputs)
    rank = c10d.get_rank(bound.arguments.get("group"))
    if (
        same
        or len(outputs) != _size(bound)
        or rank < 0
        or any(t.dtype != input_.dtype for t in outputs)
        or outputs[rank].numel() != input_.numel()
    ):
        return run(bound)
    _note("all_gather of different sizes")
    with _plain():
        longest = max(t.numel() for t in outputs)
        padded = torch.zeros(longest, dtype=input_.dtype, device=input_.device)
        padded[: input_.numel()] = input_.detach().reshape(-1)
        buffers = [torch.empty_like(padded) for _ in outputs]
    bound.arguments["tensor"], bound.arguments["tensor_list"] = padded, buffers
    copies = [(b[: t.numel()], t) for b, t in zip(buffers, outputs, strict=True)]
    return _finish(run, bound, copies)


def all_to_all(run: Run, bound: inspect.BoundArguments, single: Run) -> Any:
    """Tensors of different sizes per peer: one ``all_to_all_single`` with split sizes."""
    outputs = bound.arguments["output_tensor_list"]
    inputs = bound.arguments["input_tensor_list"]
    tensors = [*outputs, *inputs] if isinstance(outputs, list) and isinstance(inputs, list) else []
    if (
        not tensors
        or not all(isinstance(t, torch.Tensor) for t in tensors)
        or any(t.dtype != tensors[0].dtype for t in tensors)
    ):
        return run(bound)
    if all(t.shape == tensors[0].shape for t in tensors) and tensors[0].dtype not in _AS_BYTES:
        return run(bound)
    _note("all_to_all of different sizes")
    with _plain():
        flat_in = torch.cat([_bytes(t.detach()).reshape(-1) for t in inputs])
        flat_out = torch.empty(
            sum(t.numel() for t in outputs), dtype=flat_in.dtype, device=flat_in.device
        )
    call = inspect.signature(c10d.all_to_all_single).bind(
        flat_out,
        flat_in,
        [t.numel() for t in outputs],
        [t.numel() for t in inputs],
        group=bound.arguments.get("group"),
        async_op=False,
    )
    single(call)
    with _plain():
        pieces = torch.split(flat_out, [t.numel() for t in outputs])
        for piece, target in zip(pieces, outputs, strict=True):
            _bytes(target).copy_(piece.view(_bytes(target).shape))
    return DoneWork(outputs) if bound.arguments.get("async_op", False) else None


def all_to_all_single(run: Run, bound: inspect.BoundArguments) -> Any:
    """float8 tensors, moved as bytes."""
    output, input_ = bound.arguments["output"], bound.arguments["input"]
    if (
        isinstance(output, torch.Tensor)
        and isinstance(input_, torch.Tensor)
        and input_.dtype in _AS_BYTES
        and output.dtype == input_.dtype
    ):
        _note(f"all_to_all_single {input_.dtype}")
        bound.arguments["output"] = _bytes(output.detach())
        bound.arguments["input"] = _bytes(input_.detach())
    return run(bound)


#: The adapted collectives; ``all_to_all`` also takes the runner of ``all_to_all_single``.
ADAPTERS: dict[str, Callable[..., Any]] = {
    "all_gather_into_tensor": all_gather_into_tensor,
    "all_gather_single": all_gather_into_tensor,  # torch 2.13's name of the same call
    "reduce_scatter_tensor": reduce_scatter_tensor,
    "reduce_scatter_single": reduce_scatter_tensor,
    "all_reduce": all_reduce,
    "reduce": reduce,
    "reduce_scatter": reduce_scatter,
    "broadcast": broadcast,
    "all_gather": all_gather,
    "all_to_all": all_to_all,
    "all_to_all_single": all_to_all_single,
}
