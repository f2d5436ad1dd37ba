"""The simulated accelerator's C++ half: what a training script does to tensors besides
arithmetic works on the device and matches the CPU.

Copies, serialisation, pickling, pinned memory, storages, resizing, ``.data =`` and device
generators go through PyTorch's own C++ paths, which the C++ half (allocator, guard, hooks,
generator, pinned allocator) makes available. Runs in a child process (``childrun``): a crash
there fails these tests instead of killing pytest.
"""

from __future__ import annotations

import copy
import gc
import io
import pickle

import pytest
import torch
from torch import nn

from childrun import mirror_in_parent

NAME = "simgpu"


@pytest.fixture
def simgpu() -> str:
    from torchdevice.testing import register

    return register(NAME)


def on_device(name: str) -> torch.Tensor:
    """A float32 tensor with distinct values, on device ``name``."""
    return torch.arange(12, dtype=torch.float32).reshape(3, 4).to(name) / 7


def test_deepcopy_of_a_tensor_is_an_independent_device_copy(simgpu):
    original = on_device(NAME)
    copied = copy.deepcopy(original)
    assert copied.device == original.device
    assert torch.equal(copied.cpu(), on_device("cpu"))
    assert copied.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()
    copied.add_(1)
    assert torch.equal(original.cpu(), on_device("cpu")), "the copy wrote into the original"


def test_deepcopy_keeps_views_of_one_storage_together(simgpu):
    base = on_device(NAME)
    view = base[1]
    base_copy, view_copy = copy.deepcopy([base, view])
    view_copy.fill_(-1)
    assert torch.equal(base_copy[1].cpu(), torch.full((4,), -1.0))
    assert torch.equal(base.cpu(), on_device("cpu"))


def test_deepcopy_of_a_module_matches_the_cpu(simgpu):
    def trained_copy(device: str) -> nn.Module:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to(device)
        model(on_device(device)).sum().backward()
        model.extra = on_device(device).requires_grad_()
        (model.extra * 2).sum().backward()
        return copy.deepcopy(model)

    on_cpu, on_sim = trained_copy("cpu"), trained_copy(NAME)
    for name, tensor in on_sim.state_dict().items():
        assert tensor.device.type == NAME, name
        assert torch.equal(tensor.cpu(), on_cpu.state_dict()[name]), name
    for theirs, mine in zip(on_cpu.parameters(), on_sim.parameters(), strict=True):
        assert isinstance(mine, nn.Parameter)
        assert mine.device.type == NAME
        assert (mine.grad is None) == (theirs.grad is None)  # Parameter copies drop .grad
    assert torch.equal(on_sim.extra.grad.cpu(), on_cpu.extra.grad)  # tensors keep it


#: map_location forms (built once the device exists) and where each puts the tensors.
MAP_LOCATIONS = {
    "none": (lambda: None, NAME),
    "cpu": (lambda: "cpu", "cpu"),
    "name": (lambda: NAME, NAME),
    "name:0": (lambda: f"{NAME}:0", NAME),
    "device-cpu": (lambda: torch.device("cpu"), "cpu"),
    "device": (lambda: torch.device(NAME, 0), NAME),
    "dict": (lambda: {f"{NAME}:0": "cpu"}, "cpu"),
    "callable": (lambda: lambda storage, location: storage, "cpu"),
}


@pytest.mark.parametrize("form", MAP_LOCATIONS)
def test_save_and_load_with_every_map_location(simgpu, form):
    map_location, expected = MAP_LOCATIONS[form]
    buffer = io.BytesIO()
    state = {"weight": on_device(NAME), "step": torch.tensor(3, device=NAME)}
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=map_location())
    assert loaded["weight"].device.type == expected
    assert torch.equal(loaded["weight"].cpu(), on_device("cpu"))
    assert loaded["step"].item() == 3


def test_a_cpu_checkpoint_loads_onto_the_device(simgpu):
    buffer = io.BytesIO()
    model = nn.Linear(4, 2)
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location=NAME, weights_only=True)
    assert {t.device.type for t in state.values()} == {NAME}
    restored = nn.Linear(4, 2).to(NAME)
    restored.load_state_dict(state)
    assert torch.equal(restored.weight.cpu(), model.weight.detach())


