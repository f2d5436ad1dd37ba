"""The simulated accelerator (torchdevice.simulated_mps): real data, real autograd, MPS's op set.

Registering the backend is permanent and process-wide (``torch.accelerator`` starts reporting
it, ``pin_memory=True`` starts asking it for pinned memory), so these tests never register it in
the main pytest process: the module runs itself once in a child pytest process, and each test
here reports its own outcome from that run. In the child (``TORCHDEVICE_SIMGPU_CHILD=1``) the
tests run for real.
"""

from __future__ import annotations

import copy
import gc
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


def test_the_sparse_op_set_is_mps_as_the_installed_torch_has_it(simgpu):
    """Sparse COO kernels: exactly MPS's (``SparseMPS``) that the CPU has (``SparseCPU``)."""
    from torchdevice.simulated_mps.mps_ops import dispatch_keys
    from torchdevice.testing import registered_sparse_overloads, supported_sparse_ops

    sparse = supported_sparse_ops()
    assert registered_sparse_overloads() == sparse
    assert {"aten::_to_sparse", "aten::_coalesce", "aten::_to_dense", "aten::add.out"} <= sparse
    keys = dispatch_keys()
    assert all("SparseMPS" in keys[name] for name in sparse)
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    assert all(has_kernel(name, "SparseCPU") for name in sparse)
    assert all(has_kernel(name, "SparsePrivateUse1") for name in sparse)


def test_the_op_set_is_mps_as_the_installed_torch_has_it(simgpu):
    """Supported: a CPU kernel and an MPS one in native_functions.yaml; missing: CPU only."""
    from torchdevice.simulated_mps.mps_ops import MPS_CPU_FALLBACK_OPS, dispatch_keys
    from torchdevice.simulated_mps.op_set import LEFT_OUT
    from torchdevice.testing import missing_ops, registered_overloads, supported_ops

    supported, missing = supported_ops(), missing_ops()
    assert not supported & missing
    assert supported - registered_overloads() == set(LEFT_OUT), "an overload has no kernel"
    assert not missing & registered_overloads(), "a missing overload has a kernel"
    keys = dispatch_keys()
    by_hand = supported & MPS_CPU_FALLBACK_OPS  # MPS reruns these on the CPU by itself
    assert by_hand == {"aten::embedding_renorm_", "aten::col2im"}
    assert all("MPS" in keys[name] for name in supported - by_hand)
    assert not any("MPS" in keys.get(name, frozenset()) for name in missing)
    assert not missing & MPS_CPU_FALLBACK_OPS
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    assert all(has_kernel(name, "CPU") for name in supported | missing)
    # Ops a hand-written list once called missing, which MPS has had for releases, and ops
    # it really lacks in torch 2.13 (structured delegates resolved: erfinv via erfinv.out).
    assert {
        "aten::erfinv",
        "aten::erfinv_",
        "aten::erfinv.out",
        "aten::histc",
        "aten::kthvalue.values",
        "aten::_cdist_forward",
        "aten::linalg_qr",
        "aten::grid_sampler_2d_backward",
        "aten::_fft_r2c",
        "aten::silu_backward",  # a kernel beside a composite: MPS runs its kernel
        "aten::mish_backward",
    } <= supported
    assert "aten::native_channel_shuffle" not in supported | missing  # decomposes on MPS
    assert {
        "aten::heaviside.out",
        "aten::linalg_eig",
        "aten::take",
        "aten::mode",
        "aten::_pdist_forward",
        "aten::logspace.out",
        "aten::_upsample_bilinear2d_aa_backward",
    } <= missing
    assert len(supported) > 800
    assert len(missing) > 150


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.bool,
        torch.complex64,
        torch.complex128,
    ],
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


def mps_error(operator: str) -> str:
    """MPS's text for an op it lacks (mps_error_fallback in MPSFallback.mm), for this device."""
    return (
        f"The operator '{operator}' is not currently implemented for the {NAME} device. If you "
        "want this op to be considered for addition please comment on "
        "https://github.com/pytorch/pytorch/issues/141287 and mention use-case, that resulted "
        f"in missing op as well as commit hash {torch.version.git_version}. As a temporary fix, "
        "you can set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as "
        f"a fallback for this op. WARNING: this will be slower than running natively on {NAME}."
    )


#: Calls of ops MPS lacks, and the operator its error names. The in-place and functional
#: heaviside reach heaviside.out through the kernels torchgen generates for structured ops.
MISSING_CALLS: dict[str, tuple[str, Callable[[torch.Tensor], object]]] = {
    "heaviside": ("aten::heaviside.out", lambda t: torch.heaviside(t, t)),
    "heaviside_": ("aten::heaviside.out", lambda t: t.heaviside_(t)),
    "take": ("aten::take", lambda t: torch.take(t, torch.tensor([0, 2], device=t.device))),
    "mode": ("aten::mode", torch.mode),
    "pdist": ("aten::_pdist_forward", lambda t: nn.functional.pdist(t.reshape(2, 2))),
    "linalg_eig": ("aten::linalg_eig", lambda t: torch.linalg.eig(t.reshape(2, 2))),
}


