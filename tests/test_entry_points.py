"""The entry-points tier (``enable(intercept="entry-points")``, issue 27): the mode's policy,
report and undo through wrappers on the device-taking functions and a ``torch.device``
stand-in, with no function mode on any thread."""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
import torch
from torch.overrides import _get_current_function_mode_stack

import torchdevice
from childenv import clean_env
from pristine import torch_is_pristine
from spy import DeviceSpy
from torchdevice.host import Host
from torchdevice.redirecting import entry_points, runtime, standing
from torchdevice.redirecting.intercepts import build_table

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(),
    reason="the redirects below are a CPU-only host's (cuda -> cpu)",
)

ROOT = Path(__file__).resolve().parents[1]
REAL_DEVICE = torch.device
REAL_ZEROS = torch.zeros


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


def _tier() -> None:
    torchdevice.enable(intercept="entry-points")


def test_no_function_mode_and_ops_without_a_device_stay_native():
    _tier()
    assert list(_get_current_function_mode_stack()) == []
    assert not torch._C._is_torch_function_mode_enabled()
    a = torch.ones(3)
    assert torch.add is torch._C._VariableFunctions.add  # not wrapped: no device argument
    assert torch.equal(a + a, torch.full((3,), 2.0))
    assert torch.Tensor.__add__ is torch._C.TensorBase.__add__
    assert torchdevice.is_enabled()


def test_the_environment_variable_picks_the_tier(monkeypatch):
    monkeypatch.setenv("TORCHDEVICE_INTERCEPT", "entry-points")
    torchdevice.enable()
    assert entry_points.installed()
    assert list(_get_current_function_mode_stack()) == []


def test_an_unknown_tier_is_refused_naming_the_values():
    with pytest.raises(torchdevice.SettingsError, match=r"intercept='modes'.*'mode'.*'entry-po"):
        torchdevice.enable(intercept="modes")  # type: ignore[typeddict-item]
    assert torch_is_pristine() == []


def test_factories_land_on_the_host_device_with_their_values_and_a_row_each():
    _tier()
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
    _tier()
    line = _line()
    for _ in range(5):
        torch.zeros(2, device="cuda")  # the first takes the handler, the rest the cache
    assert _rows("torch.zeros") == [(__file__, line + 1, 5)]


def test_a_bad_device_raises_as_torch_would():
    _tier()
    with pytest.raises(RuntimeError, match="Expected one of"):
        torch.zeros(1, device="nonsense")
    with pytest.raises(RuntimeError, match="Expected one of"):
        torch.ones(1).to("nonsense")


def test_torch_device_reads_as_written_and_is_reported_where_made():
    _tier()
    line = _line()
    device = torch.device("cuda")
    indexed = torch.device(0)  # natively an error on a CPU-only host: cuda:0, as written
    assert (device.type, device.index) == ("cuda", None)
    assert (indexed.type, indexed.index) == ("cuda", 0)
    assert type(device) is REAL_DEVICE  # the genuine C object
    t = torch.zeros(2, device=device)
    assert t.device == REAL_DEVICE("cpu")
    assert _rows("torch.device") == [(__file__, line, 1), (__file__, line + 1, 1)]
    assert _rows("torch.zeros") == []  # a device object's use is not reported again


@pytest.mark.parametrize("intercept", ["mode", "entry-points"])
def test_a_device_object_copied_is_itself_and_reported_once(intercept: str) -> None:
    """``torch.device(device)`` (torch's ``storage._new_shared`` does it for every
    DataLoader batch) answers the object itself in both tiers, unreported; a device the
    policy refuses still raises as it did."""
    torchdevice.enable(intercept=intercept)  # type: ignore[typeddict-item]
    line = _line()
    made = torch.device("cuda")
    copies = [torch.device(made) for _ in range(3)]
    host = REAL_DEVICE("cpu")
    assert all(copy is made for copy in copies)
    assert torch.device(host) is host
    assert _rows("torch.device") == [(__file__, line, 1)]
    assert torch.zeros(2, device=copies[0]).device == host
    with pytest.raises(RuntimeError, match="mps"):
        torch.device(REAL_DEVICE("mps", 1))
    with pytest.raises(RuntimeError, match="mps"):
        torch.device(REAL_DEVICE("mps", 1))  # not cached: refused again


