"""The dispatcher-level net (:mod:`torchdevice.net`) on this CPU-only build.

Device requests the function mode never sees (TorchScript, code that switches function
modes off, ``torch.ops.aten``) still reach the dispatcher's allocation ops, where the net
places them through the policy. Each test checks where the tensor landed, its values
against a CPU reference, and the report row.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import zeros as zeros_bound_before_enable

import torchdevice
from torchdevice.patches import net
from torchdevice.redirecting.standing import standing_of


def _script(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``torch.jit.script``, which 2.13 deprecates (the suite turns that into an error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(fn)


@_script
def scripted(n: int) -> torch.Tensor:
    return torch.zeros(n, device="cuda") + torch.arange(n, device="cuda")


@_script
def scripted_zeros(n: int) -> torch.Tensor:
    return torch.zeros(n, device="cuda")


@_script
def scripted_like(x: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(x, device="cuda") * 2


@_script
def scripted_mps(n: int) -> torch.Tensor:
    return torch.full([n], 7.0, device="mps")


#: The tests below ask for CUDA and MPS tensors: on a build with either, torch serves them
#: itself (a CUDA build is covered by test_net_gpu.py: MPS requests land on CUDA there).
cpu_build = pytest.mark.skipif(
    torch.backends.cuda.is_built() or torch.backends.mps.is_built(),
    reason="needs a torch build without CUDA and MPS kernels",
)


def _kernel_on(key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", key)


def _rows(api: str) -> list:
    return [e for e in torchdevice.report().entries if e.api == api]


def _line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (where a report row must point)."""
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text and "_line_of" not in text)


@cpu_build
def test_the_net_covers_exactly_the_keys_this_build_lacks():
    assert not torch.cuda.is_available()
    assert net.dispatch_keys() == ("CUDA", "MPS")  # a CPU build: neither has an allocation kernel
    assert not _kernel_on("CUDA")
    torchdevice.enable()
    assert net.installed()
    assert _kernel_on("CUDA")
    assert _kernel_on("MPS")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::add.Tensor", "CUDA")
    torchdevice.disable()
    assert not net.installed()
    assert not _kernel_on("CUDA")
    assert not _kernel_on("MPS")


@cpu_build
def test_torchscript_factories_land_on_the_host_device():
    with pytest.raises(NotImplementedError, match="CUDA"):  # natively: no CUDA kernels
        scripted(4)
    torchdevice.enable()
    result = scripted(4)  # net: scripted
    assert result.device == torch.device("cpu")
    torch.testing.assert_close(result, torch.arange(4, dtype=torch.float32))
    fresh = scripted_zeros(2)  # net: fresh
    assert standing_of(fresh) == "device"  # it stands for the CUDA tensor it was asked to be
    host_copy = fresh.cpu()  # so a transfer to the host is an independent copy
    assert host_copy is not fresh
    host_copy.add_(1)
    assert torch.equal(fresh, torch.zeros(2))
    assert torch.equal(scripted_like(torch.zeros(2, 3)), torch.full((2, 3), 2.0))  # net: like
    assert torch.equal(scripted_mps(2), torch.full((2,), 7.0))  # net: mps
    line = _line_of("# net: scripted")
    (row,) = [e for e in _rows("aten::empty.memory_format") if e.site.lineno == line]
    assert row.site.filename == __file__
    assert row.site.function == "test_torchscript_factories_land_on_the_host_device"
    assert (row.decided, row.kind) == ("cpu:0", "redirect")
    assert row.count == 2  # zeros and arange, each one allocation
    (like,) = _rows("aten::empty_strided")
    assert (like.site.lineno, like.requested) == (_line_of("# net: like"), "cuda")
    mps_rows = [e for e in _rows("aten::empty.memory_format") if e.requested == "mps:0"]
    assert [e.site.lineno for e in mps_rows] == [_line_of("# net: mps")]


@cpu_build
def test_aten_overloads_below_the_mode_are_placed_by_the_net():
    torchdevice.enable()
    made = torch.ops.aten.empty.memory_format([2, 3], device="cuda:1")  # net: aten
    strided = torch.ops.aten.empty_strided([2, 3], [1, 2], device="cuda")
    assert made.device == strided.device == torch.device("cpu")
    assert made.shape == strided.shape == (2, 3)
    assert strided.stride() == (1, 2)
    (row,) = _rows("aten::empty.memory_format")
    assert (row.site.lineno, row.requested, row.decided) == (
        _line_of("# net: aten"),
        "cuda:1",
        "cpu:0",
    )
    assert [e.requested for e in _rows("aten::empty_strided")] == ["cuda"]


