"""CPU fallback, exercised on the simulated accelerator: real data, really missing ops.

CUDA-first code runs on a simulated MPS host whose tensors live on ``simgpu``
(``torchdevice.testing``); ops simgpu lacks must rerun on the CPU and match a CPU
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
    assert torch.device("cuda:1") == torch.device(NAME, 0)
    expected = nn.functional.linear(x.cpu(), model.weight.cpu(), model.bias.cpu())
    torch.testing.assert_close(model(x).cpu(), expected)


def test_missing_op_falls_back_and_matches_cpu(simulated):
    x = torch.linspace(-0.9, 0.9, 7, device="cuda")
    y = torch.erfinv(x)
    assert y.device.type == NAME
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), torch.erfinv(torch.linspace(-0.9, 0.9, 7, device="cpu")))
    assert fallbacks("torch.erfinv") == [(f"{NAME}:0, float32", 1)]


def test_fallback_is_cached_per_op_and_dtype(simulated):
    mode = torchdevice.activation._mode
    assert mode is not None
    assert mode.fallback is not None
    x = torch.linspace(-0.5, 0.5, 5, device="cuda")
    assert not mode.fallback.cached(torch.erfinv, (x,), {})
    for _ in range(3):
        torch.erfinv(x)  # one line: one call site, counted three times
    assert mode.fallback.cached(torch.erfinv, (x,), {})
    assert not mode.fallback.cached(torch.erfinv, (x.double(),), {})
    assert [count for _, count in fallbacks("torch.erfinv")] == [3]


def test_gradients_flow_through_a_fallen_back_op(simulated):
    x = torch.linspace(-0.5, 0.5, 5, device="cuda").requires_grad_()
    torch.erfinv(x).pow(2).sum().backward()
    reference = torch.linspace(-0.5, 0.5, 5, device="cpu").requires_grad_()
    torch.erfinv(reference).pow(2).sum().backward()
    assert x.grad is not None
    assert x.grad.device.type == NAME
    torch.testing.assert_close(x.grad.cpu(), reference.grad)


def test_inplace_and_out_write_back(simulated):
    x = torch.linspace(-0.5, 0.5, 5, device="cuda")
    same = x.erfinv_()
    assert same is x
    assert x.device.type == NAME
    expected = torch.erfinv(torch.linspace(-0.5, 0.5, 5, device="cpu"))
    torch.testing.assert_close(x.cpu(), expected)
    source = torch.linspace(-0.5, 0.5, 5, device="cuda")
    out = torch.empty(0, device="cuda")
    returned = torch.erfinv(source, out=out)
    assert returned is out
    assert out.device.type == NAME
    torch.testing.assert_close(out.cpu(), expected)


def test_named_tuple_results_keep_their_type(simulated):
    x = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]], device="cuda")
    result = torch.kthvalue(x, 2, dim=1)
    assert type(result) is type(torch.kthvalue(torch.ones(2, 3, device="cpu"), 2, dim=1))
    assert result.values.device.type == NAME
    assert result.indices.device.type == NAME
    assert result.values.cpu().tolist() == [2.0, 4.0]
    assert result.indices.cpu().tolist() == [2, 2]


def test_cdist_forward_and_backward(simulated):
    torch.manual_seed(0)
    a_cpu, b_cpu = torch.randn(3, 2, device="cpu"), torch.randn(4, 2, device="cpu")
    a = a_cpu.to("cuda").requires_grad_()
    b = b_cpu.to("cuda")
    distances = torch.cdist(a, b)
    distances.sum().backward()
    a_ref = a_cpu.clone().requires_grad_()
    torch.cdist(a_ref, b_cpu).sum().backward()
    torch.testing.assert_close(distances.detach().cpu(), torch.cdist(a_cpu, b_cpu))
    torch.testing.assert_close(a.grad.cpu(), a_ref.grad)


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
        (lambda: torch.cdist(torch.ones(2, 2, dtype=torch.float16, device="cuda"),
                             torch.ones(2, 2, dtype=torch.float16, device="cuda")), "cdist"),
        (lambda: torch.histc(torch.ones(4, dtype=torch.int8, device="cuda")), "histc"),
        (lambda: torch.ones(2, dtype=torch.uint16, device="cuda")
         + torch.ones(2, dtype=torch.uint16, device="cuda"), "add"),
    ],
    ids=["cdist-float16", "histc-int8", "add-uint16"],
)  # fmt: skip
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
        x = torch.linspace(-0.5, 0.5, 5, device="cuda")
        with pytest.raises(NotImplementedError, match="aten::erfinv") as info:
            torch.erfinv(x)
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
        x = torch.rand(6, 4, generator=data, device="cpu").mul(1.6).sub(0.8).to(device)
        for _ in range(3):
            opt.zero_grad()
            loss = model(torch.erfinv(x)).pow(2).mean()  # erfinv falls back each step
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
    """grid_sample's forward runs on simgpu, its backward kernel is missing: autograd's
    engine runs it below the function mode, so it raises (on MPS, PyTorch's native
    fallback, switched on by torchdevice at import, covers backward ops)."""
    image = torch.rand(1, 1, 4, 4, device="cuda", requires_grad=True)
    grid = torch.zeros(1, 2, 2, 2, device="cuda")
    out = nn.functional.grid_sample(image, grid, align_corners=False)
    with pytest.raises(NotImplementedError, match="grid_sampler_2d_backward"):
        out.sum().backward()


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
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, pin_memory=True,
                        generator=torch.Generator().manual_seed(1))  # fmt: skip
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
        from torchdevice.fallback import Fallback

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
