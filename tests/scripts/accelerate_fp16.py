"""An Accelerate script written for a GPU: Accelerator(mixed_precision="fp16").
Prints what it saw as JSON."""

import json
import math

import torch
from accelerate import Accelerator
from recording_model import Regression, seen

accelerator = Accelerator(mixed_precision="fp16")
torch.manual_seed(0)
model = Regression()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)
losses = []
for _ in range(4):
    x = torch.randn(8, 8, device=accelerator.device)
    y = torch.randn(8, 1, device=accelerator.device)
    with accelerator.autocast():
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
print(
    json.dumps(
        {
            "device": str(accelerator.device),
            "native_amp": accelerator.native_amp,
            "scaler": type(accelerator.scaler).__name__ if accelerator.scaler is not None else None,
            "scale": accelerator.scaler.get_scale() if accelerator.scaler is not None else None,
            "losses_finite": all(math.isfinite(loss) for loss in losses),
            **seen,
        }
    )
)