def test_pickle_round_trips_a_device_tensor(simgpu):
    original = on_device(NAME)
    restored = pickle.loads(pickle.dumps(original))
    assert restored.device == original.device
    assert torch.equal(restored.cpu(), on_device("cpu"))


def test_pin_memory_gives_pinned_cpu_memory(simgpu):
    pageable = on_device("cpu")
    pinned = pageable.pin_memory()
    assert pinned.device.type == "cpu"
    assert pinned.is_pinned()
    assert not pageable.is_pinned()
    assert torch.equal(pinned, pageable)
    assert pinned[1:].is_pinned(), "a view of pinned memory is pinned"
    assert torch.empty(3, pin_memory=True).is_pinned()
    assert torch.equal(pinned.to(NAME, non_blocking=True).cpu(), pageable)


def test_dataloader_with_workers_and_pinned_memory(simgpu):
    data = torch.utils.data.TensorDataset(torch.arange(8.0).unsqueeze(1), torch.arange(8))
    loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=2, pin_memory=True)
    batches = list(loader)
    assert all(x.is_pinned() and y.is_pinned() for x, y in batches)
    assert torch.equal(torch.cat([x.to(NAME) for x, _ in batches]).cpu(), data.tensors[0])


def test_untyped_storage_on_the_device(simgpu):
    tensor = on_device(NAME)
    storage = tensor.untyped_storage()
    assert storage.device == tensor.device
    assert storage.nbytes() == 48
    assert storage.data_ptr() == tensor.data_ptr()
    assert torch.equal(torch.empty(0).set_(storage.cpu()).view(3, 4), on_device("cpu"))
    fresh = torch.UntypedStorage(16, device=NAME)
    assert fresh.device == tensor.device
    assert fresh.nbytes() == 16
    fresh.copy_(torch.arange(4, dtype=torch.int32).untyped_storage())
    assert torch.equal(torch.empty(0, dtype=torch.int32).set_(fresh.cpu()), torch.arange(4).int())
    assert fresh.clone().device == tensor.device


def test_resize_grows_the_storage_every_view_sees(simgpu):
    tensor = torch.arange(4.0, device=NAME)
    view = tensor[:2]
    tensor.resize_(10)
    assert tensor.shape == (10,)
    assert view.untyped_storage().nbytes() == 40, "the view's storage did not grow"
    assert torch.equal(tensor[:4].cpu(), torch.arange(4.0))
    tensor[1] = 7
    assert view[1].item() == 7
    tensor.resize_(2)
    assert torch.equal(tensor.cpu(), torch.tensor([0.0, 7.0]))
    storage = torch.UntypedStorage(4, device=NAME)
    storage.resize_(12)
    assert storage.nbytes() == 12


def test_views_write_through_to_their_base(simgpu):
    base = torch.zeros(4, 4, device=NAME)
    reference = torch.zeros(4, 4)
    for tensor in (base, reference):
        tensor.t()[0].fill_(1)
        tensor.view(16)[5:7] = 2
        tensor[2:, 2:].mul_(3).add_(4)
        tensor.diagonal().copy_(torch.arange(4.0).to(tensor.device))
    assert torch.equal(base.cpu(), reference)


def test_assigning_data_swaps_the_tensor_behind_a_parameter(simgpu):
    layer = nn.Linear(3, 2).to(NAME)
    weight = layer.weight
    layer.weight.data = torch.ones(2, 3, device=NAME)
    assert layer.weight is weight
    assert isinstance(weight, nn.Parameter)
    assert torch.equal(weight.cpu(), torch.ones(2, 3))
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        layer.weight.data = torch.ones(2, 3)  # CPU data behind a device parameter


def test_cpu_device_round_trip_copies_are_independent(simgpu):
    cpu = on_device("cpu")
    device = cpu.to(NAME)
    cpu.add_(1)
    assert torch.equal(device.cpu(), on_device("cpu"))
    back = device.cpu()
    device.zero_()
    assert torch.equal(back, on_device("cpu"))


