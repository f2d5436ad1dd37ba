"""What torch's own code asks for, and the legacy APIs old CUDA code sets, on an accelerator
host (the simulated MPS stand-in), as a GPU answers them.

* torch's own requests for the CPU by name (``torch.optim``'s step counters,
  ``nn.init.trunc_normal_``'s bounds) stay on the CPU and are no rows of the report, while
  the user's ``"cpu"`` (written in user code, or passed on through torch's code) follows
  the policy;
* ``torch.set_default_tensor_type(torch.cuda.HalfTensor)`` puts factories and
  ``torch.Tensor(...)`` on the device in float16;
* a disabled ``GradScaler``'s ``unscale_`` returns at once, as torch's does.

The module runs in a child process that registers the backend (``childrun``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from childrun import mirror_in_parent

NAME = "simgpu"
CPU = torch.device("cpu")


@pytest.fixture
def accelerator():
    import torchdevice
    from torchdevice import Host
    from torchdevice.testing import register

    register(NAME)
    torchdevice.enable(host=Host.simulated(NAME))
    yield torch.device(NAME, 0)
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)


def _rows(api: str) -> list[object]:
    import torchdevice

    return [entry for entry in torchdevice.report().entries if entry.api == api]


@pytest.mark.parametrize("foreach", [False, True])
def test_optimizer_step_counters_stay_on_the_cpu_unreported(accelerator, foreach):
    """Adam counts steps in ``torch.tensor(0.0, device="cpu")`` (and adds
    ``torch.tensor(1.0, device="cpu")`` on the foreach path): CPU tensors on a GPU, so on
    the CPU here, and no line of the user's. The parameters are on the device."""
    model = nn.Linear(4, 2).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=foreach)
    for _ in range(3):
        model(torch.ones(3, 4, device="cuda")).sum().backward()
        opt.step()
        opt.zero_grad()
    step = opt.state[model.weight]["step"]
    assert (step.device, step.item()) == (CPU, 3.0)
    assert model.weight.device == accelerator
    assert _rows("torch.tensor") == []


def test_the_users_cpu_requests_still_follow_the_policy(accelerator):
    """A ``"cpu"`` the user wrote goes where the policy sends it, reported, also when
    torch's code passes it on (``nn.Linear(..., device="cpu")`` reaching ``torch.empty``)."""
    x = torch.zeros(2, device="cpu")
    layer = nn.Linear(2, 2, device="cpu")
    assert x.device == accelerator
    assert layer.weight.device == accelerator
    assert len(_rows("torch.zeros")) == 1
    assert len(_rows("torch.empty")) == 1


def test_torch_init_bounds_stay_on_the_cpu(accelerator):
    """``trunc_normal_`` reads its bounds with ``new_tensor(a, device="cpu").item()``."""
    weight = torch.empty(16, 16, device="cuda")
    nn.init.trunc_normal_(weight, std=0.5, a=-1.0, b=1.0)
    assert weight.device == accelerator
    assert weight.abs().max().item() <= 1.0
    assert _rows("Tensor.new_tensor") == []


def test_legacy_half_default_type_on_the_device(accelerator):
    """After ``torch.set_default_tensor_type(torch.cuda.HalfTensor)``, fairscale-style
    weights (``torch.Tensor(out, in)``) and device-less factories are float16 device
    tensors, so they meet in one op as on a GPU; ``torch.FloatTensor`` is the CPU class."""
    torch.set_default_tensor_type(torch.cuda.HalfTensor)
    weight = nn.Parameter(torch.Tensor(3, 4))
    master = torch.empty(3, 4, dtype=weight.dtype)
    nn.init.xavier_normal_(master)
    with torch.no_grad():
        torch.cat([master], dim=0, out=weight)
    assert (weight.device, weight.dtype) == (accelerator, torch.float16)
    assert torch.equal(weight.detach().cpu(), master.cpu())
    assert torch.zeros(2).device == accelerator
    legacy = torch.FloatTensor(2)
    assert (legacy.device, legacy.dtype) == (CPU, torch.float32)
    (row,) = _rows("torch.set_default_tensor_type")
    assert (row.requested, row.decided) == ("cuda", "mps:0")
    torch.set_default_tensor_type(torch.FloatTensor)
    assert torch.Tensor(2).device == CPU


def test_a_disabled_grad_scaler_unscales_nothing(accelerator):
    """``torch.cuda.amp.GradScaler(enabled=False)`` (llama2.c's float32 and bfloat16):
    ``unscale_``, ``step`` and ``update`` act as torch's disabled scaler does."""
    model = nn.Linear(4, 2).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(FutureWarning):
        scaler = torch.cuda.amp.GradScaler(enabled=False)
    scaler.scale(model(torch.ones(3, 4, device="cuda")).sum()).backward()
    grad = model.weight.grad.clone()
    scaler.unscale_(opt)
    assert torch.equal(model.weight.grad, grad)  # not divided by any scale
    before = model.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert torch.allclose(model.weight.detach(), before - 0.1 * grad)
    assert scaler.is_enabled() is False


mirror_in_parent(globals())
