"""CPU fallback, exercised on the simulated accelerator: real data, really missing ops.

CUDA-first code runs on a simulated MPS host whose tensors live on ``simgpu``
(``torchdevice.simulated_mps``); ops simgpu lacks must rerun on the CPU and match a CPU
reference, and every other error must come through unchanged. The module runs in a child
process (registering the backend is permanent); see ``childrun.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchdevice
from childrun import IN_CHILD, mirror_in_parent
from torchdevice import Host
from torchdevice.redirecting.fallback import (
    CAPABILITY_ERROR_TYPES,
    CAPABILITY_ERRORS,
    NEVER_RERUN,
    Fallback,
    Unsupported,
    is_capability_error,
)

NAME = "simgpu"


@pytest.fixture
def simulated():
    from torchdevice.testing import register

    register(NAME)
    # The CPU override on: explicit "cpu" means the CPU, so references are easy to build;
    # "cuda" requests and device-less factories still land on the accelerator.
    torchdevice.enable(host=Host.simulated(NAME), cpu_override=True)
    yield
    torchdevice.disable()


def fallbacks(api: str) -> list[tuple[str, int]]:
    entries = torchdevice.report().entries
    return [(e.requested, e.count) for e in entries if e.kind == "fallback" and e.api == api]


def test_cuda_first_code_lands_on_the_accelerator(simulated):
    x = torch.randn(4, 3, device="cuda")
    model = nn.Linear(3, 2).cuda()
    assert x.device.type == NAME
    assert model.weight.device.type == NAME
    device = torch.device("cuda:1")  # reads as written; what uses it lands on the device
    assert str(device) == "cuda:1"
    assert torch.zeros(1, device=device).device == torch.device(NAME, 0)
    expected = nn.functional.linear(x.cpu(), model.weight.cpu(), model.bias.cpu())
    torch.testing.assert_close(model(x).cpu(), expected)


def test_missing_op_falls_back_and_matches_cpu(simulated):
    x = torch.linspace(0.05, 0.95, 7, device="cuda")
    y = torch.special.ndtri(x)
    assert y.device.type == NAME
    assert y.dtype == torch.float32
    expected = torch.special.ndtri(torch.linspace(0.05, 0.95, 7, device="cpu"))
    torch.testing.assert_close(y.cpu(), expected)
    [(requested, count)] = fallbacks("torch.special_ndtri")
    assert (requested, count) == (f"{NAME}:0, float32", 1)
    [entry] = [e for e in torchdevice.report().entries if e.kind == "fallback"]
    assert entry.reason.startswith(
        "NotImplementedError: The operator 'aten::special_ndtri.out' is not currently "
        f"implemented for the {NAME} device."
    )


def test_fallback_is_cached_per_op_dtypes_and_device(simulated):
    mode = torchdevice.activation._mode
    assert mode is not None
    assert mode.fallback is not None
    x = torch.linspace(0.1, 0.9, 5, device="cuda")
    assert not mode.fallback.cached(torch.special.ndtri, (x,), {})
    for _ in range(3):
        torch.special.ndtri(x)  # one line: one call site, counted three times
    assert mode.fallback.cached(torch.special.ndtri, (x,), {})
    assert not mode.fallback.cached(torch.special.ndtri, (x.half(),), {})  # another dtype
    host = torch.linspace(0.1, 0.9, 5, device="cpu")
    assert not mode.fallback.cached(torch.special.ndtri, (host,), {})  # another device
    assert not mode.fallback.cached(torch.special.log_ndtr, (x,), {})  # another op
    assert [count for _, count in fallbacks("torch.special_ndtri")] == [3]
    assert mode.fallback._keys == {(torch.special.ndtri, (torch.float32,), x.device)}


def test_disable_empties_the_fallback_cache(simulated):
    mode = torchdevice.activation._mode
    assert mode is not None
    fallback = mode.fallback
    assert fallback is not None
    x = torch.linspace(0.1, 0.9, 5, device="cuda")
    torch.special.ndtri(x)
    assert fallback.cached(torch.special.ndtri, (x,), {})
    torchdevice.disable()
    assert not fallback.cached(torch.special.ndtri, (x,), {})
    assert not fallback.functions
    torchdevice.enable(host=Host.simulated(NAME), cpu_override=True)
    fresh = torchdevice.activation._mode.fallback
    assert fresh is not None
    assert not fresh.cached(torch.special.ndtri, (x,), {})
    torch.special.ndtri(x)  # tried on the device again, then falls back again
    assert fresh.cached(torch.special.ndtri, (x,), {})


def test_gradients_flow_through_a_fallen_back_op(simulated):
    x = torch.linspace(0.1, 0.9, 5, device="cuda").requires_grad_()
    torch.special.ndtri(x).pow(2).sum().backward()
    reference = torch.linspace(0.1, 0.9, 5, device="cpu").requires_grad_()
    torch.special.ndtri(reference).pow(2).sum().backward()
    assert x.grad is not None
    assert x.grad.device.type == NAME
    torch.testing.assert_close(x.grad.cpu(), reference.grad)


def test_inplace_and_out_write_back(simulated):
    values = [-1.0, 0.0, 2.0]
    x = torch.tensor(values, device="cuda")
    same = x.heaviside_(torch.tensor([0.5], device="cuda"))
    assert same is x
    assert x.device.type == NAME
    half = torch.tensor([0.5], device="cpu")
    expected = torch.heaviside(torch.tensor(values, device="cpu"), half)
    torch.testing.assert_close(x.cpu(), expected)
    source = torch.tensor(values, device="cuda")
    out = torch.empty(0, device="cuda")
    returned = torch.heaviside(source, torch.tensor([0.5], device="cuda"), out=out)
    assert returned is out
    assert out.device.type == NAME
    torch.testing.assert_close(out.cpu(), expected)


def test_named_tuple_results_keep_their_type(simulated):
    x = torch.tensor([[3.0, 1.0, 3.0], [4.0, 4.0, 5.0]], device="cuda")
    result = torch.mode(x, dim=1)
    assert type(result) is type(torch.mode(torch.ones(2, 3, device="cpu"), dim=1))
    assert result.values.device.type == NAME
    assert result.indices.device.type == NAME
    assert result.values.cpu().tolist() == [3.0, 4.0]
    assert result.indices.cpu().tolist() == [2, 1]


def test_pdist_forward_and_backward(simulated):
    """Both kernels missing: the whole call falls back, backward through the CPU op."""
    torch.manual_seed(0)
    points_cpu = torch.randn(4, 3, device="cpu")
    points = points_cpu.to("cuda").requires_grad_()
    distances = nn.functional.pdist(points)
    distances.sum().backward()
    reference = points_cpu.clone().requires_grad_()
    nn.functional.pdist(reference).sum().backward()
    torch.testing.assert_close(distances.detach().cpu(), nn.functional.pdist(points_cpu))
    torch.testing.assert_close(points.grad.cpu(), reference.grad)


def test_factory_whose_kernel_is_missing_falls_back(simulated):
    """No tensor argument: the device is the ``device=`` the mode decided."""
    y = torch.logspace(0, 2, 5, device="cuda")
    assert y.device.type == NAME
    torch.testing.assert_close(y.cpu(), torch.logspace(0, 2, 5, device="cpu"))
    [(requested, count)] = fallbacks("torch.logspace")
    assert (requested, count) == (f"{NAME}:0", 1)


def test_a_factory_that_fell_back_still_takes_the_policy_and_the_dtype_rule(simulated):
    """A cached fallback must not skip the factory's own rewriting (found by the op sweep)."""
    torch.logspace(0, 1, 5, device="cuda")  # MPS has no logspace.out: falls back, cached
    with torch.device("cuda"):  # DeviceContext hands the mode device=simgpu:0 directly
        x = torch.logspace(0, 1, 5, dtype=torch.float64)
    assert x.device == torch.device(NAME, 0)
    assert x.dtype == torch.float32  # MPS has no float64: the documented dtype rule
    torch.testing.assert_close(x.cpu(), torch.logspace(0, 1, 5, device="cpu"))