def test_the_stand_in_answers_as_the_c_type_but_for_is():
    _tier()
    stand_in = torch.device
    assert stand_in is entry_points.device
    real = REAL_DEVICE("cpu")
    assert isinstance(real, stand_in)
    assert isinstance(real, stand_in | None)
    assert issubclass(REAL_DEVICE, stand_in)
    assert stand_in == REAL_DEVICE
    real_type = type(real)
    assert real_type == stand_in  # type(d) == torch.device holds
    assert {REAL_DEVICE: 1}[stand_in] == 1  # one key of a dict
    assert stand_in in {REAL_DEVICE}
    assert type(real) is not stand_in  # the one difference (docs/tiers.md)
    assert repr(stand_in) == "<class 'torch.device'>"
    assert stand_in.__doc__ == REAL_DEVICE.__doc__
    assert pickle.loads(pickle.dumps(torch.device("cuda", 1))) == REAL_DEVICE("cuda", 1)


def test_the_cpu_override_toggles_through_torch_device():
    _tier()
    override = torch.device("cpu:-1")
    assert override.type == "cpu"
    runtime = torchdevice.activation.current_runtime()
    assert runtime is not None
    assert runtime.state.cpu_override


def test_integer_devices_reach_the_decided_device():
    _tier()
    moved = torch.ones(2).to(0)
    model = torch.nn.Linear(2, 2).to(0)
    assert moved.device == REAL_DEVICE("cpu")
    assert moved.tolist() == [1.0, 1.0]
    assert model.weight.device == REAL_DEVICE("cpu")
    assert torch.zeros(1, device=0).device == REAL_DEVICE("cpu")


def test_transfers_keep_the_gpu_copy_semantics():
    _tier()
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
    assert host.to(torch.float64).dtype == torch.float64  # no device: native


def test_a_device_used_as_a_context_manager_places_its_factories():
    """``with torch.device("cuda"):`` pushes torch's ``DeviceContext``, which fills in
    ``device=`` after the wrappers have run: the wrappers read it first (natively on this
    host it raised "PyTorch is not linked with support for cuda devices"). The factories
    stand for the device, as the mode places them; nested contexts take the innermost;
    ``DisableTorchFunction`` sections see no context, as natively."""
    _tier()
    line = _line()
    with torch.device("cuda"):
        made = torch.tensor([1.0, 2.0])  # a data factory (the handler's full path)
        zeros = torch.zeros(2)  # the inlined factory path
        with torch.device("cpu"):
            host = torch.ones(2)
        with torch._C.DisableTorchFunction():
            native = REAL_ZEROS(2, device="cpu")
    assert made.tolist() == [1.0, 2.0]
    assert zeros.tolist() == [0.0, 0.0]
    assert made.device == zeros.device == host.device == native.device == REAL_DEVICE("cpu")
    assert made.cuda() is made  # stands for the device: no copy, as on a GPU
    assert zeros.to("cuda") is zeros
    assert host.cuda() is not host  # the inner "cpu" context: a host tensor
    assert _rows("torch.device") == [(__file__, line, 1)]  # "cpu" stays: no row
    assert _rows("torch.zeros") == _rows("torch.tensor") == []  # the object's uses


def test_set_default_device_and_a_context_agree_with_the_mode():
    """The same program in both tiers: ``torch.set_default_device("cuda")`` and
    ``with torch.device("cuda")`` give tensors on the same device with the same values."""
    results = []
    for intercept in ("mode", "entry-points"):
        torchdevice.enable(intercept=intercept)
        torch.manual_seed(0)
        with torch.device("cuda"):
            drawn = torch.randn(3)
            ranged = torch.arange(3.0)
        torch.set_default_device("cuda")
        try:
            default = torch.full((2,), 7.0)
        finally:
            torch.set_default_device(None)
        results.append((drawn.tolist(), ranged.tolist(), default.tolist(), default.device))
        torchdevice.disable()
    assert results[0] == results[1]
    assert results[1][3] == REAL_DEVICE("cpu")


def test_module_to_keeps_parameters_and_reports_one_row():
    _tier()
    model = torch.nn.Linear(2, 2)
    weight = model.weight
    line = _line()
    assert model.to("cuda") is model
    assert model.weight is weight
    assert isinstance(model.weight, torch.nn.Parameter)
    assert _rows("Module.to") == [(__file__, line, 1)]
    assert _rows("Tensor.to") == []  # the parameters' own moves are torch's, not lines