def test_memory_allocated_counts_device_storages(simgpu):
    gc.collect()
    before = torch.simgpu.memory_allocated()
    torch.simgpu.reset_peak_memory_stats()
    buffer = torch.empty(1024, device=NAME)
    assert torch.simgpu.memory_allocated() == before + 4096
    del buffer
    gc.collect()
    assert torch.simgpu.memory_allocated() == before
    assert torch.simgpu.max_memory_allocated() >= before + 4096


def test_events_time_and_streams_switch(simgpu):
    start = torch.Event(device=NAME, enable_timing=True)
    end = torch.Event(device=NAME, enable_timing=True)
    start.record()
    torch.ones(1000, device=NAME).sum()
    end.record()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0
    side = torch.Stream(device=NAME)
    assert side != torch.accelerator.current_stream()
    with side:
        assert torch.accelerator.current_stream() == side
    assert torch.accelerator.current_stream() != side


def test_autocast_casts_as_on_the_cpu(simgpu):
    """The shared casting rules (MPS's list follows them): a linear layer in float16, equal
    to the CPU's autocast result, and log_softmax in float32 (the CPU's list leaves it in
    float16, so its reference is computed in float32 here)."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    results = {}
    for device in ("cpu", NAME):
        moved = copy.deepcopy(layer).to(device)
        with torch.autocast(device_type=device, dtype=torch.float16):
            hidden = moved(x.to(device))
            results[device] = (hidden, torch.log_softmax(hidden, -1))
    (cpu_hidden, _), (hidden, log) = results["cpu"], results[NAME]
    assert (hidden.dtype, log.dtype) == (torch.float16, torch.float32)
    assert torch.equal(hidden.cpu(), cpu_hidden)
    assert torch.equal(log.cpu(), torch.log_softmax(cpu_hidden.float(), -1))


def test_a_second_device_index_is_refused(simgpu):
    with pytest.raises(RuntimeError, match="has one device"):
        torch.UntypedStorage(4, device=f"{NAME}:1")
    with pytest.raises(RuntimeError, match="has one device"):
        torch.Generator(device=f"{NAME}:1")


def test_device_generators_are_their_own_streams(simgpu):
    generator = torch.Generator(device=NAME)
    assert generator.device == torch.device(NAME, 0)
    generator.manual_seed(7)
    first = torch.randn(5, device=NAME, generator=generator)
    generator.manual_seed(7)
    assert torch.equal(torch.randn(5, device=NAME, generator=generator).cpu(), first.cpu())
    # A device stream is the CPU's Mersenne Twister: same seed, same numbers.
    assert torch.equal(first.cpu(), torch.randn(5, generator=torch.Generator().manual_seed(7)))
    state = generator.get_state()
    drawn = torch.rand(3, device=NAME, generator=generator)
    generator.set_state(state)
    assert torch.equal(torch.rand(3, device=NAME, generator=generator).cpu(), drawn.cpu())
    torch.manual_seed(7)
    default_state = torch.simgpu.get_rng_state()
    assert torch.equal(default_state, torch.simgpu.default_generator.get_state())
    other = torch.randn(5, device=NAME)  # the default generator, not ``generator``
    assert torch.equal(other.cpu(), first.cpu())


def test_generators_in_random_ops_and_their_copies(simgpu):
    generator = torch.Generator(device=NAME).manual_seed(3)
    clone = copy.deepcopy(generator)
    assert clone.device == generator.device
    assert torch.equal(clone.get_state(), generator.get_state())
    ones = torch.ones(200, device=NAME)
    kept = torch.bernoulli(ones / 2, generator=generator)
    assert torch.equal(torch.bernoulli(ones / 2, generator=clone).cpu(), kept.cpu())
    sample = torch.multinomial(ones, 5, generator=generator)
    assert sample.device.type == NAME
    assert torch.randperm(6, device=NAME, generator=generator).sort().values.tolist() == list(
        range(6)
    )
    assert torch.empty(4, device=NAME).uniform_(generator=generator).device.type == NAME


def test_device_tensors_cross_processes_by_value_while_redirecting(simgpu):
    """multiprocessing has no IPC for the device (nor for MPS): torchdevice sends its tensors
    by value, and puts torch's own reducer back when disabled."""
    from multiprocessing.reduction import ForkingPickler

    from torch.multiprocessing.reductions import reduce_tensor

    import torchdevice

    original, host = on_device(NAME), on_device("cpu")
    with pytest.raises(RuntimeError, match="only available on CPU"):
        ForkingPickler.dumps(original)  # torch alone: no way to share device memory
    torchdevice.enable(host="simulated-mps")
    try:
        parameter = nn.Parameter(original.clone())
        restored, restored_parameter, cpu = pickle.loads(
            ForkingPickler.dumps((original, parameter, host))
        )
    finally:
        torchdevice.disable()
    assert restored.device == original.device
    assert torch.equal(restored.cpu(), on_device("cpu"))
    assert restored.untyped_storage().data_ptr() != original.untyped_storage().data_ptr()
    assert isinstance(restored_parameter, nn.Parameter)
    assert restored_parameter.requires_grad
    assert cpu.device.type == "cpu"
    assert ForkingPickler._extra_reducers[torch.Tensor] is reduce_tensor