@pytest.mark.parametrize("name", list(MISSING_CALLS))
def test_missing_op_fails_like_mps_and_runs_on_the_cpu(simgpu, name):
    operator, call = MISSING_CALLS[name]
    values = torch.tensor([0.1, -0.2, 0.3, 0.4])
    with pytest.raises(NotImplementedError) as caught:
        call(values.to(NAME))
    assert str(caught.value) == mps_error(operator)
    call(values.clone())  # the same call has a CPU kernel: a fallback can rerun it there


@pytest.mark.parametrize(
    "call",
    [
        torch.erfinv,
        lambda t: torch.histc(t, bins=4),
        lambda t: torch.kthvalue(t, 2),
        lambda t: torch.cdist(t.reshape(2, 2), t.reshape(2, 2)),
        lambda t: torch.linalg.qr(t.reshape(2, 2)),
        torch.fft.rfft,
    ],
    ids=["erfinv", "histc", "kthvalue", "cdist", "linalg_qr", "fft_rfft"],
)
def test_ops_mps_has_compute_on_the_device(simgpu, call):
    """Ops a hand-picked list called missing: MPS has kernels for them, so this device does."""
    values = torch.tensor([0.1, -0.2, 0.3, 0.4])
    got, expected = call(values.to(NAME)), call(values)
    assert {t.device.type for t in torch.utils._pytree.tree_leaves(got)} == {NAME}
    torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t.cpu(), got), expected)


def test_missing_backward_op_fails_inside_backward(simgpu):
    """The forward has an MPS kernel, its backward none: it fails inside ``backward()``."""
    image = torch.rand(1, 1, 4, 4, requires_grad=True)
    expected = nn.functional.interpolate(image, size=(3, 3), mode="bilinear", antialias=True)
    on_device = image.detach().to(NAME).requires_grad_()
    output = nn.functional.interpolate(on_device, size=(3, 3), mode="bilinear", antialias=True)
    torch.testing.assert_close(output.cpu(), expected.detach())  # the forward is supported
    with pytest.raises(NotImplementedError) as caught:
        output.sum().backward()
    assert str(caught.value) == mps_error("aten::_upsample_bilinear2d_aa_backward.grad_input")


