"""Transfers behave as on the device the code was written for (docs/policy.md, "Transfers").

On a GPU: a transfer to where a tensor already is returns that tensor (a Parameter stays
that Parameter), and a host<->device transfer returns an independent copy. Under
redirection both kinds of tensor can live on one real device, so each form is checked in
both directions for identity, for memory not being shared, and for values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import torchdevice
from torchdevice import Host

CPU = torch.device("cpu")


@pytest.fixture
def cpu_host():
    torchdevice.enable(host=Host.cpu())


def independent(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two tensors with equal values that share no memory: editing one leaves the other."""
    if a is b or a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr():
        return False
    before = b.clone()
    torch.testing.assert_close(a.to(b.dtype), b)
    with torch.no_grad():
        a.add_(1)
    return torch.equal(b, before)


TO_HOST = {
    ".cpu()": lambda t: t.cpu(),
    '.to("cpu")': lambda t: t.to("cpu"),
    '.to(device="cpu")': lambda t: t.to(device="cpu"),
    '.to(torch.device("cpu"))': lambda t: t.to(torch.device("cpu")),
    '.to("cpu", float32)': lambda t: t.to("cpu", torch.float32),
    '.to("cpu", non_blocking=True)': lambda t: t.to("cpu", non_blocking=True),
}
TO_DEVICE = {
    ".cuda()": lambda t: t.cuda(),
    ".cuda(0)": lambda t: t.cuda(0),
    '.to("cuda")': lambda t: t.to("cuda"),
    '.to("cuda:0")': lambda t: t.to("cuda:0"),
    ".to(0)": lambda t: t.to(0),
    '.to(device="cuda")': lambda t: t.to(device="cuda"),
    '.to(torch.device("cuda"))': lambda t: t.to(torch.device("cuda")),
    '.to("mps")': lambda t: t.to("mps"),
    '.type("torch.cuda.FloatTensor")': lambda t: t.type("torch.cuda.FloatTensor"),
}
DEVICE_FACTORIES = {
    "ones": lambda: torch.ones(4, device="cuda"),
    "arange": lambda: torch.arange(4.0, device="cuda"),
    "tensor": lambda: torch.tensor([0.0, 1.0, 2.0, 3.0], device="cuda"),
    "as_tensor": lambda: torch.as_tensor(np.arange(4.0, dtype=np.float32), device="cuda"),
    "moved": lambda: torch.arange(4.0).cuda(),
    "zeros_like": lambda: torch.zeros_like(torch.ones(4), device="cuda"),
    "new_ones": lambda: torch.ones(2).new_ones(4, device="cuda"),
}


@pytest.mark.parametrize("make", DEVICE_FACTORIES.values(), ids=DEVICE_FACTORIES)
@pytest.mark.parametrize("transfer", TO_DEVICE.values(), ids=TO_DEVICE)
def test_device_tensor_to_the_device_is_itself(cpu_host, make, transfer):
    x = make()
    assert transfer(x) is x


@pytest.mark.parametrize("make", DEVICE_FACTORIES.values(), ids=DEVICE_FACTORIES)
@pytest.mark.parametrize("transfer", TO_HOST.values(), ids=TO_HOST)
def test_device_tensor_to_the_host_is_an_independent_copy(cpu_host, make, transfer):
    x = make()
    host = transfer(x)
    assert host.device == CPU
    assert independent(host, x)
    assert host.cpu() is host  # the copy is on the host: moving it there again is itself


@pytest.mark.parametrize("transfer", TO_DEVICE.values(), ids=TO_DEVICE)
def test_host_tensor_to_the_device_is_an_independent_copy(cpu_host, transfer):
    host = torch.arange(4.0)
    device = transfer(host)
    assert independent(device, host)
    assert device.cuda() is device


@pytest.mark.parametrize("transfer", TO_HOST.values(), ids=TO_HOST)
def test_host_tensor_to_the_host_is_itself(cpu_host, transfer):
    host = torch.arange(4.0)
    assert transfer(host) is host