def test_an_empty_result_is_not_taken_for_a_view(simulated):
    """Empty tensors all sit at address 0; an empty result still falls back."""
    x = torch.empty(0, 2, 4, 4, 4, device="cuda")
    y = nn.functional.adaptive_avg_pool3d(x, 2)
    assert y.device.type == NAME
    assert y.shape == (0, 2, 2, 2, 2)


def test_a_dtype_the_device_refuses_falls_back(simulated):
    """complex128 lives on the device but its kernels refuse it (a TypeError, as on MPS)."""
    values = torch.tensor([1 + 2j, -3j], dtype=torch.complex128, device="cpu")
    on_device = values.to("cuda")
    assert on_device.device.type == NAME
    total = torch.add(on_device, on_device)
    assert (total.device.type, total.dtype) == (NAME, torch.complex128)
    assert torch.equal(total.cpu(), values + values)
    assert fallbacks("torch.add") == [(f"{NAME}:0, complex128, complex128", 1)]


def test_torch_library_op_with_only_a_cpu_kernel(simulated):
    library = torch.library.Library("torchdevice_test", "DEF")
    library.define("scale(Tensor x, float factor) -> Tensor")
    library.impl("scale", lambda x, factor: x * factor, "CPU")
    x = torch.arange(3.0, device="cuda")
    y = torch.ops.torchdevice_test.scale(x, 2.5)
    assert y.device.type == NAME
    assert y.cpu().tolist() == [0.0, 2.5, 5.0]


