"""The function mode on this (real, CPU-only) host: every device argument is rewritten."""

from __future__ import annotations

import io
import logging
import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._device import _device_constructors

import torchdevice
from torchdevice.host import Host
from torchdevice.redirecting import handlers, intercepts
from torchdevice.redirecting.intercepts import build_table
from torchdevice.reporting.recorder import api_name

CPU = torch.device("cpu")
NATIVE_ACCELERATOR = torch.cuda.is_available() or torch.backends.mps.is_available()
REQUESTS = ["cuda", "cuda:0", "cuda:1", "mps", "mps:0", torch.device("cuda", 3), 0, 1]


@pytest.fixture
def enabled():
    torchdevice.enable(host="cpu")
    yield
    torchdevice.disable()


def _qtensor() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # quantized dtypes are deprecated
        return torch.quantize_per_tensor(torch.ones(2), 0.5, 0, torch.quint8)


def _compressed(func, plain: list[int], layout=None):
    """A 2x2 compressed sparse tensor (CSR/CSC shaped; BSR/BSC with 1x1 blocks)."""
    blocks = layout in (None, torch.sparse_bsr, torch.sparse_bsc) and func not in (
        torch.sparse_csr_tensor,
        torch.sparse_csc_tensor,
    )
    values = torch.tensor([[[1.0]], [[2.0]]]) if blocks else torch.tensor([1.0, 2.0])
    extra = {} if layout is None else {"layout": layout}
    return lambda d: func(
        torch.tensor([0, 1, 2]),
        torch.tensor(plain),
        values,
        (2, 2),
        device=d,
        check_invariants=True,
        **extra,
    )