def test_numpy_of_a_device_tensor_through_cpu_is_a_copy(cpu_host):
    x = torch.arange(4.0, device="cuda")
    array = x.cpu().numpy()
    array[:] = -1
    torch.testing.assert_close(x, torch.arange(4.0))


@pytest.mark.parametrize(
    "factory",
    [torch.as_tensor, torch.asarray, torch.tensor],
    ids=["as_tensor", "asarray", "tensor"],
)
def test_device_tensor_from_a_numpy_array_is_a_copy(cpu_host, factory):
    array = np.arange(4, dtype=np.float32)
    x = factory(array, device="cuda")
    array[:] = -1
    torch.testing.assert_close(x, torch.arange(4.0))
    assert x.to("cuda") is x
    assert independent(x.cpu(), x)


def test_as_tensor_and_asarray_share_what_is_already_on_the_device(cpu_host):
    x = torch.arange(4.0, device="cuda")
    assert torch.as_tensor(x, device="cuda") is x
    assert torch.asarray(x, device="cuda").data_ptr() == x.data_ptr()
    host = torch.arange(4.0)
    assert independent(torch.as_tensor(host, device="cuda"), host)
    assert independent(torch.asarray(host, device="cuda"), host)
    assert torch.asarray(host, device="cpu").data_ptr() == host.data_ptr()


def test_views_stand_for_what_their_base_stands_for(cpu_host):
    x = torch.arange(6.0, device="cuda")
    view = x[2:5]
    assert view.cuda() is view
    host = view.cpu()
    assert independent(host, view)


def test_copy_true_gives_a_new_device_tensor(cpu_host):
    x = torch.arange(3.0, device="cuda")
    copy = x.to("cuda", copy=True)
    assert independent(copy, x)
    assert copy.to("cuda") is copy


def test_parameter_on_the_device_stays_that_parameter(cpu_host):
    param = nn.Parameter(torch.ones(3, device="cuda"))
    for transfer in TO_DEVICE.values():
        assert transfer(param) is param
    moved = nn.Parameter(torch.ones(3)).cuda()  # host -> device: a new tensor, natively too
    assert not isinstance(moved, nn.Parameter)


def test_module_cuda_makes_its_parameters_device_tensors(cpu_host):
    model = nn.Linear(3, 2)
    weight = model.weight
    model.cuda()
    assert model.weight is weight  # Module.to swaps .data and keeps the Parameter
    assert model.weight.to("cuda") is weight
    assert model.weight.cuda() is weight
    state = model.state_dict()
    for tensor in state.values():
        assert tensor.to("cuda") is tensor
        assert independent(tensor.cpu(), tensor)
    assert model.cuda() is model
    assert model.weight is weight


@pytest.mark.parametrize(
    "to_device",
    [
        lambda m: m.cuda(),
        lambda m: m.to("cuda"),
        lambda m: m.to(torch.device("cuda")),
        lambda m: m.to(device=torch.device("cuda", 0)),
        lambda m: m.to(0),
        lambda m: m.to("cuda", torch.float32),
    ],
    ids=[".cuda()", '.to("cuda")', ".to(torch.device)", ".to(device=)", ".to(0)", ".to(dtype)"],
)
def test_every_module_move_makes_device_parameters(cpu_host, to_device):
    model = nn.Linear(3, 2)
    host_weight = model.weight.detach()
    weight = model.weight
    assert to_device(model) is model
    assert model.weight is weight
    assert independent(model.weight.detach(), host_weight)
    assert model.weight.to("cuda") is weight
    assert to_device(model).weight is weight


def test_device_objects_read_as_written_and_keep_the_devices_semantics(cpu_host):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert device.type == "cuda"  # as written: docs/policy.md, device objects
    x = torch.ones(3, device=device)
    assert x.device == CPU  # tensors report where they really are
    assert x.to(device) is x
    assert x.cuda(device) is x
    assert torch.device(device) is device
    host = torch.ones(3)
    assert independent(host.to(device), host)
    assert independent(x.to(torch.device("cpu")), x)


