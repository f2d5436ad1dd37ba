"""Accelerate's GPU-only checks, written for a GPU: the behaviours its own test suite
skips on a CPU host (``require_non_cpu``) and that read the device Accelerate chose.

Each fact is what Accelerate's upstream test of the same name asserts (test_kwargs_handlers,
test_optimizer, test_accelerator). Prints what it saw as JSON.
"""

import json
import os
from unittest import mock

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import AutocastKwargs, GradScalerKwargs

facts: dict[str, object] = {}

# test_accelerator_can_be_reinstantiated: the state remembers a GPU device, and a second
# Accelerator that asks for the CPU is refused as on a GPU machine.
Accelerator()
facts["state_device_type"] = PartialState._shared_state["device"].type
try:
    Accelerator(cpu=True)
    facts["cpu_after_gpu"] = "accepted"
except ValueError:
    facts["cpu_after_gpu"] = "ValueError"

# test_env_var_device: ACCELERATE_TORCH_DEVICE names the device the state reads back.
PartialState._reset_state()
AcceleratorState._reset_state()
with (
    mock.patch.dict(os.environ, {"ACCELERATE_TORCH_DEVICE": "cuda:64"}),
    mock.patch("torch.cuda.set_device", return_value=None),  # no device 64, as upstream
):
    facts["env_var_device"] = str(Accelerator().state.device)
PartialState._reset_state()
AcceleratorState._reset_state()

# test_grad_scaler_kwargs: GradScalerKwargs reach the GradScaler of the fp16 CUDA path.
accelerator = Accelerator(
    mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024, growth_factor=2)]
)
scaler = accelerator.scaler
facts["scaler"] = (
    None
    if scaler is None
    else {
        "init_scale": scaler._init_scale,
        "growth_factor": scaler._growth_factor,
        "backoff_factor": scaler._backoff_factor,
        "enabled": scaler._enabled,
    }
)

# test_autocast_kwargs: fp16 autocast, switched off inside by AutocastKwargs(enabled=False).
a, b, c, d = (torch.rand((8, 8), device=accelerator.device) for _ in range(4))
with accelerator.autocast():
    e = torch.mm(a, b)
    with accelerator.autocast(autocast_handler=AutocastKwargs(enabled=False)):
        f = torch.mm(c, e.float())
    g = torch.mm(d, f)
facts["autocast_dtypes"] = [str(t.dtype).removeprefix("torch.") for t in (e, f, g)]

# test_accelerated_optimizer_step_was_skipped: the GradScaler skips a step whose gradients
# overflowed, and the wrapped optimizer says so.
torch.manual_seed(0)
model = torch.nn.Linear(5, 5)
optimizer = torch.optim.SGD(model.parameters(), 0.1)
model, optimizer = accelerator.prepare(model, optimizer)
skipped = []
for overflow in (False, True, True, False):
    accelerator.backward(model(torch.randn(2, 5, device=accelerator.device)).sum())
    for p in model.parameters():
        p.grad.fill_(0.01)
    if overflow:
        p.grad[0] = torch.tensor(float("nan"))
    before = model.weight.detach().clone()
    optimizer.step()
    optimizer.zero_grad()
    skipped.append((optimizer.step_was_skipped, bool(torch.equal(before, model.weight.detach()))))
facts["step_was_skipped"] = [was for was, _ in skipped]
facts["weights_unchanged"] = [same for _, same in skipped]
print(json.dumps(facts))
