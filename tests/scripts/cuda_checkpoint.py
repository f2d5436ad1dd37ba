"""A CUDA-first training script, as users write them: a DataLoader with workers and pinned
memory, a checkpoint saved and loaded with ``map_location="cuda"``, a deep-copied model (an
EMA), a pickled tensor, ``torch.compile`` with the default backend, and a ``subprocess``
child that uses CUDA too.

``python cuda_checkpoint.py OUT START_METHOD`` writes ``OUT/result.json``: the losses, the
final parameters, and the device every process saw, so a test can compare a redirected run
with a native CPU one.
"""

import copy
import json
import pickle
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def worker_device(worker_id: int) -> None:
    """Record where a DataLoader worker's CUDA tensors land."""
    out = Path(sys.argv[1])
    where = torch.zeros(1, device="cuda").device
    (out / f"worker{worker_id}.txt").write_text(str(where))


def main() -> None:
    out, start_method = Path(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    device = torch.device("cuda")
    features, targets = torch.randn(32, 4), torch.randn(32, 1)
    loader = DataLoader(
        TensorDataset(features.cpu(), targets.cpu()),
        batch_size=8,
        num_workers=2,
        pin_memory=True,
        worker_init_fn=worker_device,
        multiprocessing_context=start_method,
    )
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
    ema = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, pinned = [], []
    for epoch in range(2):
        for batch, target in loader:
            pinned.append(batch.is_pinned())
            x, y = batch.to(device, non_blocking=True), target.to(device, non_blocking=True)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            with torch.no_grad():
                for averaged, current in zip(ema.parameters(), model.parameters(), strict=True):
                    averaged.mul_(0.9).add_(current, alpha=0.1)
        checkpoint = out / f"epoch{epoch}.pt"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, checkpoint)
        state = torch.load(checkpoint, map_location="cuda")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    compiled = torch.compile(model)  # the default backend, as CUDA-first code writes it
    probe = features.to(device)
    with torch.no_grad():
        compiled_out, eager_out = compiled(probe), model(probe)
    restored = pickle.loads(pickle.dumps(model[0].weight.detach()))
    on_cpu = torch.load(out / "epoch1.pt", map_location="cpu")["model"]["0.weight"]
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.ones(1, device='cuda').device)"],
        capture_output=True,
        text=True,
        check=True,
    )
    result = {
        "losses": losses,
        "weights": [p.detach().cpu().flatten().tolist() for p in model.parameters()],
        "ema": [p.detach().cpu().flatten().tolist() for p in ema.parameters()],
        "pinned": all(pinned),
        "compiled": compiled_out.cpu().flatten().tolist(),
        "compiled_device": str(compiled_out.device),
        "compiled_matches_eager": torch.allclose(compiled_out, eager_out, rtol=1e-5, atol=1e-6),
        "pickled_equal": torch.equal(restored.cpu(), model[0].weight.detach().cpu()),
        "map_location_cpu_equal": torch.equal(on_cpu.cpu(), model[0].weight.detach().cpu()),
        "devices": {
            "model": str(next(model.parameters()).device),
            "loaded": str(state["model"]["0.weight"].device),
            "child": child.stdout.strip(),
            "workers": sorted(p.read_text() for p in out.glob("worker*.txt")),
        },
    }
    (out / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
