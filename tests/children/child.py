"""A CUDA-first script started by another one with ``subprocess.run([sys.executable, ...])``."""

import json

import torch

x = torch.ones(2, device="cuda") * 3
print(json.dumps({"who": "subprocess", "device": str(x.device), "cuda": torch.cuda.is_available()}))
