"""The entry-points tier (``torchdevice.entry_points.enable()``, issue 21 item 2, an
experiment left out of the options): the mode's policy, report and undo through wrappers
on the device-taking functions, with no function mode on any thread."""

from __future__ import annotations

import inspect
import threading
import warnings

import pytest
import torch
from torch.overrides import _get_current_function_mode_stack

import torchdevice
from pristine import REAL_ENTRY_POINTS, REAL_PARSE_TO, torch_is_pristine
from torchdevice import entry_points
from torchdevice.host import Host
from torchdevice.intercepts import build_table

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(),
    reason="the redirects below are a CPU-only host's (cuda -> cpu)",
)


def _line() -> int:
    """The line of the caller's next statement (where the torch call under test is)."""
    frame = inspect.currentframe()
    assert frame is not None
    assert frame.f_back is not None
    return frame.f_back.f_lineno + 1


def _rows(api: str) -> list[tuple[str, int, int]]:
    """(file, line, count) of the report's rows for ``api``."""
    return [
        (e.site.filename, e.site.lineno, e.count)
        for e in torchdevice.report().entries
        if e.api == api
    ]


def test_no_function_mode_and_ops_without_a_device_stay_native():
    entry_points.enable()
    assert list(_get_current_function_mode_stack()) == []
    assert not torch._C._is_torch_function_mode_enabled()
    a = torch.ones(3)
    assert torch.add is torch._C._VariableFunctions.add  # not wrapped: no device argument
    assert torch.equal(a + a, torch.full((3,), 2.0))
    assert torch.Tensor.__add__ is torch._C.TensorBase.__add__


def test_factories_land_on_the_host_device_with_their_values_and_a_row_each():
    entry_points.enable()
    line = _line()
    x = torch.arange(4, device="cuda")
    y = torch.full((2,), 3.0, device="cuda:0")
    z = torch.zeros_like(x, device="cuda")
    n = x.new_ones(2, device="cuda")
    assert [t.device for t in (x, y, z, n)] == [torch.device("cpu")] * 4
    assert x.tolist() == [0, 1, 2, 3]
    assert y.tolist() == [3.0, 3.0]
    assert z.tolist() == [0, 0, 0, 0]
    assert n.tolist() == [1, 1]
    assert _rows("torch.arange") == [(__file__, line, 1)]
    assert _rows("torch.full") == [(__file__, line + 1, 1)]
    assert _rows("torch.zeros_like") == [(__file__, line + 2, 1)]
    assert _rows("Tensor.new_ones") == [(__file__, line + 3, 1)]


def test_repeated_calls_are_counted_at_one_row():
    entry_points.enable()
    line = _line()
    for _ in range(5):
        torch.zeros(2, device="cuda")
    assert _rows("torch.zeros") == [(__file__, line + 1, 5)]


def test_device_objects_are_placed_and_not_reported_where_used():
    entry_points.enable()
    device = torch.device("cuda")  # a C type: not wrapped, so not reported here
    t = torch.zeros(2, device=device)
    assert t.device == torch.device("cpu")
    assert _rows("torch.zeros") == []
    assert _rows("torch.device") == []


def test_transfers_keep_the_gpu_copy_semantics():
    entry_points.enable()
    host = torch.ones(3)
    on_device = host.cuda()
    assert on_device.device.type == "cpu"
    assert on_device is not host
    on_device.add_(1)  # an independent copy, as a host-to-device transfer gives
    assert host.tolist() == [1.0, 1.0, 1.0]
    assert on_device.cuda() is on_device
    assert on_device.to("cuda") is on_device
    back = on_device.cpu()
    assert back is not on_device
    assert back.tolist() == [2.0, 2.0, 2.0]
    assert back.cpu() is back


def test_module_to_keeps_parameters_and_reports_one_row():
    entry_points.enable()
    model = torch.nn.Linear(2, 2)
    weight = model.weight
    line = _line()
    assert model.to("cuda") is model
    assert model.weight is weight
    assert isinstance(model.weight, torch.nn.Parameter)
    assert _rows("Module.to") == [(__file__, line, 1)]
    assert _rows("Tensor.to") == []  # the parameters' own moves are torch's, not lines


def test_load_with_a_cuda_map_location(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.arange(3.0), path)
    entry_points.enable()
    loaded = torch.load(path, map_location="cuda")
    assert loaded.device.type == "cpu"
    assert loaded.tolist() == [0.0, 1.0, 2.0]


def test_other_threads_are_redirected_without_a_mode():
    entry_points.enable()
    seen: list[object] = []

    def work() -> None:
        seen.append(
            (torch.zeros(1, device="cuda").device, list(_get_current_function_mode_stack()))
        )

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [(torch.device("cpu"), [])]


def test_a_scripted_cuda_factory_goes_through_the_net():
    def make() -> torch.Tensor:
        return torch.ones(2, device="cuda")

    with warnings.catch_warnings():  # torch.jit.script is deprecated in 2.13
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(make)
    entry_points.enable()
    assert scripted().device.type == "cpu"
    assert scripted().tolist() == [1.0, 1.0]


@pytest.mark.slow
def test_a_compiled_factory_is_placed_without_a_graph_break():
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.arange(3, device="cuda")

    entry_points.enable()
    compiled = torch.compile(f, backend="eager", fullgraph=True)
    assert compiled(torch.ones(3)).tolist() == [1.0, 2.0, 3.0]
    torch._dynamo.reset()


def test_switching_tiers_leaves_one_tier_installed():
    torchdevice.enable()
    assert len(_get_current_function_mode_stack()) == 1
    entry_points.enable()
    assert list(_get_current_function_mode_stack()) == []
    assert entry_points.installed()
    torchdevice.enable()
    assert len(_get_current_function_mode_stack()) == 1
    assert not entry_points.installed()
    torchdevice.disable()
    assert torch_is_pristine() == []


def test_disable_restores_torch_exactly():
    before = {name: getattr(torch, name) for name in REAL_ENTRY_POINTS}
    tensor_methods = {name: vars(torch.Tensor).get(name) for name in ("to", "cuda", "new_ones")}
    entry_points.enable()
    assert torch.zeros is not before["zeros"]
    assert "to" in vars(torch.Tensor)
    assert torch._C._nn._parse_to is not REAL_PARSE_TO
    torchdevice.disable()
    assert {name: getattr(torch, name) for name in REAL_ENTRY_POINTS} == before
    assert {name: vars(torch.Tensor).get(name) for name in tensor_methods} == tensor_methods
    assert torch_is_pristine() == []
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        torch.zeros(1).cuda()


def test_every_table_function_is_wrapped_but_the_left_out():
    table = build_table(Host.cpu())
    wrapped = {getattr(owner, name) for owner, name, _ in entry_points.targets(table)}
    left_out = set(table) - wrapped
    assert left_out == {torch.device, torch.nested.nested_tensor}
    assert set(entry_points.LEFT_OUT) == {"torch.device", "torch.nested.nested_tensor"}


def test_as_tensor_of_host_data_is_a_device_copy():
    entry_points.enable()
    host = torch.arange(3.0)
    on_device = torch.as_tensor(host, device="cuda")
    shared = torch.as_tensor(on_device, device="cuda")
    on_device.add_(1)
    assert host.tolist() == [0.0, 1.0, 2.0]  # a host-to-device transfer copies
    assert shared is on_device  # already there: the very tensor, as natively
