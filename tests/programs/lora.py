"""LoRA fine-tuning in the style of a PEFT training script, written for CUDA: frozen base
weights, low-rank adapters, ``torch.autocast("cuda", dtype=torch.bfloat16)`` with a
``torch.cuda.amp.GradScaler``, metrics accumulated in float64 (``loss.double()``), the
adapter saved with ``torch.save``. ``--device cpu`` runs it on the CPU. Prints JSON facts.
"""

import argparse
import json

import torch
import torch.nn.functional as F
from lora_model import build

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--save", default=None)
args = parser.parse_args()
device = args.device

model = build().to(device)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
scaler = torch.cuda.amp.GradScaler() if device == "cuda" else torch.amp.GradScaler(device)
data = torch.Generator().manual_seed(1)
ids = torch.randint(0, 50, (8, 12), generator=data).to(device)
running, losses, dtypes = torch.zeros((), dtype=torch.float64), [], set()
for _ in range(6):
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
        dtypes.add(str(logits.dtype))
        loss = F.cross_entropy(logits.float().reshape(-1, 50), ids[:, 1:].reshape(-1))
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    running = running + loss.detach().double().cpu()
    losses.append(loss.item())
    if device == "cuda":
        torch.cuda.synchronize()
adapter = {k: v for k, v in model.state_dict().items() if "lora_" in k}
if args.save:
    torch.save(adapter, args.save)
print(
    json.dumps(
        {
            "losses": losses,
            "mean_loss": running.item() / 6,
            "dtypes": sorted(dtypes),
            "scale": scaler.get_scale(),
            "adapter_device": str(next(iter(adapter.values())).device),
            "running_dtype": str(running.dtype),
        }
    )
)
