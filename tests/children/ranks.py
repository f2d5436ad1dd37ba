"""A torchrun worker that uses its rank's GPU without a process group; no torchdevice in it."""

import json
import os

import torch

rank = int(os.environ["LOCAL_RANK"])
x = torch.zeros(1, device=f"cuda:{rank}")
print(
    json.dumps({"who": f"rank-{rank}", "device": str(x.device), "cuda": torch.cuda.is_available()}),
    flush=True,
)
