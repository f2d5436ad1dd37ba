"""A one-rank NCCL group, a GradScaler, autocast, seeds, synchronize and a checkpoint."""

import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

if not torch.cuda.is_available():
    sys.exit("needs CUDA")

device = torch.device("cuda:0")


def main() -> int:
    torch.cuda.manual_seed_all(0)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
        model = nn.Linear(4, 1).cuda()
        scaler = torch.cuda.amp.GradScaler()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(64, 4).cuda(non_blocking=True)
        y = x.sum(dim=1, keepdim=True)
        losses = []
        for _ in range(30):
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        dist.all_reduce(flat)
        torch.cuda.synchronize()
        torch.save(model.state_dict(), Path(tmp) / "m.pt")
        state = torch.load(Path(tmp) / "m.pt", map_location="cuda")
        dist.destroy_process_group()
    same = all(v.device == next(model.parameters()).device for v in state.values())
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} on {device}, checkpoint on the device: {same}")
    return 0 if losses[-1] < losses[0] and same else 1


if __name__ == "__main__":
    sys.exit(main())
