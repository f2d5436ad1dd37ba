"""The simulated accelerator (torchdevice.testing): real data, real autograd, missing ops.

Registering the backend is permanent and process-wide (``torch.accelerator`` starts reporting
it, ``pin_memory=True`` starts asking it for pinned memory), so these tests never register it in
the main pytest process: the module runs itself once in a child pytest process, and each test
here reports its own outcome from that run. In the child (``TORCHDEVICE_SIMGPU_CHILD=1``) the
tests run for real.
"""

from __future__ import annotations

import gc
import io
import weakref
from collections.abc import Callable

import pytest
import torch
from torch import nn

from childrun import IN_CHILD, mirror_in_parent

NAME = "simgpu"


@pytest.fixture
def simgpu() -> str:
    from torchdevice.testing import register

    return register(NAME)


def mlp_training(device: str, optimizer: str, steps: int = 3):
    """Loss, parameters and gradients after a few steps of a small classifier on ``device``."""
    torch.manual_seed(0)  # seeds the device generator too, but init happens on the CPU
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(5, 8, generator=data).to(device)
    y = torch.randint(0, 4, (5,), generator=data).to(device)
    for _ in range(steps):
        opt.zero_grad()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
    devices = {p.device.type for p in model.parameters()} | {logits.device.type}
    return (
        devices,
        loss.detach().cpu(),
        [p.detach().cpu() for p in model.parameters()],
        [p.grad.cpu() for p in model.parameters()],
    )


def test_register_is_idempotent_and_permanent(simgpu):
    from torchdevice.testing import is_registered, register, registered_name

    assert register(NAME) == NAME
    assert is_registered()
    assert registered_name() == NAME
    assert torch._C._get_privateuse1_backend_name() == NAME
    with pytest.raises(RuntimeError, match="already registered as 'simgpu'"):
        register("othergpu")
    assert torch.simgpu.is_available()
    assert torch.simgpu.device_count() == 1
    assert torch.accelerator.current_accelerator() == torch.device(NAME)


def test_supported_and_missing_ops_are_data_and_all_registered(simgpu):
    from torchdevice.testing import MISSING_OPS, SUPPORTED_OPS, registered_overloads

    assert isinstance(SUPPORTED_OPS, frozenset)
    assert isinstance(MISSING_OPS, frozenset)
    assert not SUPPORTED_OPS & MISSING_OPS
    packets = {name.removeprefix("aten::").split(".")[0] for name in registered_overloads()}
    assert SUPPORTED_OPS - packets == set(), "listed as supported but no kernel registered"
    assert MISSING_OPS - packets == set(), "listed as missing but no failing kernel registered"


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.float64, torch.int64, torch.bool, torch.complex64]
)
def test_values_round_trip(simgpu, dtype):
    source = (torch.arange(12).reshape(3, 4) % 3).to(dtype)
    on_device = source.to(NAME)
    assert on_device.device == torch.device(NAME, 0)
    assert type(on_device) is torch.Tensor
    assert (on_device.dtype, on_device.shape, on_device.stride()) == (dtype, (3, 4), (4, 1))
    assert on_device.data_ptr() != source.data_ptr(), ".to() must copy"
    back = on_device.to("cpu")
    assert back.device.type == "cpu"
    torch.testing.assert_close(back, source, rtol=0, atol=0)
    source.zero_()  # the device copy is independent of the CPU source
    assert torch.equal(on_device.cpu(), back)
    assert torch.equal(torch.tensor([1, 2], device=NAME).cpu(), torch.tensor([1, 2]))


def test_views_and_in_place_ops_share_device_memory(simgpu):
    base = torch.zeros(3, 4, device=NAME)
    row = base[1]
    assert row._base is base
    assert row.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    row.fill_(7)
    base.t()[0].add_(1)  # a strided view of a view, written in place
    assert not base.t().is_contiguous()
    assert base.t().stride() == (1, 4)
    expected = torch.zeros(3, 4)
    expected[1] = 7
    expected.t()[0].add_(1)
    assert torch.equal(base.cpu(), expected)


def test_out_arguments_are_resized_on_the_device(simgpu):
    a = torch.arange(6.0, device=NAME).reshape(2, 3)
    out = torch.empty(0, device=NAME)
    result = torch.add(a, 1, out=out)
    assert result is out
    assert out.device.type == NAME
    assert out.shape == (2, 3)
    assert torch.equal(out.cpu(), torch.arange(6.0).reshape(2, 3) + 1)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mlp_training_matches_cpu(simgpu, optimizer):
    cpu_devices, *cpu_results = mlp_training("cpu", optimizer)
    sim_devices, *sim_results = mlp_training(NAME, optimizer)
    assert cpu_devices == {"cpu"}
    assert sim_devices == {NAME}
    torch.testing.assert_close(sim_results, cpu_results)


MISSING_CALLS: dict[str, Callable[[torch.Tensor], object]] = {
    "aten::erfinv": torch.erfinv,
    "aten::erfinv_": torch.Tensor.erfinv_,
    "aten::erfinv.out": lambda t: torch.erfinv(t, out=torch.empty_like(t)),
    "aten::histc": torch.histc,
    "aten::kthvalue.values": lambda t: torch.kthvalue(t, 1),
    "aten::_cdist_forward": lambda t: torch.cdist(t[None, :, None], t[None, :, None]),
    "aten::linalg_qr": lambda t: torch.linalg.qr(t.reshape(2, 2)),
}


