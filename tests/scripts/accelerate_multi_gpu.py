"""A 2-process Accelerate script, as written for GPUs: ``accelerate launch --multi_gpu``.

It trains one step of a small regression model on the first batch of each rank, then
gathers a 2-D tensor with ``accelerator.gather`` (the flat ``all_gather_into_tensor`` of
NCCL runs) and an evaluation set of 5 samples with ``gather_for_metrics`` (which drops
the samples repeated to even out the last batch). Each rank writes what it saw to
``OUT/accelerate{rank}.json``.

Usage: ``accelerate launch --multi_gpu --num_processes 2 accelerate_multi_gpu.py OUT``
"""

import json
import os
import sys

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SAMPLES = 8
BATCH = 2


def data() -> TensorDataset:
    x = torch.arange(SAMPLES * 4, dtype=torch.float32).view(SAMPLES, 4) / 10
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return TensorDataset(x, y)


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 1)


def main() -> None:
    accelerator = Accelerator()
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(data(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    x, y = next(iter(loader))
    loss = ((model(x) - y) ** 2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()

    rank = accelerator.process_index
    mine = torch.full((2, 3), float(rank), device=accelerator.device, requires_grad=True) * 1
    gathered = accelerator.gather(mine)
    evaluation = accelerator.prepare(DataLoader(TensorDataset(torch.arange(5.0)), batch_size=2))
    seen = [accelerator.gather_for_metrics(batch).tolist() for (batch,) in evaluation]

    result = {
        "distributed_type": str(accelerator.distributed_type),
        "num_processes": accelerator.num_processes,
        "device": str(accelerator.device),
        "tensor_device": str(x.device),
        "backend": torch.distributed.get_backend(),
        "gathered": gathered.tolist(),
        "gathered_shape": list(gathered.shape),
        "seen": seen,
        "params": [p.detach().cpu().tolist() for p in accelerator.unwrap_model(model).parameters()],
    }
    with open(os.path.join(sys.argv[1], f"accelerate{rank}.json"), "w") as f:
        json.dump(result, f)
    accelerator.end_training()


if __name__ == "__main__":
    main()