# How to call each factory with ``device=d``. Only arguments live here: which functions are
# tested comes from torch (``_device_constructors()``) and from the table's factory entries,
# and a factory without a builder fails its test rather than going untested.
BUILDERS = {
    torch.empty: lambda d: torch.empty(2, 3, device=d),
    torch.empty_permuted: lambda d: torch.empty_permuted((2, 3), (1, 0), device=d),
    torch.empty_strided: lambda d: torch.empty_strided((2, 3), (1, 2), device=d),
    torch.empty_quantized: lambda d: torch.empty_quantized([3], _qtensor(), device=d),
    torch.ones: lambda d: torch.ones(2, device=d),
    torch.zeros: lambda d: torch.zeros(2, device=d),
    torch.full: lambda d: torch.full((2,), 7.0, device=d),
    torch.arange: lambda d: torch.arange(5, device=d),
    torch.range: lambda d: torch.range(0, 4, device=d),
    torch.linspace: lambda d: torch.linspace(0, 1, 5, device=d),
    torch.logspace: lambda d: torch.logspace(0, 1, 5, device=d),
    torch.eye: lambda d: torch.eye(3, device=d),
    torch.rand: lambda d: torch.rand(2, device=d),
    torch.randn: lambda d: torch.randn(2, device=d),
    torch.randint: lambda d: torch.randint(0, 5, (2,), device=d),
    torch.randperm: lambda d: torch.randperm(5, device=d),
    torch.normal: lambda d: torch.normal(1.5, 0.5, (3,), device=d),
    torch.bartlett_window: lambda d: torch.bartlett_window(5, device=d),
    torch.blackman_window: lambda d: torch.blackman_window(5, device=d),
    torch.hamming_window: lambda d: torch.hamming_window(5, device=d),
    torch.hann_window: lambda d: torch.hann_window(5, device=d),
    torch.kaiser_window: lambda d: torch.kaiser_window(5, device=d),
    torch.fft.fftfreq: lambda d: torch.fft.fftfreq(5, device=d),
    torch.fft.rfftfreq: lambda d: torch.fft.rfftfreq(5, device=d),
    torch.tensor: lambda d: torch.tensor([1.0, 2.0], device=d),
    torch.as_tensor: lambda d: torch.as_tensor([1.0, 2.0], device=d),
    torch.asarray: lambda d: torch.asarray([1.0, 2.0], device=d),
    torch.scalar_tensor: lambda d: torch.scalar_tensor(3.0, device=d),
    torch.tril_indices: lambda d: torch.tril_indices(3, 3, device=d),
    torch.triu_indices: lambda d: torch.triu_indices(3, 3, device=d),
    torch.sparse_coo_tensor: lambda d: torch.sparse_coo_tensor(
        [[0, 1]], [1.0, 2.0], (3,), device=d, check_invariants=True
    ),
    torch.sparse_csr_tensor: _compressed(torch.sparse_csr_tensor, [0, 1]),
    torch.sparse_csc_tensor: _compressed(torch.sparse_csc_tensor, [0, 1]),
    torch.sparse_bsr_tensor: _compressed(torch.sparse_bsr_tensor, [0, 1]),
    torch.sparse_bsc_tensor: _compressed(torch.sparse_bsc_tensor, [0, 1]),
    torch.sparse_compressed_tensor: _compressed(
        torch.sparse_compressed_tensor, [0, 1], torch.sparse_csr
    ),
    torch.nested.nested_tensor: lambda d: torch.nested.nested_tensor(
        [torch.arange(2.0), torch.arange(3.0)], device=d
    ),
    torch.zeros_like: lambda d: torch.zeros_like(torch.ones(2), device=d),
    torch.ones_like: lambda d: torch.ones_like(torch.ones(2), device=d),
    torch.full_like: lambda d: torch.full_like(torch.ones(2), 4.0, device=d),
    torch.empty_like: lambda d: torch.empty_like(torch.ones(2), device=d),
    torch.rand_like: lambda d: torch.rand_like(torch.ones(2), device=d),
    torch.randn_like: lambda d: torch.randn_like(torch.ones(2), device=d),
    torch.randint_like: lambda d: torch.randint_like(torch.ones(2), 5, device=d),
    torch.Tensor.new_zeros: lambda d: torch.ones(2).new_zeros(3, device=d),
    torch.Tensor.new_ones: lambda d: torch.ones(2).new_ones(3, device=d),
    torch.Tensor.new_full: lambda d: torch.ones(2).new_full((3,), 2.0, device=d),
    torch.Tensor.new_empty: lambda d: torch.ones(2).new_empty(3, device=d),
    torch.Tensor.new_empty_strided: lambda d: torch.ones(2).new_empty_strided(
        (2, 3), (1, 2), device=d
    ),
    torch.Tensor.new_tensor: lambda d: torch.ones(2).new_tensor([1.0], device=d),
}

_FACTORY_HANDLERS = (
    handlers.factory,
    handlers.explicit_factory,
    handlers.constructor_overload,
)
#: torch's constructors, and every other function the table handles as a factory.
FACTORIES = sorted(
    set(_device_constructors())
    | {f for f, handler in build_table(Host.cpu()).items() if handler in _FACTORY_HANDLERS},
    key=api_name,
)


def _same_tensor(result: torch.Tensor, reference: torch.Tensor, values: bool) -> None:
    """Values equal, or for uninitialised memory (``values=False``) everything else."""
    if result.is_nested:
        assert reference.is_nested
        for got, want in zip(result.unbind(), reference.unbind(), strict=True):
            _same_tensor(got, want, values)
        return
    assert (result.dtype, result.shape, result.layout) == (
        reference.dtype,
        reference.shape,
        reference.layout,
    )
    if result.is_quantized:
        assert (result.q_scale(), result.q_zero_point()) == (
            reference.q_scale(),
            reference.q_zero_point(),
        )
        result, reference = result.int_repr(), reference.int_repr()
    if result.layout == torch.strided:
        assert result.stride() == reference.stride()
    if values:
        torch.testing.assert_close(result, reference, rtol=0, atol=0)