@pytest.mark.parametrize("operator", list(MISSING_CALLS))
def test_missing_op_fails_like_mps_and_runs_on_the_cpu(simgpu, operator):
    call = MISSING_CALLS[operator]
    values = torch.tensor([0.1, -0.2, 0.3, 0.4])
    with pytest.raises(NotImplementedError) as caught:
        call(values.to(NAME))
    assert str(caught.value).startswith(
        f"The operator '{operator}' is not currently implemented for the {NAME} device."
    )
    call(values.clone())  # the same call has a CPU kernel: a fallback can rerun it there


def test_missing_backward_op_fails_inside_backward(simgpu):
    image = torch.randn(1, 1, 4, 4, requires_grad=True)
    grid = torch.rand(1, 3, 3, 2) * 2 - 1
    expected = nn.functional.grid_sample(image, grid, align_corners=False)
    on_device = image.detach().to(NAME).requires_grad_()
    output = nn.functional.grid_sample(on_device, grid.to(NAME), align_corners=False)
    torch.testing.assert_close(output.cpu(), expected.detach())  # the forward is supported
    with pytest.raises(
        NotImplementedError, match="'aten::grid_sampler_2d_backward' is not currently implemented"
    ):
        output.sum().backward()


def test_op_without_a_kernel_fails_as_on_an_incomplete_backend(simgpu):
    t = torch.rand(4, device=NAME)
    with pytest.raises(
        NotImplementedError,
        match="Could not run 'aten::_fft_r2c' with arguments from the 'simgpu' backend",
    ):
        torch.fft.rfft(t)
    with pytest.raises(NotImplementedError, match=r"Could not run 'aten::special_zeta\.out'"):
        torch.special.zeta(t, t)


def test_library_op_with_only_a_cpu_kernel_fails_on_the_device(simgpu):
    library = torch.library.Library("simgpu_test", "DEF")
    library.define("scale(Tensor x) -> Tensor")
    library.impl("scale", lambda x: x * 2, "CPU")
    assert torch.equal(torch.ops.simgpu_test.scale(torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(
        NotImplementedError,
        match="Could not run 'simgpu_test::scale' with arguments from the 'simgpu' backend",
    ):
        torch.ops.simgpu_test.scale(torch.ones(2, device=NAME))


def test_tensors_from_two_devices_are_refused(simgpu):
    on_device = torch.ones(3, device=NAME)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        on_device + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3) + on_device
    assert (on_device + torch.tensor(2.0)).device.type == NAME  # CPU scalars pass, as on CUDA
    assert on_device[torch.tensor([0, 2])].device.type == NAME  # CPU indices pass, as on CUDA


def test_random_ops_draw_from_the_device_generator(simgpu):
    torch.manual_seed(3)
    first = torch.randn(5, device=NAME)
    cpu_after_first = torch.randn(5)
    torch.manual_seed(3)
    cpu_alone = torch.randn(5)
    assert torch.equal(cpu_after_first, cpu_alone), "device draws advanced the CPU generator"
    torch.manual_seed(3)
    assert torch.equal(torch.randn(5, device=NAME).cpu(), first.cpu())
    state = torch.simgpu.get_rng_state()
    dropped = nn.functional.dropout(torch.ones(100, device=NAME), 0.5)
    torch.simgpu.set_rng_state(state)
    assert torch.equal(
        nn.functional.dropout(torch.ones(100, device=NAME), 0.5).cpu(), dropped.cpu()
    )
    with pytest.raises(
        RuntimeError, match="Expected a 'simgpu' device type for generator but found 'cpu'"
    ):
        torch.randn(3, device=NAME, generator=torch.Generator())


def test_memory_is_freed_with_the_last_tensor(simgpu):
    from torchdevice.testing.simulated import _HOST_STORAGE

    tensor = torch.randn(1000, device=NAME)
    host = weakref.ref(getattr(tensor.untyped_storage(), _HOST_STORAGE))
    view = tensor[10:20]
    del tensor
    gc.collect()
    assert host() is not None, "a view still uses the memory"
    del view
    gc.collect()
    assert host() is None


def test_kernels_are_invisible_to_function_and_dispatch_modes(simgpu):
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Functions(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    on_device = torch.ones(3, device=NAME)
    with Functions() as functions:
        on_device + 1
    assert functions.seen == ["add"]
    with Ops() as ops:
        (on_device * 2).sum()
    assert ops.seen == ["aten.mul.Tensor", "aten.sum.default"]


def test_allocating_a_storage_on_the_device_is_refused_not_a_crash(simgpu):
    saved = io.BytesIO()
    torch.save(torch.arange(3.0, device=NAME), saved)
    saved.seek(0)
    with pytest.raises(NotImplementedError, match="map_location='cpu'"):
        torch.load(saved)
    saved.seek(0)
    assert torch.equal(torch.load(saved, map_location="cpu"), torch.arange(3.0))
    assert not hasattr(torch.UntypedStorage, NAME)


def test_autocast_is_accepted_and_casts_nothing(simgpu):
    a = torch.ones(2, 2, device=NAME)
    with torch.autocast(NAME, dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.float32


mirror_in_parent(globals())

if not IN_CHILD:

    def test_the_main_process_never_registers_the_backend():
        """Importing torchdevice (and its testing package) registers nothing."""
        import torchdevice
        import torchdevice.testing

        assert not torchdevice.testing.is_registered()
        assert torch._C._get_privateuse1_backend_name() == "privateuseone"
        assert "testing" not in torchdevice.__all__
