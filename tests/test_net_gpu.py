"""The dispatcher-level net on a CUDA build: MPS requests below the mode land on CUDA.

Skipped without a CUDA GPU (run on the lent GPU machine).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import torchdevice
from torchdevice.patches import net

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_torchscript_mps_requests_land_on_cuda():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script, deprecated

        @torch.jit.script
        def scripted(n: int) -> torch.Tensor:
            return torch.arange(n, device="mps") * 2

    assert "CUDA" not in net.dispatch_keys()  # torch's own CUDA kernels stay in charge
    torchdevice.enable()
    result = scripted(3)
    assert result.device == torch.device("cuda", 0)
    assert torch.equal(result.cpu(), torch.tensor([0, 2, 4]))
    rows = [e for e in torchdevice.report().entries if e.api == "aten::empty.memory_format"]
    # "mps" goes to the current CUDA device, as "cuda" does (policy: SPEC's table), so the
    # row names "cuda"; the tensor itself is on cuda:0, the current device here.
    assert [(e.requested, e.decided, e.site.function) for e in rows] == [
        ("mps:0", "cuda", "test_torchscript_mps_requests_land_on_cuda")
    ]
    torchdevice.disable()
    with pytest.raises((NotImplementedError, RuntimeError)):
        scripted(3)