def test_checkpoint_round_trip_with_a_cuda_map_location(tmp_path):
    _tier()
    model = torch.nn.Linear(3, 2).cuda()
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "step": torch.tensor(7, device="cuda")}, path)
    loaded = torch.load(path, map_location="cuda")
    assert loaded["step"].item() == 7
    for name, value in model.state_dict().items():
        assert loaded["model"][name].device == REAL_DEVICE("cpu")
        assert torch.equal(loaded["model"][name], value)
    again = torch.nn.Linear(3, 2).cuda()
    again.load_state_dict(loaded["model"])
    x = torch.randn(4, 3, device="cuda")
    assert torch.equal(again(x), model(x))


def test_other_threads_are_redirected_without_a_mode():
    _tier()
    seen: list[object] = []

    def work() -> None:
        seen.append(
            (torch.zeros(1, device="cuda").device, list(_get_current_function_mode_stack()))
        )

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [(REAL_DEVICE("cpu"), [])]


def test_a_native_section_is_left_to_the_dispatcher_net():
    """Under ``DisableTorchFunction`` the mode sees nothing; nor do the wrappers: the
    allocation on a device this build lacks is placed by the net, and reported as such."""
    _tier()
    with torch._C.DisableTorchFunction():
        t = torch.zeros(2, device="cuda")
    assert t.device == REAL_DEVICE("cpu")
    assert _rows("torch.zeros") == []
    assert [row[2] for row in _rows("aten::empty.memory_format")] == [1]


def test_a_scripted_cuda_factory_goes_through_the_net():
    def make() -> torch.Tensor:
        return torch.ones(2, device="cuda")

    with warnings.catch_warnings():  # torch.jit.script is deprecated in 2.13
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(make)
    _tier()
    assert scripted().device.type == "cpu"
    assert scripted().tolist() == [1.0, 1.0]


def test_torchscript_compiled_while_the_tier_is_on_sees_torchs_ops():
    """TorchScript resolves a call of a wrapper, and of the ``torch.device`` stand-in, as
    the op itself (``aten::zeros``, ``prim::device``); what it allocates on a device the
    build lacks reaches the dispatcher net, as any scripted code does. Its table of
    builtins keeps torch's own functions after ``disable()``."""

    def make(n: int) -> torch.Tensor:
        return torch.zeros(n, device=torch.device("cuda")) + torch.arange(n, device="cuda")

    def native(n: int) -> torch.Tensor:
        return torch.zeros(n) + torch.arange(n)

    _tier()
    with warnings.catch_warnings():  # torch.jit.script is deprecated in 2.13
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(make)
        out = scripted(3)
        assert (out.device, out.tolist()) == (REAL_DEVICE("cpu"), [0.0, 1.0, 2.0])
        torchdevice.disable()
        assert torch.jit.script(native)(3).tolist() == [0.0, 1.0, 2.0]


@pytest.mark.slow
def test_a_compiled_function_is_placed_without_a_graph_break():
    def f(x: torch.Tensor) -> torch.Tensor:
        device = torch.device("cuda")
        return (x + torch.arange(3, device="cuda")).to(device) * torch.ones(3, device=device)

    _tier()
    compiled = torch.compile(f, backend="eager", fullgraph=True)
    try:
        out = compiled(torch.ones(3))
        assert out.device == REAL_DEVICE("cpu")
        assert out.tolist() == [1.0, 2.0, 3.0]
    finally:
        torch._dynamo.reset()


def test_switching_tiers_leaves_one_tier_installed():
    torchdevice.enable()
    assert len(_get_current_function_mode_stack()) == 1
    _tier()
    assert list(_get_current_function_mode_stack()) == []
    assert entry_points.installed()
    assert torch.zeros(1, device="cuda").device == REAL_DEVICE("cpu")
    torchdevice.enable()
    assert len(_get_current_function_mode_stack()) == 1
    assert not entry_points.installed()
    assert torch.device is REAL_DEVICE
    torchdevice.disable()
    assert torch_is_pristine() == []


def test_a_redirect_block_in_the_other_tier_restores_the_outer_one():
    torchdevice.enable(log_level="INFO")
    with torchdevice.redirect(intercept="entry-points"):
        assert entry_points.installed()
        assert list(_get_current_function_mode_stack()) == []
    assert not entry_points.installed()
    assert len(_get_current_function_mode_stack()) == 1
    assert torchdevice.logs.logger.level == 20  # the outer activation's settings, again
    torchdevice.disable()
    assert torch_is_pristine() == []


