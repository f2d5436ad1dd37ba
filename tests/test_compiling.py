"""torchdevice's per-call compile check agrees with ``torch.compiler.is_compiling()``."""

from __future__ import annotations

import pytest
import torch

from torchdevice.redirecting import compiling


def test_eager_code_agrees_with_torch():
    assert compiling.is_compiling() is torch.compiler.is_compiling() is False


def test_the_flag_torch_holds_while_compiling_or_exporting_is_read(monkeypatch):
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
    assert torch.compiler.is_compiling() is True
    assert compiling.is_compiling() is True


@pytest.mark.slow
def test_code_dynamo_traces_sees_it_true():
    def probe(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if compiling.is_compiling() and torch.compiler.is_compiling() else x - 1

    compiled = torch.compile(probe, backend="eager", fullgraph=True)
    assert torch.equal(compiled(torch.zeros(2)), torch.ones(2))
    assert torch.equal(probe(torch.zeros(2)), -torch.ones(2))
