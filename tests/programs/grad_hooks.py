"""Gradient hooks in a CUDA-first training loop, written the way training scripts log and
rescale gradients: a tensor hook (``register_hook``) that moves each gradient ``.to(device)``
and multiplies it by a mask made with ``device=device``, and one that copies it to the host
(``.cpu()``) for logging. Autograd calls the hooks from inside ``backward()``, which a
function mode handles with itself off the stack (found in the sweep, docs/sweep.md).

Prints one JSON line: the losses, the logged gradient norms and where the hooks saw tensors.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = args.device

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logged: list[float] = []
    seen: list[str] = []

    def rescale(grad: torch.Tensor) -> torch.Tensor:
        mask = torch.full(grad.shape, 0.5, device=device)
        moved = grad.to(device)
        seen.append(moved.device.type)
        return moved * mask

    def log_norm(grad: torch.Tensor) -> None:
        host = grad.detach().cpu()
        seen.append(host.device.type)
        logged.append(round(float(host.norm()), 6))

    for parameter in model.parameters():
        parameter.register_hook(rescale)
        parameter.register_hook(log_norm)

    x = torch.randn(32, 8, device=device)
    y = torch.randn(32, 1, device=device)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses, "logged": logged, "seen": sorted(set(seen))}))


if __name__ == "__main__":
    main()