def test_an_op_of_any_namespace_without_a_kernel_fails_like_mps(simgpu):
    """MPS's error fallback covers every namespace: a library op with only a CPU kernel too."""
    library = torch.library.Library("simgpu_test", "DEF")
    library.define("scale(Tensor x) -> Tensor")
    library.impl("scale", lambda x: x * 2, "CPU")
    assert torch.equal(torch.ops.simgpu_test.scale(torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(NotImplementedError) as caught:
        torch.ops.simgpu_test.scale(torch.ones(2, device=NAME))
    assert str(caught.value) == mps_error("simgpu_test::scale")


def test_float64_is_refused_as_mps_refuses_it(simgpu):
    """MPS_ERROR_DOUBLE_NOT_SUPPORTED (EmptyTensor.cpp): at every float64 allocation."""
    message = (
        f"Cannot convert a {NAME} Tensor to float64 dtype as the {NAME} framework doesn't "
        "support float64. Please use float32 instead."
    )
    for make in (
        lambda: torch.zeros(2, dtype=torch.float64, device=NAME),
        lambda: torch.ones(2, dtype=torch.float64).to(NAME),
        lambda: torch.ones(2, device=NAME).double(),
        lambda: torch.ones(2, device=NAME).sum(dtype=torch.float64),
    ):
        with pytest.raises(TypeError) as caught:
            make()
        assert str(caught.value) == message


def test_dtypes_mps_kernels_refuse_are_refused_by_kernels_only(simgpu):
    """complex128 can be held, copied and viewed (as on MPS), not computed with:
    getMPSDataType (OperationUtils.mm) refuses it in every compute kernel."""
    values = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex128)
    on_device = values.to(NAME)
    assert on_device[1:].cpu().tolist() == [3 - 4j]
    assert torch.equal(on_device.cpu(), values)
    with pytest.raises(TypeError) as caught:
        torch.add(on_device, on_device)
    assert str(caught.value) == (
        f"Trying to convert ComplexDouble to the {NAME} backend but it does not have support "
        "for that dtype."
    )
    complex64 = values.to(torch.complex64)
    torch.testing.assert_close(torch.add(complex64.to(NAME), 1).cpu(), complex64 + 1)


def test_printing_a_device_tensor_formats_in_float32_as_on_mps(simgpu):
    """PyTorch's printer converts to float64 except on MPS; this device gets MPS's branch."""
    assert repr(torch.tensor([0.5, 2.0], device=NAME)) == (
        "tensor([0.5000, 2.0000], device='simgpu:0')"
    )
    assert "1.+2.j" in repr(torch.tensor([1 + 2j], device=NAME))


def test_cpu_kernels_called_from_cpp_with_wrapped_numbers(simgpu):
    """C++ code passes Python numbers as wrapped-number tensors (``take_along_dim`` computes
    ``index % size``); the CPU kernel gets a tensor back, with the promotion of a number."""
    values = torch.arange(12.0).reshape(3, 4)
    index = torch.tensor([[0, 1, 2, 3]])
    got = torch.take_along_dim(values.to(NAME), index.to(NAME), dim=0)
    assert torch.equal(got.cpu(), torch.take_along_dim(values, index, dim=0))
    # margin_ranking_loss adds the margin as a wrapped number, to 0-dim float16 operands
    # here: the result stays float16 (a plain float32 number tensor would promote it).
    first, second, target = (torch.tensor(v, dtype=torch.float16) for v in (0.3, 0.1, -1.0))
    expected = nn.functional.margin_ranking_loss(first, second, target, margin=0.25)
    got = nn.functional.margin_ranking_loss(
        first.to(NAME), second.to(NAME), target.to(NAME), margin=0.25
    )
    assert got.dtype == torch.float16
    assert torch.equal(got.cpu(), expected)
    # with a dimensioned operand, the number keeps its precision: log10's gradient divides
    # by log(10) as a double, as on the CPU
    x = torch.tensor([0.3, 2.0, 7.0], dtype=torch.float16, requires_grad=True)
    on_device = x.detach().to(NAME).requires_grad_()
    torch.log10(x).sum().backward()
    torch.log10(on_device).sum().backward()
    assert torch.equal(on_device.grad.cpu(), x.grad)


def test_convolutions_run_as_mps_runs_them(simgpu):
    """MPS convolves with its own kernels; ATen routes this device through the overrideable
    convolution ops, which the device implements with the CPU's convolution."""
    torch.manual_seed(0)
    for layer in (nn.Conv2d(4, 6, 3, groups=2), nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False)):
        x = torch.randn(2, 4, 5, 5, requires_grad=True)
        layer(x).square().sum().backward()
        x_device = x.detach().to(NAME).requires_grad_()
        on_device = copy.deepcopy(layer).to(NAME)
        out = on_device(x_device)
        out.square().sum().backward()
        torch.testing.assert_close(out.detach().cpu(), layer(x).detach())
        torch.testing.assert_close(x_device.grad.cpu(), x.grad)
        torch.testing.assert_close(on_device.weight.grad.cpu(), layer.weight.grad)


def test_autograd_zero_gradients_are_plain_zeros(simgpu):
    """``sgn``'s gradient for real inputs is an ``_efficientzerotensor``; here plain zeros."""
    x = torch.tensor([-1.0, 2.0], device=NAME, requires_grad=True)
    torch.sgn(x).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.zeros(2))


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
    gc.collect()
    before = torch.simgpu.memory_allocated()
    tensor = torch.randn(1000, device=NAME)
    assert torch.simgpu.memory_allocated() == before + 4000
    view = tensor[10:20]
    del tensor
    gc.collect()
    assert torch.simgpu.memory_allocated() == before + 4000, "a view still uses the memory"
    del view
    gc.collect()
    assert torch.simgpu.memory_allocated() == before


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


def test_storages_are_allocated_on_the_device(simgpu):
    storage = torch.UntypedStorage(8, device=NAME)
    assert storage.device == torch.device(NAME, 0)
    assert storage.nbytes() == 8
    copied = torch.arange(3.0, device=NAME).untyped_storage().clone()
    assert copied.device.type == NAME
    assert torch.equal(torch.empty(0).set_(copied.cpu()), torch.arange(3.0))
    assert torch.UntypedStorage(4).simgpu().device.type == NAME  # storage.<name>() exists


def test_autocast_casts_as_on_mps(simgpu):
    """MPS's default autocast dtype, matmuls in the autocast dtype, log_softmax in float32."""
    assert torch.get_autocast_dtype(NAME) == torch.get_autocast_dtype("mps") == torch.float16
    a = torch.ones(2, 2, device=NAME)
    with torch.autocast(NAME, dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.bfloat16
        assert torch.log_softmax(a.bfloat16(), -1).dtype == torch.float32
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