def test_disable_restores_torch_exactly():
    names = ("zeros", "arange", "tensor", "zeros_like", "full", "device")
    before = {name: getattr(torch, name) for name in names}
    methods = {name: vars(torch.Tensor).get(name) for name in ("to", "cuda", "new_ones")}
    parse_to = torch._C._nn._parse_to
    _tier()
    assert torch.zeros is not before["zeros"]
    assert torch.device is not before["device"]
    assert "to" in vars(torch.Tensor)
    assert torch._C._nn._parse_to is not parse_to
    torchdevice.disable()
    assert {name: getattr(torch, name) for name in names} == before
    assert {name: vars(torch.Tensor).get(name) for name in methods} == methods
    assert torch._C._nn._parse_to is parse_to
    assert torch_is_pristine() == []
    # Native again. (Torch's message changes once the dispatcher net has allocated on the
    # CUDA key, in either tier: "not linked with support for cuda devices".)
    with pytest.raises((AssertionError, RuntimeError), match=r"(?i)cuda"):
        torch.zeros(1).cuda()


def test_every_table_function_is_wrapped_but_the_left_out():
    for host in (Host.cpu(), Host.mps()):
        table = build_table(host)
        wrapped = {
            torch.Tensor.device.__get__ if name == "device" else getattr(owner, name)
            for owner, name, _ in entry_points.targets(table)
        }
        assert set(table) - wrapped == {torch.device, torch.nested.nested_tensor}
    assert set(entry_points.LEFT_OUT) == {"torch.nested.nested_tensor"}


def test_as_tensor_of_host_data_is_a_device_copy():
    _tier()
    host = torch.arange(3.0)
    on_device = torch.as_tensor(host, device="cuda")
    shared = torch.as_tensor(on_device, device="cuda")
    on_device.add_(1)
    assert host.tolist() == [0.0, 1.0, 2.0]  # a host-to-device transfer copies
    assert shared is on_device  # already there: the very tensor, as natively


def test_names_bound_before_a_late_enable_keep_torchs_objects():
    """What remains for ``enable()`` called in code after ``from torch import ...``
    (docs/tiers.md): a bound factory is torch's own, so its device request reaches the
    dispatcher net (placed, reported as the allocation); a bound ``torch.device`` is the C
    type, so ``device(0)`` fails as natively on a CPU-only host."""
    zeros, device = REAL_ZEROS, REAL_DEVICE  # as `from torch import zeros, device` had bound
    _tier()
    assert zeros(2, device="cuda").device == REAL_DEVICE("cpu")
    assert _rows("torch.zeros") == []
    assert [row[2] for row in _rows("aten::empty.memory_format")] == [1]
    with pytest.raises(RuntimeError, match="accelerator"):
        device(0)
    assert torch.device(0) == REAL_DEVICE("cuda", 0)  # the name read now is the tier's


BOUND_FIRST = """\
import json, sys
from torch import device, zeros, ones
import torch
facts = {
    "device": type(device).__name__,
    "zeros": getattr(zeros, "__module__", None),
    "lands": str(zeros(2, device="cuda").device),
    "index": str(device(0)),
    "moved": str(ones(1).to(0).device),
}
print(json.dumps(facts))
"""


@pytest.mark.parametrize("how", ["launcher", "environment"])
def test_names_bound_at_import_are_the_tiers_under_the_launcher_and_the_environment(tmp_path, how):
    """``python -m torchdevice`` and ``ACTIVATE_TORCH_DEVICE=1`` install the tier before the
    script's first import: ``from torch import device, zeros`` binds the tier's."""
    script = tmp_path / "bound.py"
    script.write_text(textwrap.dedent(BOUND_FIRST))
    env = clean_env(TORCHDEVICE_INTERCEPT="entry-points")
    if how == "launcher":
        command = [sys.executable, "-m", "torchdevice", "--no-report", str(script)]
    else:
        env["ACTIVATE_TORCH_DEVICE"] = "1"
        command = [sys.executable, str(script)]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    facts = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert facts == {
        "device": "_DeviceClass",  # the stand-in's metaclass: the tier's torch.device
        "zeros": "torch",
        "lands": "cpu",
        "index": "cuda:0",
        "moved": "cpu",
    }


