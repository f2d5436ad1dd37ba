"""Transfer semantics on an accelerator host (the simulated MPS stand-in).

There, ``"cpu"`` requests land on the accelerator too, so host tensors and device tensors
share one real device the other way round from the CPU-only host: a host tensor is the
one that carries a mark. The module runs in a child process that registers the backend.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torch import nn

from childrun import mirror_in_parent

NAME = "simgpu"


@pytest.fixture
def accelerator():
    import torchdevice
    from torchdevice import Host
    from torchdevice.testing import register

    register(NAME)
    torchdevice.enable(host=Host.simulated(NAME))
    return torch.device(NAME, 0)


def independent(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b or a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
        return False
    before = b.detach().cpu().clone()
    torch.testing.assert_close(a.detach().cpu(), before)
    with torch.no_grad():
        a.add_(1)
    return torch.equal(b.detach().cpu(), before)


def test_device_tensor_to_the_device_is_itself(accelerator):
    x = torch.ones(3, device="cuda")
    assert x.device == accelerator
    for moved in (x.to("cuda"), x.cuda(), x.cuda(0), x.to(torch.device("cuda")), x.to("mps")):
        assert moved is x


def test_device_tensor_to_the_host_is_an_independent_copy(accelerator):
    x = torch.arange(3.0, device="cuda")
    for host in (x.cpu(), x.to("cpu"), x.to(torch.device("cpu")), x.to("cpu", torch.float32)):
        assert host.device == accelerator  # the policy keeps "cpu" on the accelerator
        assert independent(host, x)
        assert host.cpu() is host
        assert host.to("cpu") is host


def test_host_tensors_on_the_accelerator_copy_when_moved_to_the_device(accelerator):
    for host in (torch.arange(3.0), torch.zeros(3, device="cpu"), torch.ones(3).cpu()):
        assert host.device == accelerator
        assert host.cpu() is host
        device = host.cuda()
        assert independent(device, host)
        assert device.cuda() is device
        assert independent(host.to("cuda"), host)


def test_numpy_round_trips_are_copies(accelerator):
    array = np.arange(3, dtype=np.float32)
    x = torch.as_tensor(array, device="cuda")
    array[:] = -1
    torch.testing.assert_close(x.cpu().numpy(), np.arange(3, dtype=np.float32))
    out = x.cpu().numpy()
    out[:] = 7
    torch.testing.assert_close(x.cpu().numpy(), np.arange(3, dtype=np.float32))


def test_parameters_and_modules(accelerator):
    param = nn.Parameter(torch.ones(2, device="cuda"))
    assert param.to("cuda") is param
    assert param.cuda() is param
    model = nn.Linear(3, 2)  # built by device-less factories: host tensors on the device
    weight = model.weight
    host_weight = weight.detach()
    cuda_line = sys._getframe().f_lineno + 1
    assert model.cuda() is model
    assert model.weight is weight
    assert independent(model.weight.detach(), host_weight)
    assert model.weight.to("cuda") is weight
    model.to(torch.device("cuda"))
    assert model.weight is weight
    device_weight = model.weight.detach()
    cpu_line = sys._getframe().f_lineno + 1
    model.cpu()
    assert independent(model.weight.detach(), device_weight)
    assert model.weight.cpu() is model.weight
    # Each module move is one row of the report, under the module's own name.
    import torchdevice

    rows = [(e.site.lineno, e.api, e.count) for e in torchdevice.report().entries]
    assert [row for row in rows if row[0] == cuda_line] == [(cuda_line, "Module.cuda", 1)]
    assert [row for row in rows if row[0] == cpu_line] == [(cpu_line, "Module.cpu", 1)]


def test_to_with_every_argument_positional_takes_the_dtype_rule(accelerator):
    x = torch.arange(3.0, device="cuda")
    for moved in (x.to("cuda", torch.float64, False, True), x.to(torch.float64, False, True)):
        assert moved.dtype == torch.float32  # MPS has no float64: the dtype rule
        assert moved.device == accelerator
        assert independent(moved, x)  # copy=True, given positionally


def test_a_tensor_rebuilt_from_host_memory_stays_on_the_host(accelerator):
    """A DataLoader worker's batch reaches the parent through shared memory, where torch
    rebuilds it as torch.empty(device=<storage's device>).set_(storage): the empty tensor
    must not be redirected away from its storage."""
    from torch.multiprocessing.reductions import reduce_tensor

    host = torch.arange(4.0, device="cpu:-1")  # a genuine CPU tensor; the override is on
    torch.zeros(0, device="cpu:-1")  # and off again
    assert torch.zeros(1, device="cpu").device == accelerator
    rebuild, args = reduce_tensor(host.share_memory_())
    rebuilt = rebuild(*args)
    assert rebuilt.device.type == "cpu"
    assert torch.equal(rebuilt, torch.arange(4.0, device="cpu:-1"))
    torch.zeros(0, device="cpu:-1")


def _placements() -> list[str]:
    return [
        torch.zeros(1).device.type,
        torch.zeros(1, device="cpu").device.type,
        torch.zeros(1, device="cuda").device.type,
    ]


def test_a_fork_child_that_cannot_use_the_accelerator_keeps_host_tensors_on_the_cpu(
    accelerator, monkeypatch
):
    """A DataLoader worker forked after CUDA (or MPS) initialized cannot use it: there, the
    host tensors it makes stay CPU tensors, as natively. Device requests still go to the
    device, where natively they would fail the same way."""
    import multiprocessing

    assert _placements() == [NAME, NAME, NAME]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_placements) == [NAME, NAME, NAME]  # a fork child that can use it
        monkeypatch.setattr(torch.get_device_module(NAME), "_is_in_bad_fork", lambda: True)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_placements) == ["cpu", "cpu", NAME]
    assert _placements() == [NAME, NAME, NAME]  # the parent is unchanged


def _compiled_placement() -> str:
    return _host_zeros().device.type


def _zeros_on_the_host() -> torch.Tensor:
    return torch.zeros(1, device="cpu")


_host_zeros = torch.compile(_zeros_on_the_host, backend="eager", fullgraph=True)


def test_graphs_compiled_before_the_fork_are_traced_again_in_such_a_child(accelerator, monkeypatch):
    """The child's decisions differ from those its parent's graphs were traced with."""
    import multiprocessing

    assert _compiled_placement() == NAME  # traced here: "cpu" goes to the accelerator
    monkeypatch.setattr(torch.get_device_module(NAME), "_is_in_bad_fork", lambda: True)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_compiled_placement) == "cpu"
    assert _compiled_placement() == NAME


mirror_in_parent(globals())
