"""A 2-rank DDP training step, written once for NCCL (CUDA) and once for gloo (CPU).

Launched by ``workloads.py`` with ``python -m torch.distributed.run --standalone
--nproc_per_node=2 benchmarks/_ddp_step.py --written-for cuda|cpu OUT``. ``cuda`` is the script
as written for NCCL (``init_process_group("nccl")``, ``torch.cuda.set_device``, ``.cuda()``,
``device_ids``, CUDA tensors), run under ``ACTIVATE_TORCH_DEVICE=1``; ``cpu`` is the same
script written for gloo, run natively. Each rank trains with gradient accumulation under
``no_sync`` (the shape of ``tests/scripts/ddp_nccl.py``), times ``STEPS`` steps after
``WARMUP`` steps between two barriers, and rank 0 writes ``{"steps_per_s": ...}`` to OUT.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WARMUP = 10
MICRO = 2
BATCH = 32
WIDTH = 128


def training_step(
    ddp: DDP, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, device: str
) -> Callable[[], None]:
    """One step: ``MICRO`` micro-batches under ``no_sync`` but the last, then the optimizer
    and an all-reduce of the step's loss (``benchmarks/instructions.py`` counts it too)."""

    def step() -> None:
        optimizer.zero_grad()
        total = torch.zeros((), device=device)
        for index in range(MICRO):
            loss = ((ddp(x[index]) - y[index]) ** 2).mean()
            if index < MICRO - 1:
                with ddp.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += loss.detach()
        optimizer.step()
        dist.all_reduce(total)

    return step


def main() -> None:
    written_for, out, steps = sys.argv[2], sys.argv[3], int(sys.argv[4])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 1))
    if written_for == "cuda":
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(local_rank)
        device = "cuda"
        ddp = DDP(model.cuda(), device_ids=[local_rank], output_device=local_rank)
    else:
        dist.init_process_group(backend="gloo")
        device = "cpu"
        ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(dist.get_rank())
    x = torch.randn(MICRO, BATCH, WIDTH, generator=generator).to(device)
    y = torch.randn(MICRO, BATCH, 1, generator=generator).to(device)

    step = training_step(ddp, optimizer, x, y, device)

    for _ in range(WARMUP):
        step()
    dist.barrier()
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    dist.barrier()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started  # this rank's threads, gloo's included
    if dist.get_rank() == 0:
        with open(out, "w") as file:
            facts = {"steps_per_s": steps / elapsed, "cpu_steps_per_s": steps / cpu}
            json.dump({**facts, "device": str(x.device)}, file)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