@pytest.mark.parametrize("func", FACTORIES, ids=api_name)
@pytest.mark.parametrize("request_", ["cuda", "cuda:1", "mps", 0], ids=str)
def test_every_factory_lands_on_the_cpu_with_native_values(func, request_):
    assert func in BUILDERS, f"no argument builder for {api_name(func)}: add one to BUILDERS"
    build = BUILDERS[func]
    if not NATIVE_ACCELERATOR:
        with pytest.raises((RuntimeError, AssertionError, NotImplementedError)):
            build(request_)  # natively this host cannot make the tensor
    torch.manual_seed(0)
    with torchdevice.redirect(host="cpu"):
        result = build(request_)
    torch.manual_seed(0)
    reference = build("cpu")
    assert result.device == CPU
    uninitialised = api_name(func).split(".")[-1].startswith(("empty", "new_empty"))
    _same_tensor(result, reference, values=not uninitialised)


def test_factory_builders_name_only_factories():
    assert set(BUILDERS) == set(FACTORIES), "a builder for a function that is no factory"


def test_ops_that_take_no_device_stay_off_the_table():
    """The fast path: a call missing from the table is one dict miss."""
    table = build_table(Host.cpu())
    for op in (torch.add, torch.nn.functional.linear, torch.matmul, torch.Tensor.add_):
        assert op not in table


_NAMESPACES = {
    "torch": torch,
    "torch.Tensor": torch.Tensor,
    "torch.fft": torch.fft,
    "torch.linalg": torch.linalg,
    "torch.special": torch.special,
}


def _public_functions_taking_a_device() -> dict[str, object]:
    """Every public torch function one of whose ATen overloads takes ``device``."""
    found: dict[str, object] = {}
    for schema in torch._C._jit_get_all_schemas():
        namespace, _, name = schema.name.partition("::")
        if namespace != "aten" or name.startswith("_"):
            continue
        if not any(argument.name == "device" for argument in schema.arguments):
            continue
        named = {}
        for prefix, module in _NAMESPACES.items():
            short = name.removeprefix(prefix.removeprefix("torch.") + "_")  # fft_fftfreq
            if hasattr(module, short):
                named[f"{prefix}.{short}"] = getattr(module, short)
        assert named, f"aten::{name} takes a device but is not found in torch"
        found.update(named)
    return found


def test_every_function_whose_schema_takes_a_device_is_intercepted_or_left_out_for_a_reason():
    """The class of ``torch.normal(0., 1., size, device=...)``: found from the schemas."""
    table = build_table(Host.cpu())
    functions = _public_functions_taking_a_device()
    assert {"torch.zeros", "torch.normal", "torch.Tensor.new_zeros"} <= set(functions)
    missing = {name for name, f in functions.items() if f not in table} - set(intercepts.LEFT_OUT)
    assert missing == set(), "takes a device, neither intercepted nor in intercepts.LEFT_OUT"
    assert set(intercepts.LEFT_OUT) <= set(functions), "LEFT_OUT names a function no schema has"
    assert not {functions[name] for name in intercepts.LEFT_OUT} & set(table)


