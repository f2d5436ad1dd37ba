"""An MPS-first training script, written the way Mac users write them.

It starts with PyTorch's own MPS availability check (the nested ``is_available()`` /
``is_built()`` with its two messages and an exit), puts everything on
``torch.device("mps")``, seeds with ``torch.mps.manual_seed``, waits with
``torch.mps.synchronize()`` and reads ``torch.mps.current_allocated_memory()``. Natively it
needs an Apple GPU. Run it anywhere with::

    python -m torchdevice examples/mps_first.py

It fits a small regression model on synthetic data, checks that the loss fell and that a
reloaded checkpoint predicts the same, and exits non-zero if a check fails. Its last line,
``RESULT ...``, is the final loss and a prediction checksum, which the port tests compare
between runs.
"""

import argparse
import io
import sys

import torch
from torch import nn

if not torch.backends.mps.is_available():
    if not torch.backends.mps.is_built():
        print(
            "MPS not available because the current PyTorch install was not built with MPS enabled."
        )
    else:
        print(
            "MPS not available because the current MacOS version is not 12.3+ and/or you do "
            "not have an MPS-enabled device on this machine."
        )
    sys.exit(1)

mps_device = torch.device("mps")
failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def make_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """y = sin(3 x0) + x1^2 with a little noise, drawn on the CPU and moved to the GPU."""
    x = torch.rand(n, 2, generator=generator) * 2 - 1
    y = torch.sin(3 * x[:, :1]) + x[:, 1:] ** 2 + 0.01 * torch.randn(n, 1, generator=generator)
    return x.to(mps_device), y.to(mps_device)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.mps.manual_seed(0)
    x, y = make_data(512, torch.Generator().manual_seed(0))
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1)).to(mps_device)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(args.epochs):
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    torch.mps.synchronize()
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} after {args.epochs} epochs")
    print(f"memory allocated on the GPU: {torch.mps.current_allocated_memory()} bytes")
    check(losses[-1] < 0.5 * losses[0], "the loss at least halved")

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    reloaded = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))
    reloaded.load_state_dict(torch.load(buffer, map_location="mps"))
    reloaded.to(mps_device)
    with torch.no_grad():
        same = torch.equal(model(x), reloaded(x))
        checksum = model(x).sum().item()
    check(same, "the reloaded checkpoint predicts the same")
    print(f"RESULT loss={losses[-1]:.6f} checksum={checksum:.6f}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
