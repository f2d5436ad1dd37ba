"""A CUDA-first training script, written the way CUDA users write them.

Nothing here knows about torchdevice: the device is hard-coded to "cuda", tensors and the
model are moved with ``.cuda()``, and the checkpoint is reloaded with
``map_location="cuda"``. Natively it needs an NVIDIA GPU. Run it anywhere with::

    python -m torchdevice examples/train_cuda.py --epochs 15

It trains a small MLP to classify points on two interleaved spirals, checkpoints it,
reloads it and checks its own accuracy, exiting non-zero if training failed.
"""

import argparse
import math
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

if not torch.cuda.is_available():
    sys.exit("This script requires a CUDA GPU.")

device = torch.device("cuda")
print(f"Training on {torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} GPU(s))")


def make_spirals(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved spirals, built directly on the GPU."""
    t = torch.rand(n, device="cuda", generator=generator) * 3 * math.pi
    label = torch.randint(0, 2, (n,), device="cuda", generator=generator)
    angle = t + label * math.pi
    points = torch.stack([t * torch.cos(angle), t * torch.sin(angle)], dim=1) / (3 * math.pi)
    points += 0.02 * torch.randn(n, 2, device=device, generator=generator)
    return points, label


class Classifier(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    args = parser.parse_args()

    torch.manual_seed(0)
    generator = torch.Generator(device="cuda").manual_seed(0)
    x_train, y_train = make_spirals(4096, generator)
    x_test, y_test = make_spirals(1024, generator)

    model = Classifier().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss().cuda()

    for epoch in range(args.epochs):
        permutation = torch.randperm(len(x_train), device="cuda")
        total = 0.0
        for start in range(0, len(x_train), args.batch_size):
            index = permutation[start : start + args.batch_size]
            inputs, targets = x_train[index].cuda(), y_train[index].cuda()
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(index)
        if epoch % 5 == 0 or epoch == args.epochs - 1:
            print(f"epoch {epoch:3d}  loss {total / len(x_train):.4f}")

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "model.pt"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint)
        state = torch.load(checkpoint, map_location="cuda")

    restored = Classifier().to(device)
    restored.load_state_dict(state["model"])
    restored.eval()
    with torch.no_grad():
        predictions = restored(x_test.to("cuda")).argmax(dim=1)
    accuracy = (predictions == y_test).float().mean().item()
    print(f"test accuracy {accuracy:.3f} on device {predictions.device}")
    if accuracy < args.min_accuracy:
        print(f"accuracy below {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
