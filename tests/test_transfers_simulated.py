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


@pytest.fixture(params=["mode", "entry-points"])
def accelerator(request):
    """The simulated accelerator, torchdevice on in each tier: the two must agree."""
    import torchdevice
    from torchdevice import Host
    from torchdevice.testing import register

    register(NAME)
    torchdevice.enable(host=Host.simulated(NAME), intercept=request.param)
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


def test_a_device_less_data_factory_keeps_a_device_tensor_what_it_is(accelerator):
    """``torch.as_tensor(t)``/``asarray(t)`` without a device return ``t`` itself natively
    (same device, same dtype), and ``torch.tensor(t)`` copies it on ``t``'s own device: a
    device tensor stays one (moving it to the device is itself), and the caller's tensor
    is left as it was, not marked as a host tensor."""
    x = torch.ones(3, device="cuda")
    for same in (torch.as_tensor(x), torch.asarray(x)):
        assert same is x
    assert x.cuda() is x
    copied = torch.tensor(x)
    assert copied.device == accelerator
    assert independent(copied, x)
    assert copied.cuda() is copied
    assert x.to("cuda") is x


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


def test_numpy_reads_host_tensors_through_array_and_wraps_back(accelerator):
    """NumPy reaches a tensor through ``__array__`` (``np.asarray``, ``np.array`` with a
    dtype, functions such as ``np.argsort`` that fall back to it): the values of the host
    copy, in a new array (device memory is not the array's). ``__array_wrap__`` puts a
    ufunc's result where the input is, standing for the host as the input does."""
    host = torch.arange(6.0, device="cuda").reshape(2, 3).cpu()
    assert host.device == accelerator
    array = np.asarray(host)
    np.testing.assert_array_equal(array, np.arange(6.0, dtype=np.float32).reshape(2, 3))
    # torch 2.13's __array__ and __array_wrap__ predate NumPy 2's signatures: NumPy warns
    # as it does for a native CPU tensor (the same calls, the same warnings).
    with pytest.warns(DeprecationWarning, match="__array__ implementation doesn't accept"):
        assert np.array(host, dtype=np.float64).dtype == np.float64
    assert np.asarray(host, dtype=np.int32).tolist() == [[0, 1, 2], [3, 4, 5]]
    array[0, 0] = 42.0  # a copy: the tensor keeps its value
    assert host[0, 0].item() == 0.0
    with pytest.warns(DeprecationWarning, match="__array_wrap__ must accept context"):
        order = np.argsort(-host[1])
    assert order.tolist() == [2, 1, 0]
    assert order.device == accelerator
    assert order.dtype == torch.int64
    with pytest.warns(DeprecationWarning, match="__array_wrap__ must accept context"):
        waves = np.sin(host)
    assert isinstance(waves, torch.Tensor)
    assert waves.device == accelerator
    torch.testing.assert_close(waves, torch.sin(host))
    torch.testing.assert_close(host + waves, host + torch.sin(host))  # mixes as host tensors
    assert waves.cpu() is waves  # stands for the host, as natively
    assert independent(waves.cuda(), waves)
    with pytest.warns(DeprecationWarning, match="__array_wrap__ must accept context"):
        promoted = np.add(host, np.ones((2, 3)))  # NumPy's float64: the float64 rule
    assert (promoted.device, promoted.dtype) == (accelerator, torch.float32)
    assert promoted.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        np.asarray(torch.ones(2, requires_grad=True).cpu())
    native = torch.from_numpy(np.ones(2, dtype=np.float32))  # really on the CPU: shared
    np.asarray(native)[0] = 5.0
    assert native.tolist() == [5.0, 1.0]


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


# -- what real programs do on a Mac (issue 26) -------------------------------------------


