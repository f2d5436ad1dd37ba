"""Redirects to an accelerator this machine lacks, checked through a spy under the mode.

The host is injected (``host=Host.mps()`` / ``Host.cuda(2)``); :class:`spy.DeviceSpy`
records the device every call reaches torch with and runs it on ``meta``. So these tests
check the real mode and policy end to end; only the final allocation is simulated.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchdevice
from spy import DeviceSpy
from torchdevice import Host
from torchdevice.facade import installed as facade_installed

MPS = "mps:0"


@pytest.fixture
def spy():
    recorder = DeviceSpy()
    recorder.__enter__()
    yield recorder
    torchdevice.disable()  # torchdevice's mode sits above the spy: it goes first
    recorder.__exit__(None, None, None)


def on(spy: DeviceSpy, call) -> list[str]:
    spy.calls.clear()
    call()
    return [str(device) for _, device in spy.calls]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [("cuda", MPS), ("cuda:3", MPS), (0, MPS), ("mps", MPS), ("mps:0", MPS), ("cpu", MPS)],
)
def test_mps_host_factories(spy, request_, expected):
    torchdevice.enable(host=Host.mps())
    assert on(spy, lambda: torch.zeros(2, device=request_)) == [expected]


def test_mps_host_implicit_factories_and_modules(spy):
    torchdevice.enable(host=Host.mps())
    assert on(spy, lambda: torch.ones(2)) == [MPS]
    assert set(on(spy, lambda: nn.Linear(2, 3))) == {MPS}


def test_mps_host_conversions(spy):
    t = torch.ones(2)  # built before enabling: a real CPU tensor
    torchdevice.enable(host=Host.mps())
    for convert in (
        t.cuda,
        lambda: t.cuda(1),
        lambda: t.to("cuda"),
        lambda: t.to("cpu"),
        t.cpu,
        lambda: t.type("torch.cuda.FloatTensor"),
    ):
        assert on(spy, convert) == [MPS]


def test_mps_host_module_to(spy):
    model = nn.Linear(2, 2)
    torchdevice.enable(host=Host.mps())
    devices = on(spy, lambda: model.to("cuda"))
    assert devices
    assert set(devices) == {MPS}


def test_mps_host_cpu_override_toggle(spy):
    torchdevice.enable(host=Host.mps())
    t = torch.ones(2, device="cpu:-1")  # a genuine CPU tensor, and the override goes on
    assert t.device == torch.device("cpu")
    assert on(spy, lambda: torch.zeros(1, device="cpu")) == []  # stays on the CPU
    assert on(spy, lambda: torch.zeros(1, device="cuda")) == [MPS]  # cuda still moves
    torch.device("cpu:-1")  # toggles it off again
    assert on(spy, lambda: torch.zeros(1, device="cpu")) == [MPS]


def test_mps_host_keep_cpu_option(spy):
    torchdevice.enable(host=Host.mps(), keep_cpu=True)
    assert on(spy, lambda: torch.zeros(1, device="cpu")) == []
    assert on(spy, lambda: torch.zeros(1)) == [MPS]
    assert on(spy, lambda: torch.zeros(1, device="cuda")) == [MPS]


def test_mps_host_device_objects(spy):
    """Device objects read as written (docs/policy.md); what uses them lands on MPS."""
    torchdevice.enable(host=Host.mps())
    cuda1, cpu = torch.device("cuda:1"), torch.device("cpu")
    assert (str(cuda1), str(cpu)) == ("cuda:1", "cpu")
    assert on(spy, lambda: torch.zeros(1, device=cuda1)) == [MPS]
    assert on(spy, lambda: torch.zeros(1, device=cpu)) == [MPS]


def test_mps_host_facade_answers(spy):
    torchdevice.enable(host=Host.mps("Apple M3 Max"))
    assert facade_installed()
    assert torch.cuda.is_available()
    assert torch.cuda.device_count() == 1
    assert torch.cuda.current_device() == 0
    assert torch.cuda.get_device_name(0) == "Apple M3 Max"


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ("cuda", "cuda"),
        ("cuda:1", "cuda:1"),
        (1, "cuda:1"),
        ("mps", "cuda"),
        ("cpu", "cuda"),
        (None, "cuda"),
    ],
)
def test_cuda_host_factories(spy, request_, expected):
    torchdevice.enable(host=Host.cuda(2))
    assert on(spy, lambda: torch.zeros(2, device=request_)) == [expected]


def test_cuda_host_index_past_count(spy):
    torchdevice.enable(host=Host.cuda(2))
    with pytest.raises(RuntimeError, match=r"invalid device ordinal.*'cuda:2'.*2 CUDA device"):
        torch.zeros(1, device="cuda:2")
    assert on(spy, lambda: torch.zeros(1, device="cuda:1")) == ["cuda:1"]


def test_cuda_host_keeps_the_real_torch_cuda(spy):
    torchdevice.enable(host=Host.cuda(2))
    assert not facade_installed()


def test_switching_hosts_rebuilds_the_table(spy):
    torchdevice.enable(host=Host.cpu())
    assert torch.zeros(1, device="cuda").device == torch.device("cpu")
    torchdevice.enable(host=Host.mps())
    assert on(spy, lambda: torch.zeros(1, device="cuda")) == [MPS]
    with torchdevice.redirect(host=Host.cuda(1)):
        assert on(spy, lambda: torch.zeros(1, device="mps")) == ["cuda"]
        assert not facade_installed()
    assert facade_installed()
    assert on(spy, lambda: torch.zeros(1, device="cuda")) == [MPS]


def test_mps_host_float64_rule_on_factories(spy):
    import numpy as np

    torchdevice.enable(host=Host.mps())
    assert torch.zeros(2, device="cuda", dtype=torch.float64).dtype == torch.float32
    assert torch.ones(2, dtype=torch.float64).dtype == torch.float32  # implicit placement too
    assert torch.tensor(np.arange(3.0), device="cuda").dtype == torch.float32
    assert torch.as_tensor(np.arange(3.0)).dtype == torch.float32
    assert torch.zeros(2, device="cuda", dtype=torch.int64).dtype == torch.int64
    events = [e for e in torchdevice.report().entries if e.kind == "dtype"]
    assert {e.api for e in events} == {
        "torch.zeros",
        "torch.ones",
        "torch.tensor",
        "torch.as_tensor",
    }
    assert all(e.decided == "mps:0, float32" for e in events)


def test_mps_host_float64_rule_on_conversions(spy):
    t = torch.arange(3, dtype=torch.float64)
    model = nn.Linear(2, 2).double()
    torchdevice.enable(host=Host.mps())
    assert t.to("cuda").dtype == torch.float32
    assert t.cuda().dtype == torch.float32
    assert t.to("cuda", torch.float64).dtype == torch.float32
    assert t.to(torch.int32).dtype == torch.int32  # stays on the CPU: no rule
    model.to("cuda")
    assert model.weight.dtype == torch.float32


def test_cpu_and_cuda_hosts_keep_float64(spy):
    torchdevice.enable(host=Host.cuda(1))
    assert torch.zeros(2, device="mps", dtype=torch.float64).dtype == torch.float64
    torchdevice.enable(host=Host.cpu())
    assert torch.zeros(2, device="mps", dtype=torch.float64).dtype == torch.float64


def test_mps_host_counts_torchs_native_fallback_warnings(spy):
    import warnings

    torchdevice.enable(host=Host.mps())
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn(
            "The operator 'aten::erfinv.out' is not currently supported on the MPS backend "
            "and will fall back to run on the CPU. This may have performance implications.",
            UserWarning,
            stacklevel=1,
        )
    entries = [e for e in torchdevice.report().entries if e.kind == "fallback"]
    assert [(e.api, e.requested, e.decided, e.count) for e in entries] == [
        ("aten::erfinv.out", "mps", "cpu", 1)
    ]
    torchdevice.enable(host=Host.cpu())
    assert warnings.showwarning.__module__ == "warnings"  # reconfigured: observer removed


def test_mps_host_generator_bound_factories_draw_natively_then_move(spy):
    native = torch.randn(3, generator=torch.Generator().manual_seed(5))
    torchdevice.enable(host=Host.mps())
    generator = torch.Generator().manual_seed(5)
    calls = on(spy, lambda: torch.randn(3, generator=generator, requires_grad=True))
    assert calls == [MPS]  # drawn on the CPU, then moved: the spy sees the move
    drawn = torch.randn(3, generator=torch.Generator().manual_seed(5), device="cpu:-1")
    torch.testing.assert_close(drawn, native)  # the numbers a native run draws
    leaf = torch.rand(2, generator=generator, requires_grad=True)
    assert leaf.is_leaf
    assert leaf.requires_grad


def test_mps_host_pin_memory_of_an_accelerator_tensor_is_a_no_op(spy):
    torchdevice.enable(host=Host.mps())
    on_device = torch.ones(2)  # implicit: on the accelerator (meta under the spy)
    assert on_device.pin_memory() is on_device