@pytest.fixture
def compilers() -> None:
    """Import inductor and dynamo's debug backends first: torch's own import of them warns
    (``torch.jit.script_method`` is deprecated), which this suite's filters make an error."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import torch._dynamo.backends.debugging
        import torch._inductor.compile_fx  # noqa: F401 - imported for its side effect


def test_default_compile_runs_on_the_device_with_eager_results(simgpu, compilers, caplog):
    """Inductor has no code generator for the device: the default backend compiles graphs
    on it with aot_eager (logged once), training included, with eager's results."""

    def fused(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ x.T).sin() + x.mean()  # a reduction fused with pointwise ops

    def train(device: str) -> tuple[list[float], list[torch.Tensor], torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
        step = torch.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            loss = step(on_device(device)[:, :4]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return (
            losses,
            [p.detach().cpu() for p in model.parameters()],
            torch.compile(fused)(on_device(device)).cpu(),
        )

    torch._dynamo.reset()
    with caplog.at_level("WARNING", logger="torchdevice.simulated_mps"):
        sim_losses, sim_weights, sim_fused = train(NAME)
    assert sim_losses == train_eager_losses(), "compiled losses differ from eager CPU ones"
    assert torch.equal(sim_fused, fused(on_device("cpu")))
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    eager_sgd(reference)
    for mine, theirs in zip(sim_weights, reference.parameters(), strict=True):
        assert torch.equal(mine, theirs.detach())
    warnings = [r.getMessage() for r in caplog.records if r.name == "torchdevice.simulated_mps"]
    assert len(warnings) == 1, warnings
    assert "backend='aot_eager'" in warnings[0]
    assert "(simgpu)" in warnings[0]


def eager_sgd(model: nn.Module) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        loss = model(on_device("cpu")[:, :4]).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_eager_losses() -> list[float]:
    torch.manual_seed(0)
    return eager_sgd(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))


def test_only_graphs_on_the_device_leave_inductor(simgpu, compilers, monkeypatch):
    """A graph with no tensor on the device still reaches inductor's compile_fx."""
    from torch._inductor import compile_fx

    reached = []

    def recorder(graph, inputs, **_):
        reached.append([str(t.device) for t in inputs if isinstance(t, torch.Tensor)])
        return graph.forward

    monkeypatch.setattr(compile_fx, "compile_fx", recorder)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(torch.sin)(on_device("cpu")), on_device("cpu").sin())
    assert reached == [["cpu"]]
    torch._dynamo.reset()
    assert torch.equal(torch.compile(torch.cos)(on_device(NAME)).cpu(), on_device("cpu").cos())
    assert reached == [["cpu"]], "a graph on the device reached inductor"


# -- sparse COO tensors, inference mode, LSTM: what real programs hit (whisper, Lightning) ----