@cpu_build
def test_a_zeros_bound_by_name_before_enabling_is_redirected():
    torchdevice.enable()
    result = zeros_bound_before_enable(3, device="cuda")
    assert result.device == torch.device("cpu")
    assert torch.equal(result, torch.zeros(3))


@cpu_build
def test_compiled_eager_backend_under_the_mode():
    def build(n: int) -> torch.Tensor:
        return torch.ones(n, device="cuda") * torch.arange(n, device="cuda")

    torchdevice.enable()
    compiled = torch.compile(build, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(3), torch.arange(3, dtype=torch.float32))
    assert _rows("aten::empty.memory_format") == []  # the mode placed them: the net saw none


def _in_child(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter with this checkout's torchdevice; its last
    stdout line is JSON. For calls that reach torch's Python bindings without a function
    mode: torch then remembers CUDA as initialised for the whole process (see
    docs/limitations.md), which must not leak into the suite's own process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("ACTIVATE_TORCH_DEVICE", None)
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


_BELOW_THE_MODE = """
    import json, torch, torchdevice
    from torchdevice import activation
    from torchdevice.redirecting import mode

    torchdevice.enable()
    reference = torch.ones(2, 3)
    out = {}
    with torch._C.DisableTorchFunction():  # no function mode sees these calls
        made = {
            "zeros": torch.zeros(2, 3, device="cuda"),
            "ones_like": torch.ones_like(reference, device="cuda"),
            "new_full": reference.new_full((2, 3), 1.0, device="cuda:1"),
            "randn": torch.randn(2, 3, device="cuda"),
            "float64": torch.zeros(2, 3, device="cuda", dtype=torch.float64, pin_memory=True),
        }
    out["devices"] = {name: str(t.device) for name, t in made.items()}
    out["values"] = [
        torch.equal(made["zeros"], torch.zeros(2, 3)),
        torch.equal(made["ones_like"], reference),
        torch.equal(made["new_full"], reference),
    ]
    out["float64"] = [str(made["float64"].dtype), made["float64"].is_pinned()]

    def build(n):
        return torch.ones(n, device="cuda") * torch.arange(n, device="cuda")

    # The mode off this thread (as for code it never reaches): the net alone places it.
    active = activation._mode
    mode.remove(active)
    try:
        result = torch.compile(build, backend="eager", fullgraph=True)(3)
    finally:
        mode.push(active)
    out["compiled"] = [str(result.device), result.tolist()]
    out["rows"] = sorted(
        [e.api, e.requested, e.site.function, e.count]
        for e in torchdevice.report().entries
    )
    torchdevice.disable()
    try:
        torch.zeros(1, device="cuda")
    except Exception as error:
        out["after"] = type(error).__name__
    print(json.dumps(out))
"""


@cpu_build
def test_calls_below_the_mode_reach_the_net_in_a_child():
    out = _in_child(_BELOW_THE_MODE)
    assert set(out["devices"].values()) == {"cpu"}
    assert out["values"] == [True, True, True]
    assert out["float64"] == ["torch.float64", False]  # the CPU has float64; nothing to pin
    assert out["compiled"] == ["cpu", [0.0, 1.0, 2.0]]
    rows = out["rows"]
    assert ["aten::empty.memory_format", "cuda:1", "<module>", 1] in rows  # new_full
    assert ["aten::empty_strided", "cuda", "<module>", 1] in rows  # ones_like
    # In the compiled function (dynamo's frame of it), not in the graph's generated code.
    assert ["aten::empty.memory_format", "cuda", "build", 2] in rows
    # torch's bindings remembered CUDA as initialised (the facade answered their lazy init);
    # disable() makes them forget, so the native error after it is torch's own check.
    assert out["after"] == "AssertionError"


@cpu_build
def test_after_disable_the_native_error_returns():
    torchdevice.enable()
    assert scripted(2).device == torch.device("cpu")
    torchdevice.disable()
    with pytest.raises(NotImplementedError, match="'CUDA' backend"):
        scripted(2)


@cpu_build
def test_torchscript_and_aten_calls_leave_the_native_error_intact():
    torchdevice.enable()
    scripted(2)
    torch.ops.aten.empty.memory_format([2], device="cuda")
    torchdevice.disable()
    # Torch's own check, whatever this process did before: disable() makes torch's bindings
    # forget the CUDA initialisation the facade answered (see the child test above).
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        torch.zeros(2, device="cuda")