def test_normal_follows_its_tensors_and_constructs_without_them(enabled):
    means = torch.arange(4.0)
    out = torch.empty(4)
    calls = [
        lambda: torch.normal(means, 0.5),
        lambda: torch.normal(2.0, torch.full((4,), 0.5)),
        lambda: torch.normal(means, torch.ones(4)),
        lambda: torch.normal(0.0, 1.0, (4,), out=out),
        lambda: torch.normal(0.0, 1.0, (4,)),
        lambda: torch.normal(0.0, 1.0, (4,), device="cuda", dtype=torch.float64),
        lambda: torch.normal(0.0, 1.0, (4,), generator=torch.Generator("cuda").manual_seed(3)),
    ]
    redirected = []
    for call in calls:
        torch.manual_seed(7)
        redirected.append(call())
    torchdevice.disable()
    for call, got in zip(calls[:-2], redirected, strict=False):
        torch.manual_seed(7)
        torch.testing.assert_close(got, call(), rtol=0, atol=0)
        assert got.device == CPU
    assert redirected[3] is out
    torch.manual_seed(7)
    want = torch.normal(0.0, 1.0, (4,), dtype=torch.float64)
    torch.testing.assert_close(redirected[-2], want, rtol=0, atol=0)
    want = torch.normal(0.0, 1.0, (4,), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(redirected[-1], want, rtol=0, atol=0)


@pytest.mark.parametrize("request_", REQUESTS, ids=str)
def test_tensor_to_device_forms(enabled, request_):
    t = torch.arange(3.0)
    for moved in (t.to(request_), t.to(device=request_), t.to(request_, torch.float16)):
        assert moved.device == CPU
    assert t.to(request_, torch.float16).dtype == torch.float16


def test_to_without_device_is_untouched(enabled):
    t = torch.arange(3.0)
    assert t.to(torch.float64).dtype == torch.float64
    assert t.to(torch.zeros(1, dtype=torch.int32)).dtype == torch.int32
    assert t.to("cpu") is t  # a CPU request on the CPU is not a redirect: no copy


def test_redirected_moves_never_alias(enabled):
    array = np.arange(4, dtype=np.float32)
    source = torch.from_numpy(array)
    for moved in (source.cuda(), source.to("cuda"), source.cuda(0), source.to("mps")):
        assert moved.device == CPU
        moved.add_(100)
        np.testing.assert_array_equal(array, np.arange(4, dtype=np.float32))
        assert moved.data_ptr() != source.data_ptr()


def test_cuda_keeps_autograd(enabled):
    x = torch.ones(3, requires_grad=True)
    y = (x.cuda() * 2).sum()
    y.backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_cpu_is_native_on_a_cpu_host(enabled):
    t = torch.ones(2)
    assert t.cpu() is t


def test_type_with_cuda_tensor_type_string(enabled):
    t = torch.tensor([1, 2])
    moved = t.type("torch.cuda.FloatTensor")
    assert moved.dtype == torch.float32
    assert moved.device == CPU
    assert t.type("torch.DoubleTensor").dtype == torch.float64


def test_module_to_and_cuda(enabled):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    reference = [p.detach().clone() for p in model.state_dict().values()]
    for moved in (model.to("cuda"), model.cuda(), model.cuda(1), model.to(torch.device("mps"))):
        assert moved is model
        states = list(model.state_dict().values())
        assert all(s.device == CPU for s in states)
        for got, want in zip(states, reference, strict=True):
            torch.testing.assert_close(got, want)
    out = model.to("cuda", torch.float64)(torch.randn(5, 3, dtype=torch.float64, device="cuda"))
    assert out.dtype == torch.float64


def test_optimizer_after_module_cuda(enabled):
    model = nn.Linear(2, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    model(torch.ones(4, 2, device="cuda")).sum().backward()
    optimizer.step()
    torch.testing.assert_close(model.weight, before - 0.1 * 4, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("make", "written"),
    [
        (lambda: torch.device("cuda"), "cuda"),
        (lambda: torch.device("cuda", 1), "cuda:1"),
        (lambda: torch.device("cuda", index=0), "cuda:0"),
        (lambda: torch.device(type="cuda", index=1), "cuda:1"),
        (lambda: torch.device(type="cuda"), "cuda"),
        (lambda: torch.device("cuda:1"), "cuda:1"),
        (lambda: torch.device(0), "cuda:0"),
        (lambda: torch.device("mps"), "mps"),
        (lambda: torch.device(torch.device("cuda", 2)), "cuda:2"),
        (lambda: torch.device("meta"), "meta"),
        (lambda: torch.device(type="meta"), "meta"),
    ],
)
def test_a_device_object_reads_as_written_and_is_placed_where_used(enabled, make, written):
    """The device-object rule (docs/policy.md): ``torch.device("cuda")`` reads "cuda",
    a real ``torch.device``; what uses it lands where the policy says."""
    device = make()
    assert type(device) is torch.device
    assert str(device) == written
    if device.type == "meta":
        assert torch.ones(1, device=device).device.type == "meta"
        return
    assert torch.ones(1, device=device).device == CPU
    assert torch.ones(1).to(device).device == CPU
    assert nn.Linear(1, 1).to(device).weight.device == CPU


def test_malformed_device_objects_raise_as_torch_does(enabled):
    with pytest.raises(RuntimeError, match="Invalid device string"):
        torch.device("cuda:x")
    with pytest.raises(RuntimeError):
        torch.device("cpu:-2")
    with pytest.raises(RuntimeError, match="must not be negative"):
        torch.device("cpu", -1)  # as torch 2.13 itself
    assert torch.device("cpu:-1") == CPU  # the override, which torch cannot parse


def test_cpu_minus_one_works_everywhere_and_toggles(enabled):
    runtime = torchdevice.activation.current_runtime()
    assert runtime is not None
    assert not runtime.state.cpu_override
    assert torch.ones(2).to("cpu:-1").device == CPU
    assert runtime.state.cpu_override
    assert torch.zeros(1, device="cpu:-1").device == CPU
    assert not runtime.state.cpu_override
    torchdevice.set_cpu_override(True)
    assert runtime.state.cpu_override


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ("cuda:abc", RuntimeError, "Invalid device string: 'cuda:abc'"),
        ("gpu", RuntimeError, "device type at start of device string: gpu"),
        ("", RuntimeError, "Device string must not be empty"),
        ("cpu:-2", RuntimeError, "Invalid device string: 'cpu:-2'"),
        (1.5, TypeError, "float"),
        ([1], TypeError, "list"),
    ],
)
def test_bad_requests_raise_like_torch_and_leave_torch_working(enabled, bad, error, message):
    for call in (
        lambda: torch.zeros(2, device=bad),
        lambda: torch.ones(2).to(device=bad),
        lambda: torch.device(bad),
    ):
        with pytest.raises(error) as info:
            call()
        assert message in str(info.value)
    assert torchdevice.is_enabled()
    assert torch.zeros(2, device="cuda").device == CPU
    torchdevice.disable()
    assert torch.zeros(2).device == CPU


