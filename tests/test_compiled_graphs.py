"""Graphs inductor compiled under the function mode run with the mode off the stack
(torchdevice.patches.compiled_graphs): same values and devices as eager code, no
recompile, the mode stack as it was, a program's own mode above it untouched."""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

import torchdevice
from torchdevice.redirecting.mode import DeviceMode

pytestmark = pytest.mark.slow


def _mlp(device: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 16, device=device), nn.ReLU(), nn.Linear(16, 4, device=device)
    )


def _entries(run: Callable[[], object], calls: int) -> collections.Counter[str]:
    """The torch functions that entered torchdevice's mode during ``calls`` runs."""
    seen: collections.Counter[str] = collections.Counter()
    code = DeviceMode.__torch_function__.__code__

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code is code:
            seen[getattr(frame.f_locals["func"], "__name__", "?")] += 1

    sys.setprofile(profile)
    try:
        for _ in range(calls):
            run()
    finally:
        sys.setprofile(None)
    return seen


@pytest.fixture
def graphs() -> Iterator[Callable[[], int]]:
    """The number of graphs dynamo compiled so far (a fresh cache first)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    yield lambda: counters["stats"]["unique_graphs"]
    torch._dynamo.reset()


def test_a_compiled_forward_runs_without_entering_the_mode(graphs: Callable[[], int]) -> None:
    x_native = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _mlp("cpu")(x_native)
    torchdevice.enable(host="cpu")
    model = _mlp("cuda")  # CUDA-first code, on a CPU-only host
    x = x_native.to("cuda")
    compiled = torch.compile(model)
    with torch.no_grad():
        first = compiled(x)
        compiled_graphs = graphs()
        (mode,) = [m for m in _get_current_function_mode_stack() if isinstance(m, DeviceMode)]
        entries = _entries(lambda: compiled(x), 5)
        again = compiled(x)
        stack_after = _get_current_function_mode_stack()
    assert first.device == again.device == torch.device("cpu")
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(again, expected)
    # eager code still goes through the mode: the forward alone does not
    assert _entries(lambda: x.to("cuda"), 1)["to"] == 1
    assert entries == collections.Counter()
    assert stack_after[-1] is mode  # pushed back, the same object
    assert graphs() == compiled_graphs  # no recompile


class _Outer(TorchFunctionMode):
    """A program's own mode, entered inside torchdevice's: it counts what reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_the_mode_stays_where_another_mode_is_above_it(graphs: Callable[[], int]) -> None:
    """Only the innermost mode is taken off: a program's mode above it sees what it saw."""
    torchdevice.enable(host="cpu")
    model = _mlp("cuda")
    x = torch.ones(2, 16, device="cuda")
    outer = _Outer()
    with outer, torch.no_grad():
        compiled = torch.compile(model)
        expected = model(x)
        compiled(x)
        outer.calls = 0
        entries = _entries(lambda: compiled(x), 3)
        torch.testing.assert_close(compiled(x), expected)
    assert outer.calls > 0  # the generated code's kernels reached the program's mode
    assert entries["addmm"] == 3 * 2  # and torchdevice's, below it, as before