def test_an_mps_host_without_pytorchs_fallback_is_told_once(monkeypatch, caplog):
    """On MPS the tier's CPU fallback is PyTorch's own: without the variable, a warning
    saying what raises and what to do; with it, none."""
    monkeypatch.setattr(entry_points, "_warned_fallback", [])
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    with caplog.at_level("WARNING", logger="torchdevice"):
        torchdevice.enable(host=Host.mps(), intercept="entry-points")
        torchdevice.enable(host=Host.cpu(), intercept="entry-points")
        torchdevice.enable(host=Host.mps(), intercept="entry-points")
    warnings_seen = [r.getMessage() for r in caplog.records if "MPS_FALLBACK" in r.getMessage()]
    assert len(warnings_seen) == 1
    assert "PYTORCH_ENABLE_MPS_FALLBACK is not set: such ops will raise" in warnings_seen[0]
    torchdevice.disable()
    caplog.clear()
    monkeypatch.setattr(entry_points, "_warned_fallback", [])
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    with caplog.at_level("WARNING", logger="torchdevice"):
        torchdevice.enable(host=Host.mps(), intercept="entry-points")
        torchdevice.enable(host=Host.mps(), intercept="mode")
    assert not [r for r in caplog.records if "MPS_FALLBACK" in r.getMessage()]


def _every_kind_of_request() -> list[torch.Tensor]:
    """One call of each kind of device request the two placement paths take: the tier's
    inlined factory and ``Tensor.to`` paths and the handlers' (``Runtime.place``), every
    policy row of the host, the ``cpu:-1`` toggle both ways, device objects and ints."""
    made = []
    for request in ("cuda", "cuda:1", "mps", "mps:0", "cpu", "cpu:0", 0, None):
        made.append(torch.zeros(2, device=request))
        made.append(torch.tensor([1.0, 2.0], device=request))
        made.append(torch.arange(3.0).to(request) if request is not None else torch.ones(1))
        made.append(torch.ones(2).new_zeros(2, device=request))
    made.append(torch.zeros(2, device=torch.device("cuda", 0)))
    made.append(torch.ones(2).to(torch.device("cuda"), torch.float64))
    made.append(torch.ones(2).cuda())
    made.append(torch.ones(2).cpu())
    made.append(torch.zeros(2, device="cpu:-1"))  # the override on
    made.append(torch.zeros(2, device="cpu"))  # stays on the CPU while it is on
    made.append(torch.ones(2).to("cuda"))
    made.append(torch.zeros(2, device="cpu:-1"))  # and off again
    # The CPU read off tensors (``device=x.device``: Runtime.runs_as_made on this host),
    # and a device object remembered as standing for the device, which is placed.
    made.append(torch.arange(3, device=torch.ones(1, device="cuda").device))
    made.append(torch.full((2,), 1.0, device=torch.ones(1).device, pin_memory=True))
    made.append(torch.ones(2, device=standing.device_object(torch.device("cpu"), "device")))
    made.append(torch.ones(2, device="cuda").to(torch.ones(1).device))
    made.append(torch.ones(2).to(device=torch.ones(1).device, dtype=torch.float64))
    return made


@pytest.mark.parametrize("intercept", ["mode", "entry-points"])
def test_to_the_cpu_read_off_a_tensor_keeps_the_gpus_copy_rule(intercept):
    """``x.to(t.device)`` with ``t`` on the CPU (``Runtime.runs_as_made``: no decision on
    this host) is torch's own call, with the copy rule kept: a tensor standing for the
    device comes back as an independent copy standing for the host, as ``.cpu()`` does on
    a GPU; any other tensor is itself, as natively; a conversion is a fresh tensor; and
    under ``DisableTorchFunction`` (a native section) the tensor is itself."""
    cpu = torch.ones(1).device
    torchdevice.enable(intercept=intercept)
    try:
        on_device = torch.ones(2, device="cuda")
        copied = on_device.to(cpu)
        assert copied is not on_device
        assert standing.standing_of(copied) == "host"
        copied.add_(1)
        assert on_device.tolist() == [1.0, 1.0]
        keyword = on_device.to(device=cpu, non_blocking=True)
        assert keyword is not on_device
        assert standing.standing_of(keyword) == "host"
        plain = torch.ones(2) * 2
        assert plain.to(cpu) is plain
        assert plain.to(device=cpu) is plain
        converted = plain.to(cpu, torch.float64)
        assert converted.dtype == torch.float64
        assert standing.standing_of(converted) == "host"
        assert plain.to(cpu, copy=True) is not plain
        with torch._C.DisableTorchFunction():
            assert on_device.to(cpu) is on_device
        # One row: the "cuda" factory's; the reads of the CPU are no lines to port.
        assert [row.requested for row in torchdevice.report().entries] == ["cuda"]
    finally:
        torchdevice.disable()


