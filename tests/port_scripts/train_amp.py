"""An ordinary CUDA-first training script, as issue 20 tried it.

Asserts CUDA, seeds, names the GPU, moves with ``.cuda()``, trains under ``autocast`` with
a ``GradScaler``, times with ``torch.cuda.Event``, watches the peak memory, loads batches
with 2 fork workers and ``pin_memory``, polls ``memory_allocated()`` from a daemon thread,
and reloads a checkpoint with ``map_location="cuda"``. Its checks hold on any device.
"""

import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

assert torch.cuda.is_available()

torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
print(f"training on {torch.cuda.get_device_name(0)}")

polled: list[int] = []
errors: list[BaseException] = []


def poll() -> None:
    try:
        for _ in range(5):
            polled.append(torch.cuda.memory_allocated())
            time.sleep(0.01)
    except BaseException as exc:  # the check below reports it
        errors.append(exc)


def main() -> int:
    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    x = torch.randn(256, 8)
    y = x.sum(dim=1, keepdim=True)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=64,
        num_workers=2,
        pin_memory=True,
        multiprocessing_context="fork",
    )
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.cuda.amp.GradScaler()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    losses = []
    for _ in range(6):
        for batch, expected in loader:
            inputs, targets = batch.cuda(non_blocking=True), expected.cuda(non_blocking=True)
            optimizer.zero_grad()
            with torch.autocast("cuda"):
                loss = nn.functional.mse_loss(model(inputs).float(), targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
    end.record()
    torch.cuda.synchronize()
    elapsed = start.elapsed_time(end)
    peak = torch.cuda.max_memory_allocated()
    watcher.join()
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(model.state_dict(), Path(tmp) / "model.pt")
        state = torch.load(Path(tmp) / "model.pt", map_location="cuda")
    where = next(model.parameters()).device
    checks = {
        "the loss falls": losses[-1] < losses[0],
        "events time the loop": elapsed > 0,
        "the peak is at least what is allocated": peak >= torch.cuda.memory_allocated() >= 0,
        "the thread polled without an error": not errors and len(polled) == 5,
        "the checkpoint is on the model's device": all(v.device == where for v in state.values()),
    }
    for what, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