def test_real_errors_propagate_unchanged(simulated):
    a, b = torch.ones(2, 3, device="cuda"), torch.ones(2, 3, device="cuda")
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied \(2x3 and 2x3\)"):
        torch.mm(a, b)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.add(a, torch.ones(2, 3, device="cpu"))
    assert torchdevice.report().entries
    assert not [e for e in torchdevice.report().entries if e.kind == "fallback"]


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (
            lambda: torch.cdist(
                torch.ones(2, 2, dtype=torch.float16, device="cuda"),
                torch.ones(2, 2, dtype=torch.float16, device="cuda"),
            ),
            "cdist",
        ),
        (lambda: torch.histc(torch.ones(4, dtype=torch.int8, device="cuda")), "histc"),
        (
            lambda: (
                torch.ones(2, dtype=torch.uint16, device="cuda")
                + torch.ones(2, dtype=torch.uint16, device="cuda")
            ),
            "add",
        ),
    ],
    ids=["cdist-float16", "histc-int8", "add-uint16"],  # first two: the CPU kernels' gaps
)
def test_an_op_the_cpu_cannot_run_either_raises_the_original_error(simulated, build, name):
    """Ops with no CPU kernel for the dtype (measured on 2.13): the fallback cannot help,
    so the accelerator's own error comes through, not the CPU rerun's."""
    with pytest.raises((NotImplementedError, RuntimeError)) as info:
        build()
    assert NAME in str(info.value) or "not implemented for" in str(info.value)
    assert not [e for e in torchdevice.report().entries if e.kind == "fallback"]


def test_fallback_off_raises_with_a_hint():
    from torchdevice.testing import register

    register(NAME)
    torchdevice.enable(host=Host.simulated(NAME), fallback=False)
    try:
        x = torch.linspace(0.1, 0.9, 5, device="cuda")
        with pytest.raises(NotImplementedError, match="aten::special_ndtri") as info:
            torch.special.ndtri(x)
        notes = "\n".join(getattr(info.value, "__notes__", []))
        assert "enable(fallback=True)" in notes
    finally:
        torchdevice.disable()


def test_training_step_with_a_fallen_back_op_matches_cpu(simulated):
    def run(device: str):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.Generator().manual_seed(1)
        x = torch.rand(6, 4, generator=data, device="cpu").mul(0.8).add(0.1).to(device)
        for _ in range(3):
            opt.zero_grad()
            loss = model(torch.special.ndtri(x)).pow(2).mean()  # ndtri falls back each step
            loss.backward()
            opt.step()
        return loss.detach().cpu(), [p.detach().cpu() for p in model.parameters()]

    loss, params = run("cuda")
    torchdevice.disable()
    ref_loss, ref_params = run("cpu")
    torch.testing.assert_close(loss, ref_loss)
    for got, want in zip(params, ref_params, strict=True):
        torch.testing.assert_close(got, want)


def test_a_missing_backward_op_is_a_documented_limit(simulated):
    """Antialiased bilinear interpolation runs on simgpu, its backward kernel is missing:
    autograd's engine runs it below the function mode, so it raises (on MPS, PyTorch's
    native fallback, switched on by torchdevice at import, covers backward ops). Neither
    ``backward()`` nor ``torch.autograd.grad`` is rerun on CPU copies, which have no graph
    and would give no gradient instead of the error."""
    image = torch.rand(1, 1, 4, 4, device="cuda", requires_grad=True)
    out = nn.functional.interpolate(image, size=(3, 3), mode="bilinear", antialias=True)
    with pytest.raises(NotImplementedError, match="_upsample_bilinear2d_aa_backward"):
        out.sum().backward()
    out = nn.functional.interpolate(image, size=(3, 3), mode="bilinear", antialias=True)
    with pytest.raises(NotImplementedError, match="_upsample_bilinear2d_aa_backward"):
        torch.autograd.grad(out.sum(), [image], allow_unused=True)
    assert not [e for e in torchdevice.report().entries if e.kind == "fallback"]
    (grad,) = torch.autograd.grad(image.sum(), [image])  # the engine still works, on device
    assert grad.device.type == NAME
    assert torch.equal(grad.cpu(), torch.ones(1, 1, 4, 4, device="cpu"))


