"""A CUDA inference script as people write it (issue 28): ``torch.device("cuda:0" if ...
else "cpu")``, a batch size from 80% of ``get_device_properties(0).total_memory``, the share
of memory in use from ``mem_get_info()``, batches moved through ``pin_memory()`` with
``non_blocking=True``, ``torch.no_grad()``, a synchronize.

Its last line, ``RESULT ...``, is what the port tests compare between runs.
"""

import sys

import torch
from torch import nn

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def main() -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10)).to(device).eval()
    total_memory = torch.cuda.get_device_properties(0).total_memory
    budget = int(0.8 * total_memory)
    batch_size = max(1, min(64, budget // (32 * 4 * 3)))
    free, total = torch.cuda.mem_get_info()
    print(f"batch size {batch_size}; memory in use: {1 - free / total:.0%}")
    inputs = torch.randn(200, 32, generator=torch.Generator().manual_seed(1))
    outputs = []
    with torch.no_grad():
        for start in range(0, len(inputs), batch_size):
            batch = inputs[start : start + batch_size].pin_memory().to(device, non_blocking=True)
            outputs.append(model(batch).softmax(dim=1).cpu())
    torch.cuda.synchronize()
    probabilities = torch.cat(outputs)
    if not torch.allclose(probabilities.sum(dim=1), torch.ones(200)):
        print("[FAIL] the probabilities do not sum to 1")
        return 1
    top = int(probabilities.argmax(dim=1).sum())
    print(f"RESULT {probabilities.sum().item():.4f} {top} {probabilities.max().item():.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