def test_sparse_coo_tensors_as_mps_has_them(simgpu):
    """whisper keeps a sparse buffer: ``zeros(bool)``, set, ``to_sparse()``, moved with the
    module; the device's sparse tensors give the CPU's indices, values and products."""
    dense = torch.zeros(4, 3, dtype=torch.bool)
    dense[2:] = True
    on_dev = torch.zeros(4, 3, dtype=torch.bool, device=NAME)
    on_dev[2:] = True
    sparse = on_dev.to_sparse()
    assert (sparse.device.type, sparse.layout) == (NAME, torch.sparse_coo)
    assert sparse.indices().device.type == NAME
    assert torch.equal(sparse.indices().cpu(), dense.to_sparse().indices())
    assert torch.equal(sparse.to_dense().cpu(), dense)
    assert torch.equal(sparse.cpu().to_dense(), dense)
    module = nn.Module()
    module.register_buffer("heads", dense.to_sparse(), persistent=False)
    module.to(NAME)
    assert module.heads.device.type == NAME
    assert torch.equal(module.heads.to_dense().cpu(), dense)
    eye = torch.eye(3).to_sparse()
    ones = torch.arange(9, dtype=torch.float32).reshape(3, 3)
    assert torch.equal((eye.to(NAME) @ ones.to(NAME)).cpu(), eye @ ones)
    doubled = (eye.to(NAME) + eye.to(NAME)).coalesce()
    assert doubled.is_coalesced()
    assert torch.equal(doubled.values().cpu(), (eye + eye).coalesce().values())
    built = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2), device=NAME)
    assert torch.equal(built.to_dense().cpu(), torch.tensor([[0.0, 1.0], [2.0, 0.0]]))


def test_a_sparse_op_mps_lacks_fails_as_on_mps(simgpu):
    """No fallback for sparse tensors on MPS: the dispatcher's own error."""
    sparse = torch.eye(3).to_sparse().to(NAME)
    with pytest.raises(NotImplementedError, match="'aten::hspmm' with arguments from the 'Sparse"):
        torch.hspmm(sparse, torch.ones(3, 2, device=NAME))


def test_views_of_ordinary_tensors_under_inference_mode(simgpu):
    """Lightning validates and sentence-transformers encodes under ``inference_mode()``:
    a view of an ordinary tensor made there is an ordinary tensor, as on every device,
    and fresh results are inference tensors."""
    weight = torch.arange(9, dtype=torch.float32).reshape(3, 3)
    device_weight = weight.to(NAME)
    with torch.inference_mode():
        x = torch.ones(2, 3)
        out = nn.functional.linear(x.to(NAME), device_weight)
        view = device_weight.t()
        assert torch.equal(out.cpu(), nn.functional.linear(x, weight))
        assert out.is_inference()
        assert not view.is_inference()
        assert view._base is device_weight
    device_weight.add_(1)  # the view shares the version counter of its base
    assert view._version == device_weight._version == 1


def _lstm_run(device: str, dropout: float, seed_device: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.LSTM(4, 5, num_layers=2, dropout=dropout).to(device)
    x = torch.randn(6, 3, 4).to(device).requires_grad_()
    if seed_device:
        torch.manual_seed(7)  # every generator: the device's draws the dropout masks here
    out, (h, c) = model(x)
    (out.sum() + h.pow(2).sum() + c.sum()).backward()
    grads = [x.grad] + [p.grad for p in model.parameters()]
    return [t.detach().cpu() for t in (out, h, c, *grads)]


def test_lstm_runs_on_the_device_as_mps_runs_it(simgpu):
    """``lstm`` takes MPS's own kernel pair (``_lstm_mps``, ``lstm_mps_backward``), not the
    fused cell an out-of-tree device would take (MPS has none: a fallback at every call):
    outputs and gradients equal the CPU's, and with dropout the masks come from the device
    generator, which a CPU run seeded alike draws the same numbers from."""
    torch.manual_seed(0)
    model = nn.LSTM(4, 5, num_layers=2).to(NAME)
    out, _ = model(torch.randn(6, 3, 4).to(NAME).requires_grad_())
    assert type(out.grad_fn).__name__ == "LstmMpsBackward0"
    for cpu, dev in zip(_lstm_run("cpu", 0.0, False), _lstm_run(NAME, 0.0, False), strict=True):
        assert torch.equal(cpu, dev)
    for cpu, dev in zip(_lstm_run("cpu", 0.5, True), _lstm_run(NAME, 0.5, True), strict=True):
        assert torch.equal(cpu, dev)
    with torch.inference_mode():
        inference = model(torch.ones(2, 1, 4, device=NAME))[0]
    with torch.no_grad():
        plain = model(torch.ones(2, 1, 4, device=NAME))[0]
    assert torch.equal(inference.cpu(), plain.cpu())


mirror_in_parent(globals())