def test_implicit_factories_stay_on_the_cpu_host(enabled):
    assert torch.zeros(2).device == CPU
    assert nn.Linear(2, 2).weight.device == CPU


def test_host_reads_keep_working(enabled, tmp_path):
    t = torch.arange(4.0, device="cuda")
    assert t.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert t[1].item() == 1.0
    assert "tensor([0., 1., 2., 3.])" in repr(t)
    torch.save(t, tmp_path / "t.pt")
    torch.testing.assert_close(torch.load(tmp_path / "t.pt"), t)


def test_pin_memory_without_cuda_gives_an_unpinned_copy(enabled):
    t = torch.ones(3)
    pinned = t.pin_memory()
    assert not pinned.is_pinned()
    assert pinned.data_ptr() != t.data_ptr()
    torch.testing.assert_close(pinned, t)
    assert torch.ones(2, device="cuda", pin_memory=True).device == CPU


def test_generator_device_and_isinstance(enabled):
    g = torch.Generator(device="cuda")
    assert g.device == CPU
    assert isinstance(g, torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    g.manual_seed(3)
    redirected = torch.rand(3, device="cuda", generator=g)
    torchdevice.disable()
    native = torch.rand(3, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(redirected, native)


def _gpu_checkpoint(tmp_path, monkeypatch, location="cuda:0"):
    """A checkpoint whose tensors are tagged as saved on a GPU, as a CUDA user's would be."""
    import torch.serialization as ser

    path = tmp_path / "gpu.pt"
    with monkeypatch.context() as patch:
        patch.setattr(ser, "location_tag", lambda storage: location)
        torch.save({"w": torch.arange(3.0)}, path)
    return path


def test_load_gpu_checkpoint_without_map_location(tmp_path, monkeypatch):
    path = _gpu_checkpoint(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError):
        torch.load(path)  # natively: no CUDA here
    with torchdevice.redirect(host="cpu"):
        state = torch.load(path)
    assert state["w"].device == CPU
    torch.testing.assert_close(state["w"], torch.arange(3.0))


@pytest.mark.parametrize(
    "map_location",
    [
        "cuda",
        "cuda:1",
        torch.device("cuda", 0),
        0,
        {"cuda:0": "cuda:1"},
        lambda storage, location: None,
        lambda storage, location: storage,
    ],
    ids=["str", "str-index", "device", "int", "dict", "callable-none", "callable-storage"],
)
def test_load_map_location_forms(tmp_path, monkeypatch, map_location):
    path = _gpu_checkpoint(tmp_path, monkeypatch)
    with torchdevice.redirect(host="cpu"):
        state = torch.load(path, map_location=map_location)
    assert state["w"].device == CPU
    torch.testing.assert_close(state["w"], torch.arange(3.0))


def test_load_from_buffer_and_weights_only(enabled):
    buffer = io.BytesIO()
    torch.save({"a": torch.ones(2, device="cuda")}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="cuda", weights_only=True)
    assert state["a"].device == CPU


def test_each_call_site_is_logged_once_and_counted(enabled, caplog):
    caplog.set_level(logging.INFO, logger="torchdevice")
    for _ in range(3):
        torch.zeros(1, device="cuda")  # the line the report must name
    line = test_each_call_site_is_logged_once_and_counted.__code__.co_firstlineno + 3
    records = [r for r in caplog.records if "torch.zeros" in r.getMessage()]
    assert len(records) == 1
    message = records[0].getMessage()
    assert f"test_mode.py:{line} in test_each_call_site_is_logged_once_and_counted()" in message
    entries = [e for e in torchdevice.report().entries if e.api == "torch.zeros"]
    assert [(e.site.lineno, e.count, e.requested, e.decided) for e in entries] == [
        (line, 3, "cuda", "cpu:0")
    ]


def test_calls_on_one_line_are_one_row_and_reset_starts_over(enabled):
    # Two calls of one line are two instructions: the fast counters key them apart, the
    # report adds them into the line's one row.
    for _ in range(3):
        a, b = torch.zeros(1, device="cuda"), torch.zeros(2, device="cuda")  # line + 4
    assert a.shape == (1,)
    assert b.shape == (2,)
    line = test_calls_on_one_line_are_one_row_and_reset_starts_over.__code__.co_firstlineno + 4
    rows = [
        (e.site.lineno, e.count) for e in torchdevice.report().entries if e.api == "torch.zeros"
    ]
    assert rows == [(line, 6)]
    torchdevice.reset_report()
    assert torchdevice.report().entries == ()
    again = sys._getframe().f_lineno + 1
    torch.zeros(1, device="cuda")
    rows = [
        (e.site.lineno, e.count) for e in torchdevice.report().entries if e.api == "torch.zeros"
    ]
    assert rows == [(again, 1)]


def test_redirects_outside_the_mode_find_the_users_line(enabled):
    # torch.Generator is wrapped, not reached through the mode: the shortcut past the
    # mode's own frames does not apply, and the full walk finds the line.
    for _ in range(2):
        generator = torch.Generator(device="cuda")  # line + 4
    assert generator.device == CPU
    line = test_redirects_outside_the_mode_find_the_users_line.__code__.co_firstlineno + 4
    rows = [
        (e.site.filename, e.site.lineno, e.count)
        for e in torchdevice.report().entries
        if e.api == "torch.Generator"
    ]
    assert rows == [(__file__, line, 2)]


def test_a_users_mode_above_ours_is_the_call_site(enabled):
    class Doubling(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))  # line + 3: calls the next mode down
            return result * 2 if func is torch.ones else result

    with Doubling():
        x = torch.ones(2, device="cuda")
    assert x.device == CPU
    assert x.tolist() == [2.0, 2.0]
    line = test_a_users_mode_above_ours_is_the_call_site.__code__.co_firstlineno + 3
    rows = [(e.site.lineno, e.site.function) for e in torchdevice.report().entries]
    assert (line, "__torch_function__") in rows


def test_calls_through_torch_report_the_users_line(enabled):
    model = nn.Linear(2, 2)
    model.to("cuda")  # reaches the mode as _parse_to from torch/nn/modules/module.py
    line = test_calls_through_torch_report_the_users_line.__code__.co_firstlineno + 2
    entries = [e for e in torchdevice.report().entries if e.api == "Module.to"]
    assert len(entries) == 1
    assert entries[0].site.filename == __file__
    assert entries[0].site.lineno == line


def test_a_modules_cuda_is_one_row_at_the_users_line(enabled):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))  # four parameters
    weight = model[0].weight
    here = sys._getframe().f_lineno + 1
    assert model.cuda() is model
    assert model[0].weight is weight  # the same Parameter, as natively
    assert model[0].weight.cpu() is not weight  # it stands for the device: .cpu() copies
    again = sys._getframe().f_lineno + 1
    nn.Linear(2, 2).cuda(0)
    rows = [(e.api, e.site.lineno, e.count, e.requested) for e in torchdevice.report().entries]
    assert ("Module.cuda", here, 1, "cuda") in rows
    assert ("Module.cuda", again, 1, "cuda:0") in rows
    assert [row for row in rows if row[0] == "Tensor.cuda"] == []


