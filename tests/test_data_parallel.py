"""``nn.DataParallel`` while redirecting: as on a machine with one GPU.

Checked on this CPU host and on the simulated MPS host (the module runs in a child
process that registers the simulated backend): the wrapped model gives the plain
module's outputs and gradients, on the real device, with ``device_ids == [0]``.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

from childrun import IN_CHILD, mirror_in_parent

SIMULATED = "simgpu"

if IN_CHILD:  # before any backward: autograd sizes its device queues once
    from torchdevice.testing import register

    register(SIMULATED)


@pytest.fixture(params=["cpu", SIMULATED])
def device(request: pytest.FixtureRequest) -> torch.device:
    """The real device of the host torchdevice redirects to."""
    import torchdevice
    from torchdevice import Host

    if request.param == SIMULATED:
        torchdevice.enable(host=Host.simulated(SIMULATED))
        return torch.device(SIMULATED, 0)
    torchdevice.enable()
    return torch.device("cpu")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()


def test_the_module_runs_once_on_the_device(device: torch.device) -> None:
    model = _model()
    reference = copy.deepcopy(model)
    parallel = nn.DataParallel(model)
    assert parallel.device_ids == [0]
    assert parallel.module is model
    x = torch.randn(6, 4, device="cuda")
    out = parallel(x)
    expected = reference(x)
    assert out.device == device
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert mine.grad is not None
        assert theirs.grad is not None
        torch.testing.assert_close(mine.grad, theirs.grad)


class Extras(NamedTuple):
    shift: torch.Tensor
    label: str


class Takes(nn.Module):
    """A forward with nested inputs, keyword tensors and non-tensor arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(
        self, x: torch.Tensor, extras: Extras, pair: list[Any], *, scale: torch.Tensor
    ) -> tuple[torch.Tensor, str, Any]:
        y = self.linear(x + extras.shift) * scale + pair[0]
        return y, extras.label, pair[1]


def test_inputs_in_containers_and_keywords_reach_the_module(device: torch.device) -> None:
    torch.manual_seed(0)
    model = Takes().cuda()
    x, shift, offset = torch.randn(5, 3), torch.randn(3), torch.randn(1)
    scale = torch.tensor(2.0)
    expected = model(
        x.to(device),
        Extras(shift.to(device), "tag"),
        [offset.to(device), 7],
        scale=scale.to(device),
    )
    y, label, seven = nn.DataParallel(model)(x, Extras(shift, "tag"), [offset, 7], scale=scale)
    assert y.device == device
    torch.testing.assert_close(y, expected[0])
    assert (label, seven) == ("tag", 7)


def test_several_device_ids_name_the_one_device(device: torch.device) -> None:
    import torchdevice

    model = _model()
    reference = copy.deepcopy(model)
    parallel = nn.DataParallel(model, device_ids=[0, 1], output_device=1)
    assert parallel.device_ids == [0]
    assert parallel.output_device == 0
    x = torch.randn(6, 4, device="cuda")
    torch.testing.assert_close(parallel(x), reference(x))
    [entry] = [e for e in torchdevice.report().entries if e.api == "torch.nn.DataParallel"]
    assert (entry.requested, entry.decided) == ("device_ids=[0, 1]", "device_ids=[0]")
    assert entry.site.filename == __file__


def test_torch_alone_cannot_scatter_here(device: torch.device) -> None:
    """What the wrapper replaces: torch's scatter needs a CUDA build."""
    with pytest.raises(AttributeError, match="_scatter"):
        torch.nn.parallel.comm.scatter(torch.ones(2, device="cuda"), [0])


def test_the_functional_form_too(device: torch.device) -> None:
    model = _model()
    x = torch.randn(6, 4, device="cuda")
    out = torch.nn.parallel.data_parallel(model, (x,))
    assert out.device == device
    torch.testing.assert_close(out, model(x))


def test_disable_gives_torch_its_data_parallel_back(device: torch.device) -> None:
    import torchdevice
    from torchdevice.patches import data_parallel

    scatter_gather = torch.nn.parallel.scatter_gather
    assert scatter_gather.scatter is not data_parallel._ORIGINAL_SCATTER
    torchdevice.disable()
    assert scatter_gather.scatter is data_parallel._ORIGINAL_SCATTER
    assert nn.DataParallel.__dict__["__init__"] is data_parallel._ORIGINAL_INIT


mirror_in_parent(globals())