def test_every_conversion_to_float64_follows_the_dtype_rule(accelerator):
    """MPS has no float64: ``.double()``, ``.type(...)``, an op's ``dtype=`` and a
    ``*_like``/``new_*`` without a device give float32 on the device, with the values
    the CPU computes in float64 rounded to float32, and a conversion copies as natively."""
    import torch.nn.functional as F

    host = torch.tensor([0.1, 0.2, 0.7])
    x = host.to("cuda")
    converted = {
        "double": x.double(),
        "type(dtype)": x.type(torch.float64),
        "type(cuda class)": host.type(torch.cuda.DoubleTensor),
        "type(cuda name)": host.type("torch.cuda.DoubleTensor"),
        "to(dtype)": x.to(torch.float64),
        "sum": x.sum(dtype=torch.float64),
        "cumsum": x.cumsum(0, dtype=torch.float64),
        "softmax": F.softmax(x, 0, dtype=torch.float64),
        "zeros_like": torch.zeros_like(x, dtype=torch.float64),
        "new_ones": x.new_ones(3, dtype=torch.float64),
    }
    expected = {
        "double": host.double(),
        "type(dtype)": host.double(),
        "type(cuda class)": host.double(),
        "type(cuda name)": host.double(),
        "to(dtype)": host.double(),
        "sum": host.sum(dtype=torch.float64),
        "cumsum": host.cumsum(0, dtype=torch.float64),
        "softmax": F.softmax(host, 0, dtype=torch.float64),
        "zeros_like": torch.zeros(3, dtype=torch.float64),
        "new_ones": torch.ones(3, dtype=torch.float64),
    }
    for name, result in converted.items():
        assert (result.device, result.dtype) == (accelerator, torch.float32), name
        torch.testing.assert_close(result.cpu(), expected[name].float(), msg=name)
    for copy in (converted["double"], converted["to(dtype)"], converted["type(dtype)"]):
        assert independent(copy, x)  # float32 already, still a new tensor


def test_an_int_device_is_a_cuda_index_for_modules_too(accelerator):
    """DDP scripts: ``model.to(rank)``; torch reads the int as an index of the current
    accelerator (``simgpu:1``, past its one device), the policy as the CUDA index it is."""
    model = nn.Linear(2, 2)
    assert model.to(1) is model
    assert model.weight.device == accelerator
    assert torch.zeros(1, device=1).device == accelerator
    assert torch.device(1) == torch.device("cuda", 1)  # read as written


def test_a_device_read_off_a_cpu_tensor_places_where_that_tensor_is(accelerator):
    """whisper: ``window.to(audio.device)`` of ``torch.from_numpy`` audio (which stays on
    the CPU: it shares the array's memory) must land where the audio is."""
    audio = torch.from_numpy(np.ones(400, dtype=np.float32))
    window = torch.hann_window(400)
    assert window.device == accelerator
    assert audio.device == torch.device("cpu")
    assert window.to(audio.device).device.type == "cpu"
    assert torch.zeros(2, device=audio.device).device.type == "cpu"
    module = nn.Linear(2, 2).to(audio.device)
    assert module.weight.device.type == "cpu"
    stft = torch.stft(audio, 400, 160, window=window.to(audio.device), return_complex=True)
    assert stft.device.type == "cpu"
    assert torch.zeros(1, device=torch.device("cpu")).device == accelerator  # as written


def test_a_cpu_generator_initialises_device_parameters_with_the_cpu_draws(accelerator):
    """llm.c: ``nn.init.normal_(weight, generator=torch.Generator())`` on a device
    parameter draws the numbers a native run draws, into the parameter itself."""
    expected = torch.empty(4, 3).normal_(0.0, 0.02, generator=torch.Generator().manual_seed(42))
    layer = nn.Linear(3, 4)
    weight = layer.weight
    assert weight.device == accelerator
    result = nn.init.normal_(
        layer.weight, mean=0.0, std=0.02, generator=torch.Generator().manual_seed(42)
    )
    assert result is weight
    assert isinstance(layer.weight, nn.Parameter)
    assert layer.weight.device == accelerator
    assert torch.equal(layer.weight.detach().cpu(), expected)
    g = torch.Generator().manual_seed(1)
    nn.init.trunc_normal_(layer.weight, generator=g)
    nn.init.kaiming_uniform_(layer.weight, generator=g)


