"""A Fabric script written for a GPU: accelerator="gpu", precision="16-mixed".
Prints what it saw as JSON."""

import json
import math

import torch
from lightning.fabric import Fabric
from recording_model import Regression, seen

fabric = Fabric(accelerator="gpu", devices=1, precision="16-mixed")
fabric.launch()
torch.manual_seed(0)
module = Regression()
model, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
losses = []
for _ in range(4):
    x = torch.randn(8, 8, device=fabric.device)
    y = torch.randn(8, 1, device=fabric.device)
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
scaler = getattr(fabric.strategy.precision, "scaler", None)
print(
    json.dumps(
        {
            "accelerator": type(fabric.accelerator).__name__,
            "device": str(fabric.device),
            "precision": type(fabric.strategy.precision).__name__,
            "scaler": type(scaler).__name__ if scaler is not None else None,
            "losses_finite": all(math.isfinite(loss) for loss in losses),
            **seen,
        }
    )
)
