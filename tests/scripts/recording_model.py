"""The small model the mixed-precision scripts train (accelerate_fp16.py, fabric_gpu.py):
it records, in ``seen``, the dtype its activations had and whether autocast was on, which
is what tells a GPU fp16 path from a CPU fp32 one. Imported from the scripts' own folder
(``sys.path[0]``, as for a user's script)."""

import torch

seen: dict[str, object] = {}


class Regression(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        seen["activation_dtype"] = str(out.dtype).removeprefix("torch.")
        seen["autocast"] = torch.is_autocast_enabled(out.device.type)
        return out
