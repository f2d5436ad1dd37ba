"""The 2-rank DDP script of ``tests/scripts/ddp_nccl.py``, written for NCCL or for gloo.

Launched by ``exit_aborts.py`` under torchrun: ``_exit_ddp.py --written-for cuda|cpu OUT``.
``cuda`` is the script as CUDA-first users write it (``init_process_group("nccl")``,
``torch.cuda.set_device``, ``.cuda()``, ``device_ids``, ``map_location="cuda"``), run under
torchdevice; ``cpu`` is the same script written for gloo, run natively, so that the two
sides differ only in torchdevice. Each rank trains with gradient accumulation under
``no_sync``, saves a checkpoint on rank 0 half-way, reloads it, trains on, writes its
parameters to ``OUT/rank{rank}.pt`` and destroys its process group.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 6
SAVE_AFTER = 3
MICRO = 2
SAMPLES = 16


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def wrap(model: nn.Module, written_for: str, local_rank: int) -> nn.Module:
    if written_for == "cuda":
        return DDP(model.cuda(), device_ids=[local_rank], output_device=local_rank)
    return DDP(model)


def train(ddp: nn.Module, optimizer: torch.optim.Optimizer, steps: range, device: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    x, y = x[rank::world].to(device), y[rank::world].to(device)
    chunks = list(zip(x.chunk(MICRO), y.chunk(MICRO), strict=True))
    for _ in steps:
        optimizer.zero_grad()
        total = torch.zeros((), device=device)
        for index, (xb, yb) in enumerate(chunks):
            loss = ((ddp(xb) - yb) ** 2).sum() * world / SAMPLES
            if index < len(chunks) - 1:
                with ddp.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += loss.detach() / world
        optimizer.step()
        dist.all_reduce(total)


def main() -> None:
    written_for, out = sys.argv[2], sys.argv[3]
    local_rank = int(os.environ["LOCAL_RANK"])
    if written_for == "cuda":
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(local_rank)
        device = "cuda"
    else:
        dist.init_process_group(backend="gloo")
        device = "cpu"
    rank = dist.get_rank()
    ddp = wrap(build(), written_for, local_rank)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    train(ddp, optimizer, range(SAVE_AFTER), device)
    checkpoint = os.path.join(out, "checkpoint.pt")
    if rank == 0:
        torch.save(
            {"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint
        )
    dist.barrier()
    state = torch.load(checkpoint, map_location=device)
    resumed = build().to(device)
    resumed.load_state_dict(state["model"])
    ddp = wrap(resumed, written_for, local_rank)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    optimizer.load_state_dict(state["optimizer"])
    train(ddp, optimizer, range(SAVE_AFTER, STEPS), device)
    params = [p.detach().tolist() for p in ddp.module.parameters()]
    torch.save({"params": params}, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
