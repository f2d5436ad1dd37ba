"""A small convolutional network trained on the GPU, written the way CUDA users write it.

The model goes to the GPU with ``.cuda()``, batches come from a ``DataLoader`` with
``pin_memory=True`` and move with ``.cuda(non_blocking=True)``, the optimizer state lives
on the device, and the checkpoint is reloaded with ``map_location="cuda"``. The task:
tell 12x12 images of horizontal stripes from vertical ones. The script checks that the loss
falls, that the network learns the task, and that the reloaded model predicts the same;
it exits non-zero otherwise. Natively it needs an NVIDIA GPU; anywhere else::

    python -m torchdevice examples/neural_network.py
"""

import argparse
import io
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if not torch.cuda.is_available():
    sys.exit("This script requires a CUDA GPU.")

failures: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAIL'}] {what}")
    if not condition:
        failures.append(what)


def stripes(n: int) -> TensorDataset:
    """Noisy 12x12 images: label 0 has horizontal stripes, label 1 vertical ones (on the host)."""
    labels = torch.randint(0, 2, (n,))
    phase = torch.randint(0, 2, (n, 1, 1))
    rows = (torch.arange(12).view(1, 12, 1) + phase) % 2
    images = rows.expand(n, 12, 12).float()
    images = torch.where(labels.view(n, 1, 1).bool(), images.transpose(1, 2), images)
    images = images + 0.3 * torch.randn(n, 12, 12)
    return TensorDataset(images.unsqueeze(1), labels)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(16, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def evaluate(model: nn.Module, loader: DataLoader) -> tuple[float, torch.Tensor]:
    model.eval()
    predictions = []
    correct = 0
    with torch.no_grad():
        for batch, target in loader:
            images, labels = batch.cuda(non_blocking=True), target.cuda(non_blocking=True)
            predicted = model(images).argmax(dim=1)
            correct += (predicted == labels).sum().item()
            predictions.append(predicted)
    return correct / len(loader.dataset), torch.cat(predictions)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    train_loader = DataLoader(stripes(1024), batch_size=64, shuffle=True, pin_memory=True)
    test_loader = DataLoader(stripes(256), batch_size=128, pin_memory=True)

    model = ConvNet().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loss_fn = nn.CrossEntropyLoss()
    print(f"training on {next(model.parameters()).device} ({torch.cuda.get_device_name(0)})")

    epoch_losses = []
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for batch, target in train_loader:
            images, labels = batch.cuda(non_blocking=True), target.cuda(non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(labels)
        scheduler.step()
        epoch_losses.append(total / len(train_loader.dataset))
        print(f"  epoch {epoch}: loss {epoch_losses[-1]:.4f}")
    torch.cuda.synchronize()

    accuracy, predictions = evaluate(model, test_loader)
    print(f"test accuracy {accuracy:.3f}")
    check(epoch_losses[-1] < epoch_losses[0], "the training loss falls")
    check(accuracy >= 0.9, "the network tells the stripes apart (accuracy >= 0.9)")
    state = optimizer.state[next(iter(model.parameters()))]
    check(
        state["exp_avg"].device == next(model.parameters()).device,
        "the optimizer state lives with the parameters",
    )

    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, map_location="cuda")
    restored = ConvNet().cuda()
    restored.load_state_dict(checkpoint["model"])
    restored_accuracy, restored_predictions = evaluate(restored, test_loader)
    check(
        checkpoint["model"]["head.2.weight"].device == predictions.device,
        "the checkpoint loads onto the GPU",
    )
    check(torch.equal(predictions, restored_predictions), "the reloaded model predicts the same")
    check(restored_accuracy == accuracy, "and scores the same")

    if failures:
        print(f"{len(failures)} check(s) failed: {failures}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