def test_random_ops_with_a_cpu_generator_draw_natively_and_land_on_the_device(simulated):
    expected = torch.empty(4, device="cpu").uniform_(generator=torch.Generator().manual_seed(3))
    x = torch.empty(4, device="cuda")
    same = x.uniform_(generator=torch.Generator().manual_seed(3))
    assert same is x
    assert x.device.type == NAME
    torch.testing.assert_close(x.cpu(), expected)
    weights = torch.tensor([0.0, 1.0, 0.0], device="cuda")
    picks = torch.multinomial(weights, 2, replacement=True, generator=torch.Generator())
    assert picks.device.type == NAME
    assert picks.cpu().tolist() == [1, 1]


def test_dataloader_pin_memory_over_data_built_on_the_accelerator(simulated):
    """Device-less factories land on the accelerator, generator-bound ones too (drawn on
    the CPU, then moved); DataLoader(pin_memory=True) over them trains without a device mix."""
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, generator=generator)
    y = torch.randn(8, 1)
    assert x.device.type == NAME
    assert y.device.type == NAME
    model = nn.Linear(3, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=4,
        shuffle=True,
        pin_memory=True,
        generator=torch.Generator().manual_seed(1),
    )
    losses = []
    for batch_x, batch_y in loader:
        inputs, targets = batch_x.cuda(non_blocking=True), batch_y.cuda(non_blocking=True)
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(losses) == 2
    assert all(math.isfinite(value) for value in losses)


mirror_in_parent(globals())

if not IN_CHILD:

    def test_fallback_costs_nothing_on_a_cpu_host():
        """On a host without an accelerator no fallback is armed: the fast path is bare."""
        torchdevice.enable(host="cpu")
        try:
            mode = torchdevice.activation._mode
            assert mode is not None
            assert mode.fallback is None
        finally:
            torchdevice.disable()

    @pytest.mark.slow
    def test_armed_fallback_leaves_torch_compile_whole():
        """The armed path (cached-op check + try) traces into one graph: fullgraph holds."""
        torchdevice.enable(host="cpu")
        try:
            mode = torchdevice.activation._mode
            runtime = torchdevice.activation.current_runtime()
            assert mode is not None
            assert runtime is not None
            mode.fallback = Fallback(runtime, "privateuseone")  # armed, never matching

            def step(x):
                return torch.relu(x) @ torch.ones(3, 2, device="cuda")

            compiled = torch.compile(step, fullgraph=True, backend="eager")
            x = torch.tensor([[-1.0, 2.0, 3.0]])
            torch.testing.assert_close(compiled(x), torch.tensor([[5.0, 5.0]]))
        finally:
            torchdevice.disable()

    LOOK_ALIKES = [
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"),
        RuntimeError("Expected all tensors to be on the same device, but found at least two"),
        TypeError(
            "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
            "float64. Please use float32 instead."
        ),
        TypeError("unsupported operand type(s) for +: 'Tensor' and 'str'"),
        ValueError("The operator 'aten::take' is not currently implemented for the MPS device."),
    ]

    @pytest.mark.parametrize("entry", CAPABILITY_ERRORS, ids=lambda e: e.example[:40])
    def test_each_listed_capability_error_is_recognised(entry):
        assert is_capability_error(entry.kind(entry.example))
        assert entry.kind in CAPABILITY_ERROR_TYPES
        if entry.message is not None:
            assert not is_capability_error(entry.kind("a different message"))

    @pytest.mark.parametrize("error", LOOK_ALIKES, ids=lambda e: str(e)[:40])
    def test_errors_not_in_the_table_are_not_capability_errors(error):
        """Wrong calls, float64 on MPS (no result could live there), other classes."""
        assert not is_capability_error(error)

    def test_the_mode_catches_exactly_the_classes_of_the_table():
        assert (NotImplementedError, RuntimeError, TypeError) == CAPABILITY_ERROR_TYPES

    @pytest.mark.parametrize(
        "func",
        sorted(NEVER_RERUN, key=lambda f: f.__qualname__),
        ids=lambda f: f"{f.__module__}.{f.__qualname__}",
    )
    def test_autograd_entry_points_are_never_rerun(func):
        """Their tensors are graph nodes: CPU copies have no graph to run backward on."""
        torchdevice.enable(host="cpu")
        try:
            runtime = torchdevice.activation.current_runtime()
            assert runtime is not None
            fallback = Fallback(runtime, "meta")
            loss = torch.ones(2, device="meta", requires_grad=True).sum()
            error = NotImplementedError("The operator 'aten::x' is not currently implemented")
            with pytest.raises(Unsupported):
                fallback.rerun(func, (loss,), {}, error)
            assert not fallback.functions
        finally:
            torchdevice.disable()
