"""A Fabric script written for a GPU: accelerator="gpu", precision="16-mixed".
Prints what it saw as JSON."""

import json
import math

import torch
from lightning.fabric import Fabric

seen: dict[str, object] = {}


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        seen["activation_dtype"] = str(out.dtype).removeprefix("torch.")
        seen["autocast"] = torch.is_autocast_enabled(out.device.type)
        return out


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
