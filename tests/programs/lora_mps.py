"""``lora.py`` as written for a Mac: PyTorch's MPS availability check, ``torch.autocast("mps")``,
``torch.amp.GradScaler("mps")`` and ``torch.mps.synchronize()``. Prints JSON facts last."""

import json

import torch
import torch.nn.functional as F
from lora_model import build

if not torch.backends.mps.is_available():
    if not torch.backends.mps.is_built():
        print(
            "MPS not available because the current PyTorch install was not built with MPS enabled."
        )
    else:
        print(
            "MPS not available because the current MacOS version is not 12.3+ "
            "and/or you do not have an MPS-enabled device on this machine."
        )
    raise SystemExit(1)
mps_device = torch.device("mps")

model = build().to(mps_device)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
scaler = torch.amp.GradScaler("mps")
data = torch.Generator().manual_seed(1)
ids = torch.randint(0, 50, (8, 12), generator=data).to(mps_device)
losses, dtypes = [], set()
for _ in range(6):
    with torch.autocast("mps", dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
        dtypes.add(str(logits.dtype))
        loss = F.cross_entropy(logits.float().reshape(-1, 50), ids[:, 1:].reshape(-1))
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    losses.append(loss.item())
    torch.mps.synchronize()
print(
    json.dumps(
        {
            "losses": losses,
            "dtypes": sorted(dtypes),
            "scale": scaler.get_scale(),
            "allocated": torch.mps.current_allocated_memory() > 0,
        }
    )
)