def test_overrides_that_call_super_are_skipped_to_the_users_line(enabled):
    class Wrapped(nn.Linear):  # as Transformers' PreTrainedModel overrides cuda() and to()
        def cuda(self, *args, **kwargs):
            return super().cuda(*args, **kwargs)

        def to(self, *args, **kwargs):
            return super().to(*args, **kwargs)

    model = Wrapped(2, 2)
    cuda_line = sys._getframe().f_lineno + 1
    model.cuda()
    to_line = sys._getframe().f_lineno + 1
    model.to("cuda")
    rows = {(e.api, e.site.lineno, e.site.function) for e in torchdevice.report().entries}
    name = "test_overrides_that_call_super_are_skipped_to_the_users_line"
    assert ("Module.cuda", cuda_line, name) in rows
    assert ("Module.to", to_line, name) in rows
    assert not any(function in ("cuda", "to") for _, _, function in rows)


def test_report_json_and_text(enabled):
    torch.ones(2, device="mps")
    report = torchdevice.report()
    data = report.to_dict()
    assert data["total_calls"] == 1
    assert data["entries"][0]["api"] == "torch.ones"
    assert data["entries"][0]["requested"] == "mps:0"
    assert "torch.ones(mps:0) -> cpu:0 x1" in report.to_text()


