"""The collective forms NCCL accepts, swept across 2 ranks, as a NCCL script writes them.

Launched by ``tests/test_nccl_forms.py`` with torchrun, redirected. Each rank runs every
form twice: on the group the script created for NCCL (which torchdevice resolves to gloo)
and on a group it asked gloo for (gloo's own rules: the refusals the first must not show).
Each rank writes ``OUT/forms{rank}.json``: ``{form: {"nccl": outcome, "gloo": outcome}}``,
an outcome being ``{"value": ...}`` or ``{"error": "Type: message"}``. The test compares the
values with the mathematically expected ones.

Usage: ``torchrun --nproc_per_node=2 nccl_forms.py OUT``
"""

import json
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

FORMS: dict[str, Callable[[Any, int, int], Any]] = {}


def form(fn: Callable[[Any, int, int], Any]) -> Callable[[Any, int, int], Any]:
    FORMS[fn.__name__] = fn
    return fn


def full(shape: Any, value: float, **kwargs: Any) -> torch.Tensor:
    return torch.full(shape, float(value), device="cuda", **kwargs)


# -- all_gather_into_tensor ---------------------------------------------------------------
@form
def gather_concatenated(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(world * 2, 3, device="cuda")
    dist.all_gather_into_tensor(out, full((2, 3), rank), group=group)
    return out.tolist()


@form
def gather_flat(group: Any, rank: int, world: int) -> Any:
    """Accelerate's ``gather``: a flat buffer of ``world_size * numel`` elements."""
    out = torch.empty(world * 6, device="cuda")
    dist.all_gather_into_tensor(out, full((2, 3), rank), group=group)
    return out.view(-1, 3).tolist()


@form
def gather_stacked(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(world, 2, 3, device="cuda")
    dist.all_gather_into_tensor(out, full((2, 3), rank), group=group)
    return out.view(-1, 3).tolist()


@form
def gather_single_flat(group: Any, rank: int, world: int) -> Any:
    """torch 2.13's name of ``all_gather_into_tensor``."""
    out = torch.empty(world * 6, device="cuda")
    dist.all_gather_single(out, full((2, 3), rank), group=group)
    return out.view(-1, 3).tolist()


@form
def gather_flat_requires_grad(group: Any, rank: int, world: int) -> Any:
    """Accelerate gathers model outputs that still require grad."""
    x = full((2, 3), rank, requires_grad=True)
    out = torch.empty(world * 6, device="cuda")
    dist.all_gather_into_tensor(out, x, group=group)
    return [out.view(-1, 3).tolist(), out.requires_grad]


@form
def gather_concatenated_requires_grad(group: Any, rank: int, world: int) -> Any:
    x = full((2, 3), rank, requires_grad=True) * 1.0
    out = torch.zeros(world * 2, 3, device="cuda")
    dist.all_gather_into_tensor(out, x, group=group)
    return [out.tolist(), out.requires_grad]


@form
def gather_flat_async(group: Any, rank: int, world: int) -> Any:
    out = torch.empty(world * 6, device="cuda")
    work = dist.all_gather_into_tensor(out, full((2, 3), rank), group=group, async_op=True)
    return [work.wait(), out.view(-1, 3).tolist()]


@form
def gather_wrong_numel(group: Any, rank: int, world: int) -> Any:
    """Refused by NCCL too: the error must stay an error."""
    out = torch.empty(world * 6 + 1, device="cuda")
    dist.all_gather_into_tensor(out, full((2, 3), rank), group=group)
    return out.tolist()


@form
def gather_float8(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(world * 2, device="cuda", dtype=torch.float8_e4m3fn)
    x = full((2,), rank + 1).to(torch.float8_e4m3fn)
    dist.all_gather_into_tensor(out, x, group=group)
    return out.float().tolist()


# -- reduce_scatter_tensor ----------------------------------------------------------------
def scatter_input(rank: int) -> torch.Tensor:
    return torch.arange(6.0, device="cuda") + rank


@form
def scatter_concatenated(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(3, device="cuda")
    dist.reduce_scatter_tensor(out, scatter_input(rank), group=group)
    return out.tolist()


@form
def scatter_stacked(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(3, device="cuda")
    dist.reduce_scatter_tensor(out, scatter_input(rank).view(world, 3), group=group)
    return out.tolist()


@form
def scatter_single_stacked(group: Any, rank: int, world: int) -> Any:
    """torch 2.13's name of ``reduce_scatter_tensor``."""
    out = torch.zeros(3, device="cuda")
    dist.reduce_scatter_single(out, scatter_input(rank).view(world, 3), group=group)
    return out.tolist()


@form
def scatter_stacked_2d(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(1, 3, device="cuda")
    dist.reduce_scatter_tensor(out, scatter_input(rank).view(world, 1, 3), group=group)
    return out.view(-1).tolist()


@form
def scatter_avg(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(3, device="cuda")
    dist.reduce_scatter_tensor(out, scatter_input(rank), op=dist.ReduceOp.AVG, group=group)
    return out.tolist()


@form
def scatter_premul_sum(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(3, device="cuda")
    op = dist._make_nccl_premul_sum(0.5)
    dist.reduce_scatter_tensor(out, scatter_input(rank).view(world, 3), op=op, group=group)
    return out.tolist()


@form
def scatter_list_premul_sum(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(3, device="cuda")
    inputs = list(scatter_input(rank).split(3))
    dist.reduce_scatter(out, inputs, op=dist._make_nccl_premul_sum(0.5), group=group)
    return out.tolist()


# -- all_reduce and reduce ------------------------------------------------------------------
@form
def reduce_avg(group: Any, rank: int, world: int) -> Any:
    x = full((2,), rank + 1)
    dist.all_reduce(x, op=dist.ReduceOp.AVG, group=group)
    return x.tolist()


@form
def reduce_premul_sum(group: Any, rank: int, world: int) -> Any:
    x = full((2,), rank + 1)
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(3.0), group=group)
    return x.tolist()


@form
def reduce_premul_sum_tensor_factor(group: Any, rank: int, world: int) -> Any:
    x = full((2,), rank + 1)
    factor = torch.tensor([3.0], device="cuda")
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor), group=group)
    return x.tolist()


@form
def reduce_to_rank0_premul_sum(group: Any, rank: int, world: int) -> Any:
    x = full((2,), rank + 1)
    dist.reduce(x, dst=0, op=dist._make_nccl_premul_sum(3.0), group=group)
    return x.tolist()


@form
def reduce_async(group: Any, rank: int, world: int) -> Any:
    x = full((2,), rank + 1)
    work = dist.all_reduce(x, group=group, async_op=True)
    waited = work.wait()
    future = work.get_future().wait()
    finished = [waited, work.is_completed(), isinstance(work, dist.Work)]
    return [*finished, x.tolist(), [t.tolist() for t in future]]


# -- all_gather (list), broadcast --------------------------------------------------------
@form
def gather_list_uneven(group: Any, rank: int, world: int) -> Any:
    outputs = [torch.zeros(r + 1, 2, device="cuda") for r in range(world)]
    dist.all_gather(outputs, full((rank + 1, 2), rank + 1), group=group)
    return [t.tolist() for t in outputs]


@form
def gather_list_requires_grad(group: Any, rank: int, world: int) -> Any:
    outputs = [torch.zeros(2, device="cuda") for _ in range(world)]
    dist.all_gather(outputs, full((2,), rank, requires_grad=True), group=group)
    return [t.tolist() for t in outputs]


@form
def broadcast_float8(group: Any, rank: int, world: int) -> Any:
    x = full((3,), rank + 1).to(torch.float8_e5m2)
    dist.broadcast(x, src=1, group=group)
    return x.float().tolist()


@form
def gather_to_rank0(group: Any, rank: int, world: int) -> Any:
    gathered = [torch.zeros(2, device="cuda") for _ in range(world)] if rank == 0 else None
    dist.gather(full((2,), rank + 1), gathered, dst=0, group=group)
    return None if gathered is None else [t.tolist() for t in gathered]


@form
def scatter_from_rank1(group: Any, rank: int, world: int) -> Any:
    mine = torch.zeros(2, device="cuda")
    pieces = [full((2,), 10 + r) for r in range(world)] if rank == 1 else None
    dist.scatter(mine, pieces, src=1, group=group)
    return mine.tolist()


# -- all_to_all ----------------------------------------------------------------------------
@form
def all_to_all_single_even(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(4, device="cuda")
    dist.all_to_all_single(out, torch.arange(4.0, device="cuda") + 10 * rank, group=group)
    return out.tolist()


@form
def all_to_all_single_splits(group: Any, rank: int, world: int) -> Any:
    """Rank r sends r + 1 + j elements to rank j (and so receives j + 1 + r from j)."""
    sends = [rank + 1 + peer for peer in range(world)]
    receives = [peer + 1 + rank for peer in range(world)]
    x = torch.arange(float(sum(sends)), device="cuda") + 10 * rank
    out = torch.zeros(sum(receives), device="cuda")
    dist.all_to_all_single(out, x, receives, sends, group=group)
    return out.tolist()


@form
def all_to_all_list_uneven(group: Any, rank: int, world: int) -> Any:
    inputs = [full((rank + 1 + peer,), 10 * rank + peer) for peer in range(world)]
    outputs = [torch.zeros(peer + 1 + rank, device="cuda") for peer in range(world)]
    dist.all_to_all(outputs, inputs, group=group)
    return [t.tolist() for t in outputs]


@form
def all_to_all_single_float8(group: Any, rank: int, world: int) -> Any:
    out = torch.zeros(world, device="cuda", dtype=torch.float8_e4m3fn)
    x = (torch.arange(2.0, device="cuda") + 2 * rank).to(torch.float8_e4m3fn)
    dist.all_to_all_single(out, x, group=group)
    return out.float().tolist()


# -- coalescing, barrier, objects -------------------------------------------------------------
@form
def coalesced_all_reduce(group: Any, rank: int, world: int) -> Any:
    a, b = full((2,), rank + 1), full((3,), rank + 2)
    with dist._coalescing_manager(group=group):
        dist.all_reduce(a, group=group)
        dist.all_reduce(b, group=group)
    return [a.tolist(), b.tolist()]


@form
def coalesced_gather_flat(group: Any, rank: int, world: int) -> Any:
    a, b = torch.zeros(world * 2, device="cuda"), torch.zeros(world * 3, device="cuda")
    with dist._coalescing_manager(group=group, async_ops=True) as manager:
        dist.all_gather_into_tensor(a, full((2, 1), rank), group=group)
        dist.all_gather_into_tensor(b, full((1, 3), rank), group=group)
    manager.wait()
    return [a.tolist(), b.tolist()]


@form
def coalesced_scatter_stacked(group: Any, rank: int, world: int) -> Any:
    a, b = torch.zeros(3, device="cuda"), torch.zeros(1, device="cuda")
    with dist._coalescing_manager(group=group):
        dist.reduce_scatter_tensor(a, scatter_input(rank).view(world, 3), group=group)
        dist.reduce_scatter_tensor(b, full((world, 1), rank), group=group)
    return [a.tolist(), b.tolist()]


@form
def barrier_device_ids(group: Any, rank: int, world: int) -> Any:
    return dist.barrier(group=group, device_ids=[torch.cuda.current_device()])


@form
def objects(group: Any, rank: int, world: int) -> Any:
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {"rank": rank}, group=group)
    broadcast: list[Any] = [rank, f"from {rank}"]
    device = torch.device("cuda", torch.cuda.current_device())
    dist.broadcast_object_list(broadcast, src=1, group=group, device=device)
    at_zero: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(("rank", rank), at_zero, dst=0, group=group)
    scattered: list[Any] = [None]
    dist.scatter_object_list(scattered, [f"to {r}" for r in range(world)], src=0, group=group)
    return [gathered, broadcast, at_zero, scattered]


def outcome(fn: Callable[[Any, int, int], Any], group: Any, rank: int, world: int) -> Any:
    try:
        result = {"value": fn(group, rank, world)}
    except Exception as error:  # the outcome the test compares
        result = {"error": f"{type(error).__name__}: {str(error).strip()}"}
    dist.barrier()  # a refused form on one rank must not leave the other behind
    return result


def main() -> None:
    dist.init_process_group("nccl", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    results: dict[str, Any] = {}
    for name, fn in FORMS.items():
        # A group of its own for each refused form: a failed gloo collective may leave
        # its group unusable (an error that surfaces in the group's next call).
        gloo = dist.new_group(backend="gloo")
        results[name] = {
            "nccl": outcome(fn, None, rank, world),
            "gloo": outcome(fn, gloo, rank, world),
        }
        results["backend"] = {"nccl": dist.get_backend(), "gloo": dist.get_backend(gloo)}
        dist.destroy_process_group(gloo)
    with open(os.path.join(sys.argv[1], f"forms{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