def test_tensors_report_their_real_device_so_torch_and_libraries_take_cpu_paths(cpu_host):
    """What reporting the device a tensor stands for would break (docs/policy.md, the
    evaluated rule): torch's code picks CUDA-only paths from a tensor's device."""
    import warnings

    x = torch.randn(3, 1, 4, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "PyTorch was compiled without cuDNN" would raise
        lstm = nn.LSTM(4, 4).cuda()  # moving it flattens its weights for cuDNN
        out, _ = lstm(x)
    assert out.device == CPU
    linear = nn.Linear(4, 2).cuda()
    # a forward's output (an op result) and the parameters report the same device
    assert linear(x).device == next(linear.parameters()).device == CPU


def test_an_mps_programs_generate_takes_the_path_of_its_real_device():
    """Transformers defers its stop check on an "mps" input with ``torch.Event``, which a
    CPU build cannot make: the inputs report where they are, and ``generate`` works."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torchdevice.enable(host=Host.cpu(), written_for="mps")
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32)
    model = GPT2LMHeadModel(config).to("mps").eval()
    ids = torch.randint(1, 50, (2, 4), device="mps")
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False, pad_token_id=0
    )
    assert out.shape == (2, 7)
    assert torch.equal(out[:, :4], ids)
    assert out.device == model.device == ids.device


def test_module_cpu_after_cuda_copies_back(cpu_host):
    model = nn.Linear(3, 2).cuda()
    device_weight = model.weight.detach()
    model.cpu()
    assert independent(model.weight.detach(), device_weight)


def test_meta_keeps_torchs_semantics(cpu_host):
    x = torch.ones(2, device="cuda")
    meta = x.to("meta")
    assert meta.device.type == "meta"
    assert meta.to("meta") is meta


def test_accelerate_set_module_tensor_to_device_keeps_parameters(cpu_host):
    from accelerate.utils import set_module_tensor_to_device

    model = nn.Linear(3, 2)
    model.cuda()
    weight = model.weight
    set_module_tensor_to_device(model, "weight", "cuda")
    # The cost of the device-object rule (docs/policy.md): Accelerate compares
    # torch.device("cuda") with the weight's real device, finds them different and wraps
    # the same storage in a new Parameter, where a GPU keeps the Parameter itself.
    assert isinstance(model.weight, nn.Parameter)
    assert model.weight.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()
    value = torch.arange(6.0).reshape(2, 3)
    set_module_tensor_to_device(model, "weight", 0, value=value)
    assert isinstance(model.weight, nn.Parameter)
    torch.testing.assert_close(model.weight.detach(), value)
    assert independent(model.weight.detach(), value)


@pytest.mark.slow
@pytest.mark.parametrize("offload", ["cpu", "disk"])
def test_from_pretrained_device_map_auto_with_offload(cpu_host, offload, tmp_path):
    """Transformers' test_cpu_offload / test_disk_offload, on a tiny GPT-2 built from config."""
    from accelerate.utils import compute_module_sizes
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=32, n_head=2, vocab_size=100, n_positions=32)
    model = GPT2LMHeadModel(config).eval().to("cuda")
    ids = torch.randint(0, 100, (1, 8), device="cuda")
    with torch.no_grad():
        reference = model(ids).logits
    size = compute_module_sizes(model)[""]
    model.cpu().save_pretrained(tmp_path / "model")
    host_memory = size * 2 if offload == "cpu" else int(size * 0.3)
    loaded = GPT2LMHeadModel.from_pretrained(
        tmp_path / "model",
        device_map="auto",
        max_memory={0: int(size * 0.5), "cpu": host_memory},
        offload_folder=tmp_path / "offload",
    )
    placed = set(loaded.hf_device_map.values())
    assert 0 in placed
    assert offload in placed
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, reference)