def test_torch_building_its_own_devices_is_applied_but_not_reported(enabled):
    import os

    # Code whose file lies inside torch's package counts as torch's own (GradScaler and
    # autocast build device objects internally): the policy applies, the report stays quiet.
    torch_file = os.path.join(os.path.dirname(torch.__file__), "_torchdevice_probe.py")
    namespace: dict[str, object] = {"torch": torch}
    exec(compile("made = torch.device('cuda')", torch_file, "exec"), namespace)
    assert torch.ones(1, device=namespace["made"]).device == CPU
    assert [e for e in torchdevice.report().entries if e.api == "torch.device"] == []
    torch.device("cuda")  # the same request from user code is reported
    assert [e.count for e in torchdevice.report().entries if e.api == "torch.device"] == [1]


def test_comparing_a_device_object_with_a_tensors_device(enabled):
    """The cost of the device-object rule (docs/policy.md): a tensor's device is real, so
    ``x.device != device`` is true; the usual ``x = x.to(device)`` that follows returns
    a tensor made for the device as it is, and copies an op result (it stands for the
    host)."""
    device = torch.device("cuda")
    x = torch.ones(2, device=device)
    assert x.device != device
    assert x.to(device) is x
    y = x * 2
    moved = y.to(device)
    assert moved is not y
    torch.testing.assert_close(moved, y)
    assert moved.to(device) is moved