def test_both_tiers_place_every_kind_of_request_alike():
    """runtime.py's ``Runtime.place`` is the placement path; the tier inlines its cached
    path in its factory and ``Tensor.to`` wrappers (``_counted``) for speed. Every kind of
    request through both: the same devices, values, standings and report rows."""
    seen = []
    for intercept in ("mode", "entry-points"):
        torchdevice.enable(intercept=intercept)
        torchdevice.reset_report()
        try:
            made = _every_kind_of_request()
            tensors = [(t.device, t.dtype, t.tolist(), standing.standing_of(t)) for t in made]
            rows = sorted(
                (e.site.lineno, e.api, e.requested, e.decided, e.count)
                for e in torchdevice.report().entries
            )
        finally:
            torchdevice.disable()
        seen.append((tensors, rows))
    assert seen[0][0] == seen[1][0]
    assert seen[0][1] == seen[1][1]
    assert len(seen[0][1]) >= 10  # the rows were made, in both
    assert {row[3] for row in seen[0][1]} >= {"cpu:0"}


#: A tensor made before any activation, for ``out=``.
_OUT = torch.empty(2)


def _device_less(spy: DeviceSpy, pin: bool = True) -> list[tuple[list[str], object]]:
    """Device-less factories of each path (the tier's inlined one, the handler's with a
    generator of the CPU, ``pin_memory`` unless ``pin`` is false, ``out=``): the devices
    they reached torch with and what their results stand for."""
    calls = [
        lambda: torch.zeros(2),
        lambda: torch.ones(2, 3, dtype=torch.float16),
        lambda: torch.rand(2, generator=torch.Generator().manual_seed(0)),
        lambda: torch.zeros(2, out=_OUT),
    ]
    if pin:
        calls.append(lambda: torch.empty(2, pin_memory=True))
    seen = []
    for call in calls:
        spy.calls.clear()
        result = call()
        seen.append(([str(device) for _, device in spy.calls], standing.standing_of(result)))
    return seen


@pytest.mark.parametrize("host", [Host.cuda(2), Host.mps()], ids=lambda h: h.kind)
def test_both_tiers_place_device_less_factories_through_runtime_place(host):
    """A factory called without a device is placed by ``Runtime.place`` (the request
    ``None``) in both tiers, where device-less factories land (``default_device``): the
    same devices and standings, ``place(None)`` agreeing with ``default_device``, and after
    ``keep_host_requests`` (a fork child's rule) the CPU in both."""
    seen = []
    for intercept in ("mode", "entry-points"):
        spy = DeviceSpy()
        spy.__enter__()
        try:
            torchdevice.enable(host=host, intercept=intercept)
            rt = runtime.active()
            assert rt is not None
            decision, device, stands = rt.place(None, "torch.zeros")
            assert (device, stands, decision.action) == (rt.default_device, "host", "default")
            placed = _device_less(spy)
            rt.keep_host_requests("the test's fork child")
            kept = _device_less(spy, pin=False)  # a CUDA host pins CPU memory: not here
            assert rt.place(None, "torch.zeros")[1:] == (torch.device("cpu"), "host")
            rows = torchdevice.report().entries
        finally:
            torchdevice.disable()
            spy.__exit__(None, None, None)
        seen.append((placed, kept))
        # A device-less factory is no line to port; the pin request it dropped is one.
        assert [(row.kind, row.requested) for row in rows] == [("device-api", "pin_memory=True")]
    expected = "cuda" if host.kind == "cuda" else "mps:0"
    placed, kept = seen[0]
    assert placed == [
        ([expected], "host"),
        ([expected], "host"),
        ([expected], "host"),  # drawn on the CPU generator's device, then moved
        ([], "host"),  # out= decides
        ([expected], "host"),  # nothing pinned
    ]
    assert kept == [([], "host")] * 4
    assert seen[0] == seen[1]
