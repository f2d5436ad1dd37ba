"""A CUDA training loop as people write it (issue 28): the device-choice idiom, ``.to(device)``,
mixed precision with ``torch.autocast("cuda", dtype=torch.float16)`` and a ``GradScaler``,
peak memory in MiB, a synchronize. Portable already where the idiom is, CUDA-only elsewhere.

Its last line, ``RESULT ...``, is what the port tests compare between the redirected run and
the ported copy's native runs (on the CPU, and with a non-CUDA accelerator present).
"""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"training on {device}")


def main() -> int:
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 16, generator=generator)
    y = x @ torch.randn(16, 1, generator=generator) + 0.1 * torch.randn(512, 1, generator=generator)
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda")
    torch.cuda.reset_peak_memory_stats()
    losses = []
    for epoch in range(6):
        total = 0.0
        for batch, labels in loader:
            inputs, targets = batch.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(inputs), targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.item() * len(inputs)
        losses.append(total / len(x))
        print(f"epoch {epoch}: loss {losses[-1]:.4f}")
    torch.cuda.synchronize()
    print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    if not losses[-1] < 0.5 * losses[0]:
        print("[FAIL] the loss did not halve")
        return 1
    print(f"RESULT {losses[0]:.5f} {losses[-1]:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
