"""A 2-rank DDP training script written for NCCL, as CUDA-first users write it.

Launched by the tests with ``torchrun`` (``python -m torch.distributed.run``); run it on a
CUDA machine as is. It trains a small regression model with gradient accumulation under
``no_sync``, saves a checkpoint on rank 0 half-way, reloads it on every rank with
``map_location="cuda"`` and trains on. Each rank writes its final parameters and the
global loss of every step (an ``all_reduce`` of a CUDA tensor) to ``OUT/rank{rank}.pt``.

Every rank's shard of each global batch is weighted so that DDP's average of the ranks'
gradients is the full-batch gradient: the result equals one process training on the whole
batch (:func:`reference`, which the tests run natively).

Usage: ``torchrun --nproc_per_node=2 ddp_nccl.py OUT``
"""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 6
SAVE_AFTER = 3
MICRO = 2  # micro-batches per step and rank (gradient accumulation)
SAMPLES = 16


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """The whole data set, the same in every process."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return x, y


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def optimizer_for(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def reference() -> tuple[list[torch.Tensor], list[float]]:
    """One process, full batch: the parameters and losses DDP must reproduce."""
    model = build()
    optimizer = optimizer_for(model)
    x, y = data()
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).sum() / SAMPLES
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: range,
    losses: list[float],
    rank: int,
    world: int,
    device: str,
) -> None:
    x, y = data()
    x, y = x[rank::world].to(device), y[rank::world].to(device)
    chunks = list(zip(x.chunk(MICRO), y.chunk(MICRO), strict=True))
    for _ in steps:
        optimizer.zero_grad()
        total = torch.zeros((), device="cuda")
        for index, (xb, yb) in enumerate(chunks):
            loss = ((model(xb) - yb) ** 2).sum() * world / SAMPLES
            if index < len(chunks) - 1:
                with model.no_sync():  # accumulate locally, reduce on the last micro-batch
                    loss.backward()
            else:
                loss.backward()
            total += loss.detach() / world
        optimizer.step()
        dist.all_reduce(total)  # the global loss, summed over the ranks
        losses.append(total.item())


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group(backend="nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = f"cuda:{local_rank}"

    model = build().cuda()
    ddp = DDP(model, device_ids=[local_rank], output_device=local_rank)
    optimizer = optimizer_for(ddp)
    losses: list[float] = []
    train(ddp, optimizer, range(SAVE_AFTER), losses, rank, world, device)

    checkpoint = os.path.join(out, "checkpoint.pt")
    if rank == 0:
        torch.save(
            {"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint
        )
    dist.barrier()
    state = torch.load(checkpoint, map_location="cuda")

    resumed = build().cuda()
    resumed.load_state_dict(state["model"])
    ddp = DDP(resumed, device_ids=[local_rank], output_device=local_rank)
    optimizer = optimizer_for(ddp)
    optimizer.load_state_dict(state["optimizer"])
    train(ddp, optimizer, range(SAVE_AFTER, STEPS), losses, rank, world, device)

    params = [p.detach().tolist() for p in ddp.module.parameters()]
    torch.save(
        {
            "params": params,
            "losses": losses,
            "backend": dist.get_backend(),
            "device": str(next(ddp.module.parameters()).device),
        },
        os.path.join(out, f"rank{rank}.pt"),
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