def test_rng_states_the_code_holds_on_the_host_restore_generators(accelerator):
    """Accelerate's ``synchronize_rng_states``: a state broadcast on the device comes back
    with ``.cpu()``, which on an accelerator host lives on the device; every setter takes
    it, as on the code's own machine. A state that stands for device memory is refused
    as natively."""
    state = torch.get_rng_state()
    torch.set_rng_state(state.to("cuda").cpu())
    assert torch.equal(torch.get_rng_state(), state)
    device_state = torch.cuda.get_rng_state()
    torch.cuda.set_rng_state(device_state.cuda().cpu())
    assert torch.equal(torch.cuda.get_rng_state(), device_state)
    generator = torch.Generator()
    generator.manual_seed(3)
    first = torch.rand(2, generator=generator, device="cpu:-1")
    generator.manual_seed(3)
    generator.set_state(generator.get_state().to("cuda").cpu())
    assert torch.equal(torch.rand(2, generator=generator, device="cpu:-1"), first)
    torch.zeros(0, device="cpu:-1")  # the override is off again
    with pytest.raises(TypeError, match=r"RNG state must be a torch\.ByteTensor"):
        generator.set_state(generator.get_state().to("cuda"))


def test_torch_mps_answers_from_the_device_as_on_a_mac(accelerator):
    """MPS-first code on the simulated MPS host: MPS is there for every program, and
    ``torch.mps`` answers from the device (the real module has no backend on Linux)."""
    assert torch.backends.mps.is_available()
    assert torch.backends.mps.is_built()
    x = torch.ones(1024, device="mps")
    torch.mps.synchronize()
    assert x.device == accelerator
    assert torch.mps.current_allocated_memory() >= x.untyped_storage().nbytes()
    torch.mps.manual_seed(0)
    first = torch.rand(3, device="mps")
    torch.mps.manual_seed(0)
    assert torch.equal(torch.rand(3, device="mps").cpu(), first.cpu())


def test_a_list_torch_reads_as_float64_takes_the_dtype_rule(accelerator):
    """NumPy float64 scalars in a list (a NumPy schedule's entries) make torch infer float64,
    which MPS rejects; the float64 rule applies as to float64 data, placed or not."""
    entries = [np.float64(0.1), np.float64(0.25), 0.5]
    for made in (torch.tensor(entries), torch.tensor(entries, device="cuda")):
        assert (made.device, made.dtype) == (accelerator, torch.float32)
        assert torch.equal(made.cpu(), torch.tensor(entries, dtype=torch.float32, device="cpu:-1"))
        torch.zeros(0, device="cpu:-1")  # the override off again
    with pytest.raises(TypeError, match="unexpected"):  # other TypeErrors are torch's own
        torch.tensor(entries, unexpected=1)


def test_a_device_tensor_put_in_shared_memory_refuses_to_travel_as_a_copy(accelerator):
    """Hogwild: ``share_memory_()`` says other processes will write into the tensor, which
    a copy (all that crosses a process boundary from a device without IPC) cannot carry
    back; sending it raises. Tensors not put in shared memory still travel by value."""
    from multiprocessing.reduction import ForkingPickler

    from torchdevice.errors import UnsupportedFeatureError

    model = nn.Linear(2, 2).cuda()
    ForkingPickler.dumps(model.weight)  # by value
    model.share_memory()
    assert model.weight.device == accelerator
    with pytest.raises(UnsupportedFeatureError, match=r"between processes \(CUDA IPC") as error:
        ForkingPickler.dumps(model.weight)
    assert error.value.feature.startswith("Sharing device memory between processes")
    with pytest.raises(UnsupportedFeatureError):
        ForkingPickler.dumps(torch.ones(2, device="cuda").share_memory_())


mirror_in_parent(globals())
